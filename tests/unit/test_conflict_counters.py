"""Counter columns (conflicts.tables.delta_columns, drc.conflicts.counters) without a server.

Probes are answered from a stated local row, as the target would (one flag per image: the row
equals it on every column the image has). The property test runs N datacenters, each with its
own copy of a row and a channel from every other, through random interleavings of local
increments and deliveries, and checks every copy ends with the sum.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from drc.apply.plan import Planner, Update, run
from drc.conflicts.counters import CounterRangeError, CounterValueError
from drc.conflicts.engine import ConflictEngine, Resolution
from drc.conflicts.policies import Policies, TablePolicy
from drc.conflicts.probes import Probe, observe
from drc.conflicts.rules import Ranks
from drc.conflicts.settings import ConflictTableConfig
from drc.core.events import CounterUpdate, Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.core.target_table import TargetTable
from drc.mysql import sql
from tests.support.changes import delete, insert, update

COLUMNS = ("id", "v", "ts", "n")
BIGINT = (-(1 << 63), (1 << 63) - 1)
TABLE = TargetTable("db", "t", COLUMNS, ("id",), bounds=(("n", *BIGINT),))
LWW = TablePolicy("lww", "ts", delta_columns=("n",))
_positions = itertools.count(1000, 100)


def row(n: Any = 10, v: str = "a", ts: int = 0, id: int = 1) -> dict[str, Any]:
    return {"id": id, "v": v, "ts": ts, "n": n}


def engine(
    policy: TablePolicy = LWW,
    origin: str = "dc2",
    datacenter: str = "dc1",
    priority: tuple[str, ...] = ("dc1", "dc2"),
    table: TargetTable = TABLE,
) -> ConflictEngine:
    return ConflictEngine(
        Policies([("db.t", policy)]), Ranks(priority), channel=f"from-{origin}", origin=origin,
        datacenter=datacenter, tables=lambda schema, name: table,
    )  # fmt: skip


def txn(*changes: RowChange) -> Transaction:
    return Transaction(SCN(3, 2, 7, next(_positions)), 2, None, 1_800_000_000, tuple(changes))


def answer(probe: Probe, local: Mapping[str, Any] | None) -> Any:
    """What the target holding ``local`` (and no other row) answers."""
    if local is not None and (local["id"],) != probe.key:
        local = None
    flags = [
        int(local is not None and all(local[c] == v for c, v in image.items()))
        for image in probe.images
    ] or [1]
    names = [f"flag{i}" for i in range(len(flags))] + list(probe.table.columns)
    rows = [] if local is None else [(*flags, *(local[c] for c in probe.table.columns))]
    results = [(names, rows)]
    if probe.tombstone:
        results.append((["deleted_at", "origin"], []))
    return results


def resolve(eng: ConflictEngine, local: Mapping[str, Any] | None, *changes: RowChange) -> Any:
    prepared = eng.prepare([txn(*changes)])
    return prepared.resolve([observe(p, answer(p, local)) for p in prepared.probes])


def applied(local: dict[str, Any] | None, resolution: Resolution) -> dict[str, Any] | None:
    """The row the target holds once the resolution's writes ran, as the server runs them."""
    for change in resolution.changes:
        if isinstance(change, CounterUpdate):
            assert local is not None and change.after is not None
            local = dict(local)
            local.update({c: change.after[c] for c in change.assigned})
            for column, amount in change.added:
                local[column] += amount
        else:
            local = None if change.op is Op.DELETE else dict(change.after or {})
    return local


# ------------------------------------------------------------------ decisions


def test_an_update_of_a_row_that_is_there_adds_its_difference() -> None:
    resolution = resolve(engine(), row(n=7), update(row(n=10), row(n=13, v="b")))
    (write,) = resolution.changes
    assert isinstance(write, CounterUpdate)
    assert write.added == (("n", 3),) and write.assigned == ("v", "ts") and write.kept == ()
    assert resolution.entries == []
    assert applied(row(n=7), resolution) == row(n=10, v="b")


def test_a_concurrent_increment_alone_is_no_conflict() -> None:
    # The local row differs from the before image only in the counter.
    resolution = resolve(engine(), row(n=7), update(row(n=10), row(n=6)))
    assert resolution.entries == []
    assert applied(row(n=7), resolution) == row(n=3)


