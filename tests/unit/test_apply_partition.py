"""Parts of a parallel group (drc.apply.partition): transactions sharing a key stay together and
in stream order, independent ones spread over the workers, and a model run in any interleaving
of the parts ends where the stream in order does."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from drc.apply import applied_set
from drc.apply.partition import split
from drc.core.events import Op, RowChange, Transaction
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.scn import SCN
from drc.core.target_table import TargetTable

M = TargetTable("db", "m", ("id", "u", "v"), ("id",), unique_keys=(("u",),))
P = TargetTable("db", "p", ("id", "v"), ("id",))
K = TargetTable("db", "k", ("a", "b"), ())  # keyless
PARENT = TargetTable("db", "parent", ("id",), ("id",), keeps_order=True)
CHILD = TargetTable("db", "child", ("id", "parent"), ("id",), keeps_order=True)
TABLES = {t.table: t for t in (M, P, K, PARENT, CHILD)}


def describe(schema: str, table: str) -> TargetTable:
    return TABLES[table]


def change(table: TargetTable, op: Op, before: Any = None, after: Any = None) -> RowChange:
    image = lambda values: None if values is None else dict(zip(table.columns, values, strict=True))  # noqa: E731
    return RowChange(table.schema, table.table, op, image(before), image(after))


def txn(n: int, *changes: RowChange, fragment: int = 0, last: bool = True) -> Transaction:
    return Transaction(SCN(1, 1, 1, n), 1, None, 0, changes, fragment=fragment, last_fragment=last)


def scns(part: list[Transaction]) -> list[int]:
    return [t.scn.log_pos for t in part]


def test_transactions_on_one_key_stay_in_one_part_in_order() -> None:
    group = [
        txn(1, change(P, Op.INSERT, after=(1, "a"))),
        txn(2, change(P, Op.INSERT, after=(2, "b"))),
        txn(3, change(P, Op.UPDATE, (1, "a"), (1, "c"))),
        txn(4, change(P, Op.DELETE, (2, "b"))),
        txn(5, change(P, Op.INSERT, after=(3, "d"))),
    ]
    parts = split(group, describe, 4)
    assert sorted(scns(p) for p in parts) == [[1, 3], [2, 4], [5]]


def test_a_table_with_unique_keys_and_a_key_change_join_transactions() -> None:
    # Every change of a table with UNIQUE secondary keys touches one key for the table
    # (drc.apply.shapes: a replay's target may hold unique values the images do not show).
    group = [
        txn(1, change(M, Op.INSERT, after=(1, "x", 0))),
        txn(2, change(M, Op.DELETE, (1, "x", 0))),
        txn(3, change(M, Op.INSERT, after=(2, "X ", 0))),  # the same u, folded
        txn(4, change(P, Op.UPDATE, (7, "a"), (8, "a"))),
        txn(5, change(P, Op.INSERT, after=(7, "b"))),  # the key txn 4 moved away from
        txn(6, change(M, Op.INSERT, after=(3, None, 0)), change(M, Op.INSERT, after=(4, None, 0))),
    ]
    parts = split(group, describe, 8)
    assert sorted(scns(p) for p in parts) == [[1, 2, 3, 6], [4, 5]]


def test_keyless_tables_and_tables_that_keep_order_serialise() -> None:
    group = [
        txn(1, change(K, Op.INSERT, after=(1, 1))),
        txn(2, change(PARENT, Op.INSERT, after=(1,))),
        txn(3, change(K, Op.INSERT, after=(2, 2))),
        txn(4, change(CHILD, Op.INSERT, after=(9, 1))),
        txn(5, change(P, Op.INSERT, after=(1, "z"))),
    ]
    parts = split(group, describe, 8)
    assert sorted(scns(p) for p in parts) == [[1, 3], [2, 4], [5]]


def test_fragments_of_one_transaction_are_one_and_tombstones_add_no_key() -> None:
    tomb = RowChange(CHECKPOINT_SCHEMA, "tomb_x_db_p", Op.INSERT, None, {"k": 1})
    group = [
        txn(1, change(P, Op.INSERT, after=(1, "a")), fragment=0, last=False),
        txn(2, change(P, Op.INSERT, after=(2, "a"))),
        txn(1, change(P, Op.INSERT, after=(3, "a")), fragment=1),
        txn(4, change(P, Op.INSERT, after=(3, "b")), tomb),
        txn(5, change(P, Op.INSERT, after=(5, "b")), tomb),
    ]
    parts = split(group, describe, 8)
    assert sorted(scns(p) for p in parts) == [[1, 1, 4], [2], [5]]


def test_one_worker_or_everything_dependent_is_one_part() -> None:
    group = [txn(n, change(P, Op.INSERT, after=(n, "a"))) for n in range(1, 6)]
    assert split(group, describe, 1) == [group]
    chained = [txn(n, change(P, Op.UPDATE, (1, str(n)), (1, str(n + 1)))) for n in range(1, 6)]
    assert split(chained, describe, 4) == [chained]
    assert split([], describe, 4) == []


def test_parts_are_balanced_by_rows_and_never_more_than_workers() -> None:
    inserts = lambda n: (change(P, Op.INSERT, after=(n * 100 + k, "a")) for k in range(n))  # noqa: E731
    group = [txn(n, *inserts(n)) for n in range(1, 9)]
    parts = split(group, describe, 3)
    assert len(parts) == 3
    loads = sorted(sum(len(t.changes) for t in p) for p in parts)
    assert loads[-1] - loads[0] <= 8
    assert sorted(t.scn for p in parts for t in p) == [t.scn for t in group]


OPS = st.lists(
    st.tuples(st.sampled_from(["ins", "upd", "del", "move"]), st.integers(0, 5), st.integers(0, 5)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(OPS, st.integers(2, 5), st.integers(0, 10_000))
def test_any_interleaving_of_the_parts_ends_as_the_stream(
    ops: list[tuple[str, int, int]], workers: int, seed: int
) -> None:
    """Rows of P by key, each transaction one change valid against the model: applying the
    parts interleaved at random gives the rows of applying the stream in order."""
    rows: dict[int, str] = {}
    group: list[Transaction] = []
    for n, (kind, a, b) in enumerate(ops, start=1):
        if kind == "ins" and a not in rows:
            rows[a] = f"v{n}"
            group.append(txn(n, change(P, Op.INSERT, after=(a, rows[a]))))
        elif kind == "upd" and a in rows:
            before, rows[a] = rows[a], f"v{n}"
            group.append(txn(n, change(P, Op.UPDATE, (a, before), (a, rows[a]))))
        elif kind == "del" and a in rows:
            group.append(txn(n, change(P, Op.DELETE, (a, rows.pop(a)))))
        elif kind == "move" and a in rows and b not in rows:
            value = rows.pop(a)
            rows[b] = value
            group.append(txn(n, change(P, Op.UPDATE, (a, value), (b, value))))
    parts = [list(p) for p in split(group, describe, workers)]
    assert len(parts) <= workers
    rng = random.Random(seed)
    model: dict[int, str] = {}
    while any(parts):
        part = rng.choice([p for p in parts if p])
        for c in part.pop(0).changes:
            if c.before is not None:
                assert model.pop(c.before["id"]) == c.before["v"]  # found as the stream left it
            if c.after is not None:
                assert c.after["id"] not in model
                model[c.after["id"]] = c.after["v"]
    assert model == rows


def test_applied_parts_beyond_the_checkpoint_are_the_ones_skipped() -> None:
    at = lambda pos: SCN(1, 1, 1, pos)  # noqa: E731
    rows = [
        (str(at(100)), f"{at(90)} {at(95)}"),  # a group the checkpoint covers: says nothing
        (str(at(200)), f"{at(110)} {at(150)} {at(105)}"),  # the half-written group
        (str(at(200)), f"{at(120)}"),
    ]
    assert applied_set.beyond(rows, at(105)) == {at(110), at(150), at(120)}
    statement = applied_set.PartRow("ch", 2, at(200), frozenset({at(120), at(110)})).upsert()
    assert statement.params == ("ch", 2, str(at(200)), f"{at(110)} {at(120)}")
