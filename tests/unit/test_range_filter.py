"""A consumer-group range's share of a transaction: by key or by table, a key moved across
ranges split into a delete and an insert, and the barrier before a moved-in key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.partitions import key_partition, range_index, table_partition
from drc.core.range_filter import Barrier, RangeFilter
from drc.core.scn import SCN

COUNT = 8
S1, S2, S3 = SCN(1, 1, 1, 100), SCN(1, 1, 1, 200), SCN(1, 1, 1, 300)


def where(key: int) -> int:
    return range_index(key_partition("db", "t", (key,)), COUNT)


def rf(index: int, by_key: bool = True, checkpoints: dict[int, SCN] | None = None) -> RangeFilter:
    marks = checkpoints if checkpoints is not None else {i: S3 for i in range(COUNT)}
    return RangeFilter(index, COUNT, by_key, lambda schema, table, scn: ("id",), marks)


def upd(old: int, new: int) -> RowChange:
    return RowChange("db", "t", Op.UPDATE, {"id": old, "v": 1}, {"id": new, "v": 2})


def txn(*changes: RowChange, ddl: tuple[SchemaChange, ...] = ()) -> Transaction:
    return Transaction(S2, 1, None, 0, changes, ddl)


OLD = 1
NEW = next(k for k in range(2, 200) if where(k) != where(OLD))


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=30, unique=True))
def test_every_change_goes_to_exactly_one_range(keys: list[int]) -> None:
    t = txn(*[RowChange("db", "t", Op.INSERT, None, {"id": k}) for k in keys])
    shares = [rf(i).narrow(t, S1).changes for i in range(COUNT)]
    assert sorted(c.after["id"] for share in shares for c in share if c.after) == sorted(keys)
    for i, share in enumerate(shares):
        assert all(where(c.after["id"]) == i for c in share if c.after)


def test_a_key_moved_across_ranges_is_a_delete_and_an_insert() -> None:
    t = txn(upd(OLD, NEW))
    (delete,) = rf(where(OLD)).narrow(t, S1).changes
    (insert,) = rf(where(NEW)).narrow(t, S1).changes
    assert (delete.op, delete.before, delete.after) == (Op.DELETE, {"id": OLD, "v": 1}, None)
    assert (insert.op, insert.before, insert.after) == (Op.INSERT, None, {"id": NEW, "v": 2})
    others = [i for i in range(COUNT) if i not in (where(OLD), where(NEW))]
    assert all(not rf(i).narrow(t, S1).changes for i in others)


def test_an_update_keeping_its_range_and_ddl() -> None:
    same = next(k for k in range(2, 200) if where(k) == where(OLD))
    t = txn(upd(OLD, OLD), upd(OLD, same), ddl=(SchemaChange("db", "ALTER TABLE t ADD x INT"),))
    narrowed = rf(where(OLD)).narrow(t, S1)
    assert [c.op for c in narrowed.changes] == [Op.UPDATE, Op.UPDATE] and narrowed.ddl == ()
    plain = txn(upd(OLD, OLD))
    assert rf(where(OLD)).narrow(plain, S1) is plain


def test_the_new_range_waits_until_the_old_range_committed_what_came_before() -> None:
    t = txn(upd(OLD, NEW))
    behind = {i: S1 for i in range(COUNT)}
    behind[where(OLD)] = SCN.zero()
    waiting = rf(where(NEW), checkpoints=behind)
    with pytest.raises(Barrier) as stopped:
        waiting.narrow(t, S1)
    assert stopped.value.ranges == (where(OLD),) and stopped.value.needed == S1
    assert waiting.found is stopped.value
    rf(where(OLD), checkpoints=behind).narrow(t, S1)  # the old range never waits for it
    behind[where(OLD)] = S1  # committed everything before the move: the move passes
    assert rf(where(NEW), checkpoints=behind).narrow(t, S1).changes[0].op is Op.INSERT


def test_by_table_a_whole_table_goes_to_one_range() -> None:
    t = txn(upd(OLD, NEW), RowChange("db", "t", Op.INSERT, None, {"id": 5}))
    home = range_index(table_partition("db", "t"), COUNT)
    assert rf(home, by_key=False).narrow(t, S1) is t
    assert rf((home + 1) % COUNT, by_key=False).narrow(t, S1).changes == ()