def test_the_policy_decides_the_other_columns_and_the_amount_is_added_either_way() -> None:
    local = row(n=7, v="mine", ts=50)
    older = update(row(n=10, ts=10), row(n=12, v="theirs", ts=20))
    resolution = resolve(engine(), local, older)
    (entry,) = resolution.entries
    assert (entry.kind, entry.decision) == ("update-update", "local")
    assert "counters added to: n +2" in entry.reason
    (write,) = resolution.changes
    assert write.kept == ("v", "ts") and write.assigned == ()
    assert applied(local, resolution) == row(n=9, v="mine", ts=50)
    newer = update(row(n=10, ts=10), row(n=12, v="theirs", ts=90))
    resolution = resolve(engine(), local, newer)
    assert [e.decision for e in resolution.entries] == ["incoming"]
    assert applied(local, resolution) == row(n=9, v="theirs", ts=90)


def test_an_insert_onto_a_row_that_is_there_counts_its_value() -> None:
    resolution = resolve(engine(), row(n=5), insert(row(n=4)))
    assert resolution.entries == []  # the same other columns: no conflict
    assert applied(row(n=5), resolution) == row(n=9)
    resolution = resolve(engine(), row(n=5, v="x", ts=3), insert(row(n=4, v="y", ts=1)))
    assert [(e.kind, e.decision) for e in resolution.entries] == [("insert-insert", "local")]
    assert applied(row(n=5, v="x", ts=3), resolution) == row(n=9, v="x", ts=3)


def test_an_insert_of_a_missing_row_writes_it_whole() -> None:
    resolution = resolve(engine(), None, insert(row(n=4)))
    assert [(c.op, type(c)) for c in resolution.changes] == [(Op.INSERT, RowChange)]
    assert applied(None, resolution) == row(n=4)


def test_an_update_of_a_missing_row_is_decided_whole_by_the_policy() -> None:
    resolution = resolve(engine(), None, update(row(n=10), row(n=12, ts=5)))
    assert [(e.kind, e.decision) for e in resolution.entries] == [("update-delete", "incoming")]
    assert not any(isinstance(c, CounterUpdate) for c in resolution.changes)
    assert applied(None, resolution) == row(n=12, ts=5)


def test_a_delete_compares_the_whole_row_counters_included() -> None:
    # The other side sees this side's increment as an update of the row it deleted: both sides
    # must call it a conflict, or one keeps the row and the other not.
    resolution = resolve(engine(), row(n=8), delete(row(n=10)))
    assert [(e.kind, e.decision) for e in resolution.entries] == [("delete-update", "incoming")]
    assert applied(row(n=8), resolution) is None
    assert resolve(engine(), row(n=10), delete(row(n=10))).entries == []


def test_several_changes_of_a_key_in_one_transaction_add_up() -> None:
    changes = [update(row(n=10), row(n=11)), update(row(n=11), row(n=15)), insert(row(n=1, id=2))]
    resolution = resolve(engine(), row(n=0), *changes)
    assert resolution.entries == []
    assert [c.added for c in resolution.changes if isinstance(c, CounterUpdate)] == [
        (("n", 1),),
        (("n", 4),),
    ]


def test_changes_in_a_snapshot_window_are_written_whole() -> None:
    eng = engine(TablePolicy("overwrite", delta_columns=("n",)))
    prepared = eng.prepare([txn(update(row(n=10), row(n=13)))], lambda scn, s, t: True)
    resolution = prepared.resolve([observe(p, answer(p, row(n=13))) for p in prepared.probes])
    assert [type(c) for c in resolution.changes] == [RowChange]
    assert applied(row(n=13), resolution) == row(n=13)


def test_decimal_amounts_are_exact_beyond_the_default_precision() -> None:
    # 45 digits: the default decimal context (28) would round every one of these sums.
    big, greatest = Decimal("12345678901234567890123456789012345.0000000001"), Decimal(10) ** 40
    table = TargetTable("db", "t", COLUMNS, ("id",), bounds=(("n", -greatest, greatest),))
    after = Decimal("12345678901234567890123456789012345.0000000003")
    local = Decimal("22345678901234567890123456789012345.0000000001")
    resolution = resolve(engine(table=table), row(n=local), update(row(n=big), row(n=after)))
    (write,) = resolution.changes
    assert write.added == (("n", Decimal("0.0000000002")),)


@pytest.mark.parametrize("bad", [None, 1.5])
def test_a_null_or_floating_counter_stops_the_channel(bad: Any) -> None:
    with pytest.raises(CounterValueError, match="counter column 'n' of db.t is"):
        resolve(engine(), row(n=1), update(row(n=bad), row(n=2)))
    with pytest.raises(CounterValueError, match="local row"):
        resolve(engine(), row(n=bad), update(row(n=1), row(n=2)))


def test_a_sum_beyond_the_column_stops_the_channel() -> None:
    tiny = TargetTable("db", "t", COLUMNS, ("id",), bounds=(("n", -128, 127),))
    with pytest.raises(CounterRangeError, match=r"would become 130, outside .*\[-128, 127\]"):
        resolve(engine(table=tiny), row(n=120), update(row(n=0), row(n=10)))


# ------------------------------------------------------------------ SQL


def test_the_counter_update_adds_and_keeps_columns_that_an_on_update_default_would_move() -> None:
    resolution = resolve(engine(), row(n=7, v="m", ts=50), update(row(ts=1), row(n=12, ts=2)))
    (write,) = Planner().add(resolution.changes[0], TABLE) + Planner().finish()
    assert isinstance(write, Update)
    statement = write.statement()
    assert statement.sql == (
        "UPDATE `db`.`t` SET `v` = `v`, `ts` = `ts`, `n` = `n` + %s WHERE `id` = %s"
    )
    assert statement.params == (2, 1)
    ran: list[str] = []
    effects = run(write, lambda s: ran.append(s.sql) or 0)  # type: ignore[func-returns-value]
    assert effects.missing_updates == 1 and ran[1].startswith("INSERT INTO `db`.`t`")


def test_add_to_quotes_names_and_binds_values() -> None:
    statement = sql.add_to(
        "d", "t`x", [("a", "v")], ["k%"], [("n", Decimal("1.5"))], sql.Statement("`id` = %s", (3,))
    )
    assert statement.sql == (
        "UPDATE `d`.`t``x` SET `a` = %s, `k%%` = `k%%`, `n` = `n` + %s WHERE `id` = %s"
    )
    assert statement.params == ("v", Decimal("1.5"), 3)


@pytest.mark.parametrize(
    ("data_type", "column_type", "bounds"),
    [
        ("tinyint", "tinyint(4)", (-128, 127)),
        ("int", "int(10) unsigned", (0, 4294967295)),
        ("bigint", "bigint(20)", BIGINT),
        ("decimal", "decimal(5,2)", (Decimal("-999.99"), Decimal("999.99"))),
        ("decimal", "decimal(5,2) unsigned", (Decimal(0), Decimal("999.99"))),
        ("float", "float", None),
        ("varchar", "varchar(10)", None),
    ],
)
def test_value_bounds(data_type: str, column_type: str, bounds: Any) -> None:
    assert sql.value_bounds(data_type, column_type) == bounds


# ------------------------------------------------------------------ config


def rule(**extra: Any) -> ConflictTableConfig:
    return ConflictTableConfig(table="db.t", **extra)


def test_delta_columns_go_with_lww_overwrite_and_keep() -> None:
    assert rule(policy="keep", delta_columns=["n", "m"]).delta_columns == ("n", "m")
    with pytest.raises(ValidationError, match="only used by policies lww, overwrite and keep"):
        rule(policy="resolver", resolver="m:f", delta_columns=["n"])
    with pytest.raises(ValidationError, match="names a column twice"):
        rule(policy="keep", delta_columns=["n", "N"])
    with pytest.raises(ValidationError, match="timestamp column"):
        rule(policy="lww", column="ts", delta_columns=["ts"])
    with pytest.raises(ValidationError, match="empty column"):
        rule(policy="keep", delta_columns=[""])


def test_policies_hand_the_counters_to_the_table() -> None:
    class Config:
        tables = (rule(policy="overwrite", delta_columns=["n"]),)

    found = Policies.from_config(Config())
    assert found.get("db", "t") == TablePolicy("overwrite", delta_columns=("n",))


# ------------------------------------------------------------------ convergence


class Datacenter:
    """One datacenter's copy of the row, and the channels that apply the others' changes."""

    def __init__(self, name: str, names: list[str], policy: TablePolicy, start: Any) -> None:
        self.name, self.row = name, row(n=start)
        self.channels = {
            origin: engine(policy, origin, name, tuple(names)) for origin in names if origin != name
        }

    def write(self, amounts: list[Any], stamp: int | None, value: str) -> Transaction:
        """A local transaction: each amount added by its own update; the last one also sets
        v and moves ts when ``stamp`` is given (ts never goes back: the lww triggers)."""
        changes = []
        for i, amount in enumerate(amounts):
            after = dict(self.row, n=self.row["n"] + amount)
            if stamp is not None and i == len(amounts) - 1:
                after.update(v=value, ts=max(self.row["ts"], stamp))
            changes.append(update(self.row, after))
            self.row = after
        return txn(*changes)

    def apply(self, origin: str, transaction: Transaction) -> None:
        prepared = self.channels[origin].prepare([transaction])
        seen = [observe(p, answer(p, self.row)) for p in prepared.probes]
        found = applied(self.row, prepared.resolve(seen))
        assert found is not None
        self.row = found


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[Any], Any]:
    count = draw(st.integers(2, 4))
    decimal = draw(st.booleans())
    amount = (
        st.decimals(-1000, 1000, places=2, allow_nan=False, allow_infinity=False)
        if decimal
        else st.integers(-1000, 1000)
    )
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, count - 1),  # which datacenter writes, or receives
                st.booleans(),  # write (True) or deliver its oldest pending change
                st.lists(amount, min_size=1, max_size=3),
                st.one_of(st.none(), st.integers(0, 50)),  # ts for a write that sets v
            ),
            max_size=40,
        )
    )
    start = Decimal("100.00") if decimal else 100
    return count, steps, start


@pytest.mark.parametrize("policy", ["lww", "overwrite", "keep"])
@settings(max_examples=150, deadline=None)
@given(history=histories(), seed=st.integers(0, 2**32))
def test_any_interleaving_of_increments_converges_to_the_sum(
    policy: str, history: tuple[int, list[Any], Any], seed: int
) -> None:
    count, steps, start = history
    names = [f"dc{i + 1}" for i in range(count)]
    table_policy = TablePolicy(policy, "ts" if policy == "lww" else None, delta_columns=("n",))
    dcs = {name: Datacenter(name, names, table_policy, start) for name in names}
    # What each datacenter still has to receive from each other one, in commit order.
    pending: dict[tuple[str, str], list[Transaction]] = {
        (a, b): [] for a in names for b in names if a != b
    }
    total = start
    for n, (who, writes, amounts, stamp) in enumerate(steps):
        dc = names[who]
        if writes:
            # Stamps unique per datacenter, so lww never ties on them, and later than what the
            # row holds (a write's ON UPDATE time is now: after what it overwrites).
            stamped = None
            if stamp is not None:
                held = dcs[dc].row["ts"]
                stamped = stamp * count + who
                while stamped <= held:
                    stamped += count
            transaction = dcs[dc].write(amounts, stamped, f"{dc}-{n}")
            total += sum(amounts)
            for other in names:
                if other != dc:
                    pending[(dc, other)].append(transaction)
            continue
        queues = [q for q in pending if q[1] == dc and pending[q]]
        if queues:
            origin, _ = random.Random(seed + n).choice(queues)
            dcs[dc].apply(origin, pending[(origin, dc)].pop(0))
    shuffle = random.Random(seed)
    while any(pending.values()):
        origin, dc = shuffle.choice([q for q in pending if pending[q]])
        dcs[dc].apply(origin, pending[(origin, dc)].pop(0))
    assert {dc.row["n"] for dc in dcs.values()} == {total}
    if policy == "lww":  # the other columns converge too, by their versions
        assert len({tuple(dc.row.items()) for dc in dcs.values()}) == 1
