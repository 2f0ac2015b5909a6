"""The apply decision engine, without servers: each policy's decisions, and a table-driven
check that the engine decides exactly what the streaming apply decided before it existed
(the conflict engine's resolution, then the planner, change by change)."""

from __future__ import annotations

import datetime as dt
import itertools
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from drc.apply.engine import ApplyEngine, Decision, KnownTables, Pending
from drc.apply.plan import Delete, Insert, NoPrimaryKey, Planner, Update, Upsert, Write
from drc.conflicts.engine import ConflictEngine
from drc.conflicts.policies import Policies, TablePolicy
from drc.conflicts.probes import Observed, Probe
from drc.conflicts.rules import Ranks, Version
from drc.core.events import RowChange, Transaction
from drc.core.scn import SCN
from drc.core.target_errors import MissingColumnError, MissingTableError, NoPrimaryKeyError
from drc.core.target_table import TargetTable
from tests.support.changes import delete as dele
from tests.support.changes import insert as ins
from tests.support.changes import update as upd

T0 = dt.datetime(2026, 3, 1, 12, 0, 0)
COMMIT = int(T0.replace(tzinfo=dt.UTC).timestamp()) + 1
KEYED = TargetTable("db", "t", ("id", "v", "ts"), ("id",))
KEYLESS = TargetTable("db", "log", ("a", "f"), (), frozenset({"f"}))
TABLES = KnownTables({("db", "t"): KEYED, ("db", "log"): KEYLESS})
LWW = TablePolicy("lww", "ts")


def at(ms: int) -> dt.datetime:
    return T0 + dt.timedelta(milliseconds=ms)


def row(id: int = 1, v: str = "a", ms: int = 0) -> dict[str, Any]:
    return {"id": id, "v": v, "ts": at(ms)}


_positions = itertools.count(1000, 100)


def txn(*changes: RowChange) -> Transaction:
    return Transaction(SCN(3, 2, 7, next(_positions)), 2, None, COMMIT, tuple(changes))


def conflict_engine(policy: TablePolicy | None, tables: Any = TABLES) -> ConflictEngine | None:
    if policy is None:
        return None
    return ConflictEngine(
        Policies([("db.t", policy)]), Ranks(["dc1", "dc2"]), channel="from-dc2",
        origin="dc2", datacenter="dc1", tables=lambda s, t: tables.table(s, t),
    )  # fmt: skip


def engine(
    policy: TablePolicy | None = None, no_primary_key: NoPrimaryKey = "refuse"
) -> ApplyEngine:
    return ApplyEngine(TABLES, no_primary_key, conflict_engine(policy))


Local = Mapping[int, dict[str, Any]]
Tombs = Mapping[int, tuple[Any, str]]


def observed(probes: Sequence[Probe], local: Local, tombs: Tombs) -> list[Observed]:
    """What the target answers: Python equality stands in for the server's ``<=>``."""
    out = []
    for probe in probes:
        found = local.get(probe.key[0])
        same = tuple(found is not None and dict(found) == dict(i) for i in probe.images)
        stone = tombs.get(probe.key[0])
        out.append(Observed(found, same, None if stone is None else Version(*stone)))
    return out


def decide(
    eng: ApplyEngine,
    *transactions: Transaction,
    local: Local | None = None,
    tombs: Tombs | None = None,
) -> Decision:
    pending = eng.prepare(list(transactions))
    return eng.decide(pending, observed(pending.probes, local or {}, tombs or {}))


def shown(write: Write) -> str:
    """A write in a compact form: its kind, table, and the values it binds."""
    name = write.table.table
    if isinstance(write, Upsert | Insert):
        kind = "upsert" if isinstance(write, Upsert) else "insert"
        return f"{kind} {name} {[list(r) for r in write.rows]}"
    if isinstance(write, Update):
        fallback = shown(write.insert).split(" ", 1)[0]
        frees = " freeing" if write.delete_before is not None else ""
        where = list(write.match.params)
        return f"update {name} {list(write.values)} where {where} or {fallback}{frees}"
    assert isinstance(write, Delete)
    return f"delete {name} {list(write.match.params)} x{write.count}"


def decisions(decision: Decision) -> tuple[list[str], list[tuple[str, str]], list[Any]]:
    return (
        [shown(w) for w in decision.writes],
        [(e.kind, e.decision) for e in decision.entries],
        [(w.key, w.version.stamp, w.version.datacenter) for w in decision.tombstones],
    )


# ------------------------------------------------------------------ idempotent replay (no policy)


def test_inserts_are_merged_upserts_and_updates_match_their_before_key() -> None:
    out = decide(
        engine(),
        txn(ins(row(1)), ins(row(2))),
        txn(upd(row(1), row(1, "b")), upd(row(2), row(3, "c")), dele(row(4)), dele(row(5))),
    )
    assert decisions(out)[0] == [
        f"upsert t [[1, 'a', {at(0)!r}], [2, 'a', {at(0)!r}]]",
        f"update t [1, 'b', {at(0)!r}] where [1] or upsert",
        f"update t [3, 'c', {at(0)!r}] where [2] or upsert freeing",
        "delete t [4, 5] x2",
    ]
    assert out.counts.changes == 6 and out.counts.writes == 4 and out.counts.conflicts == 0
    assert out.entries == [] and out.tombstones == [] and out.log_statements() == []


def test_a_table_without_a_policy_needs_no_probe() -> None:
    pending = engine(LWW).prepare([txn(ins(row(1), table="log"))])
    assert pending.probes == []


# ------------------------------------------------------------------ keyless tables


def test_a_keyless_table_is_refused_unless_matched_by_whole_row() -> None:
    with pytest.raises(NoPrimaryKeyError, match="no_primary_key"):
        decide(engine(), txn(ins({"a": 1, "f": 1.5}, table="log")))


def test_keyless_changes_match_one_whole_row_with_floats_in_single_precision() -> None:
    single = struct.unpack("<f", struct.pack("<f", 1.1))[0]
    out = decide(
        engine(no_primary_key="match_whole_row"),
        txn(
            ins({"a": 1, "f": 1.1}, table="log"),
            ins({"a": 1, "f": 1.1}, table="log"),  # an identical row is another row
            upd({"a": 1, "f": 1.1}, {"a": 2, "f": 1.1}, table="log"),
            dele({"a": None, "f": 1.1}, table="log"),
            dele({"a": None, "f": 1.1}, table="log"),  # one row each: never merged
        ),
    )
    assert decisions(out)[0] == [
        "insert log [[1, 1.1], [1, 1.1]]",
        f"update log [2, 1.1] where [1, {single!r}] or insert",
        f"delete log [None, {single!r}] x1",
        f"delete log [None, {single!r}] x1",
    ]
    assert all("LIMIT 1" in w.statement().sql for w in list(out.writes)[1:])


# ------------------------------------------------------------------ table definitions


def test_a_column_the_definition_lacks_is_read_again_once_before_failing() -> None:
    class Altered:
        def __init__(self) -> None:
            self.refreshed = 0

        def table(self, schema: str, table: str, refresh: bool = False) -> TargetTable:
            self.refreshed += refresh
            columns = ("id", "v", "ts", "new") if refresh else ("id", "v", "ts")
            return TargetTable(schema, table, columns, ("id",))

    tables = Altered()
    out = ApplyEngine(tables).decide(Pending([txn(ins({**row(1), "new": 5}))]))
    assert tables.refreshed == 1 and len(list(out.writes)) == 1
    with pytest.raises(MissingColumnError, match="'gone'"):
        ApplyEngine(tables).decide(Pending([txn(ins({**row(1), "gone": 5}))]))


def test_known_tables_name_a_missing_table() -> None:
    with pytest.raises(MissingTableError, match="db.nope"):
        decide(engine(), txn(ins(row(1), table="nope")))


# ------------------------------------------------------------------ policies


def test_lww_keeps_the_newer_row_and_logs_the_conflict() -> None:
    local = {1: row(1, "mine", ms=500)}
    older = decide(engine(LWW), txn(upd(row(1), row(1, "theirs", ms=100))), local=local)
    assert decisions(older) == ([], [("update-update", "local")], [])
    newer = decide(engine(LWW), txn(upd(row(1), row(1, "theirs", ms=900))), local=local)
    assert decisions(newer)[:2] == (
        [f"upsert t [[1, 'theirs', {at(900)!r}]]"],
        [("update-update", "incoming")],
    )
    assert newer.counts.conflicts == 1 and len(newer.log_statements()) == 1


def test_lww_equal_timestamps_go_to_the_first_datacenter_in_priority() -> None:
    local = {1: row(1, "mine", ms=500)}
    out = decide(engine(LWW), txn(upd(row(1), row(1, "theirs", ms=500))), local=local)
    assert decisions(out)[1] == [("update-update", "local")]  # dc1 (local) comes first
    assert "dc1 comes first" in out.entries[0].reason


def test_lww_delete_writes_its_tombstone_and_an_older_insert_loses_to_it() -> None:
    stamp = at(700)
    out = decide(engine(LWW), txn(dele(row(1))), local={1: row(1)})
    assert decisions(out)[0] == ["delete t [1] x1"]
    assert out.counts.fallback_stamps == 1 and out.counts.tombstones == 1
    assert len(out.log_statements()) == 1  # the tombstone upsert, no conflict
    late = decide(engine(LWW), txn(ins(row(1, ms=100))), tombs={1: (stamp, "dc1")})
    assert decisions(late) == ([], [("insert-delete", "local")], [])


@pytest.mark.parametrize(
    ("policy", "written", "decision"),
    [
        (TablePolicy("overwrite"), [f"upsert t [[1, 'theirs', {at(0)!r}]]"], "incoming"),
        (TablePolicy("keep"), [], "local"),
    ],
)
def test_overwrite_and_keep(policy: TablePolicy, written: list[str], decision: str) -> None:
    out = decide(engine(policy), txn(upd(row(1), row(1, "theirs"))), local={1: row(1, "mine")})
    assert decisions(out)[:2] == (written, [("update-update", decision)])


def test_a_resolver_row_is_written_and_none_deletes() -> None:
    def merge(local: Any, before: Any, after: Any, context: Any) -> Any:
        return None if after["v"] == "drop" else {**local, "v": local["v"] + after["v"]}

    policy = TablePolicy("resolver", None, merge, "m:merge")
    local = {1: row(1, "mine")}
    merged = decide(engine(policy), txn(upd(row(1), row(1, "+"))), local=local)
    assert decisions(merged)[:2] == (
        [f"upsert t [[1, 'mine+', {at(0)!r}]]"],
        [("update-update", "custom")],
    )
    dropped = decide(engine(policy), txn(upd(row(1), row(1, "drop"))), local=local)
    assert decisions(dropped)[:2] == (["delete t [1] x1"], [("update-update", "delete")])


# ------------------------------------------------------------------ same as streaming before


def streaming_before(
    policy: TablePolicy | None,
    no_primary_key: NoPrimaryKey,
    transactions: list[Transaction],
    local: Local,
    tombs: Tombs,
) -> tuple[list[str], list[tuple[str, str]], list[Any]]:
    """What GroupWriter.write decided before the engine: resolve, then plan each change."""
    planner = Planner(no_primary_key)
    changes: Any = (c for t in transactions for c in t.changes)
    entries: list[Any] = []
    stones: list[Any] = []
    conflicts = conflict_engine(policy)
    if conflicts is not None:
        prepared = conflicts.prepare(transactions)
        resolution = prepared.resolve(observed(prepared.probes, local, tombs))
        changes, entries, stones = resolution.changes, resolution.entries, resolution.tombstones
    writes: list[Write] = []
    for change in changes:
        writes.extend(planner.add(change, TABLES.table(change.schema, change.table)))
    writes.extend(planner.finish())
    return (
        [shown(w) for w in writes],
        [(e.kind, e.decision) for e in entries],
        [(w.key, w.version.stamp, w.version.datacenter) for w in stones],
    )


def _merge(local: Any, before: Any, after: Any, context: Any) -> Any:
    return None if local is None else {**local, "v": "merged"}


POLICIES = [
    None,
    LWW,
    TablePolicy("overwrite"),
    TablePolicy("keep"),
    TablePolicy("resolver", "ts", _merge, "m:merge"),
]
WORKLOADS: list[tuple[str, list[list[RowChange]]]] = [
    ("insert", [[ins(row(1, "x", 200)), ins(row(2, "y", 200))]]),
    ("replayed insert", [[ins(row(1, "a", 0))]]),
    ("update as expected", [[upd(row(1), row(1, "b", ms=-100))]]),
    ("update older", [[upd(row(2), row(2, "b", ms=50))]]),  # the local row 2 differs
    ("update newer", [[upd(row(2), row(2, "b", ms=900))]]),
    ("update equal", [[upd(row(2), row(2, "b", ms=100))]]),
    ("update of a missing row", [[upd(row(3), row(3, "b", ms=900))]]),
    ("key change", [[upd(row(1), row(4, "b", ms=900))]]),
    ("delete", [[dele(row(1))], [dele(row(2))]]),
    ("delete of a changed row", [[dele(row(2, "old"))]]),
    ("insert after a delete", [[ins(row(5, "z", 100))]]),
    (
        "hot row",
        [
            [upd(row(1), row(1, "b", 300))],
            [upd(row(1, "b", 300), row(1, "c", 400))],
            [dele(row(1, "c", 400))],
            [ins(row(1, "d", 500))],
        ],
    ),
    (
        "mixed keyless",
        [
            [
                ins({"a": 1, "f": 0.1}, "log"),
                upd({"a": 1, "f": 0.1}, {"a": 2, "f": 0.2}, "log"),
                dele({"a": 2, "f": 0.2}, "log"),
                ins(row(6, "k", 50)),
            ]
        ],
    ),
]
LOCAL = {1: row(1, "a", 0), 2: row(2, "mine", 100)}
TOMBS = {5: (at(600), "dc1")}


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: "none" if p is None else p.name)
@pytest.mark.parametrize(("name", "workload"), WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_the_engine_decides_what_streaming_decided(
    policy: TablePolicy | None, name: str, workload: list[list[RowChange]]
) -> None:
    transactions = [txn(*changes) for changes in workload]
    expected = streaming_before(policy, "match_whole_row", transactions, LOCAL, TOMBS)
    got = decide(
        ApplyEngine(TABLES, "match_whole_row", conflict_engine(policy)),
        *transactions,
        local=LOCAL,
        tombs=TOMBS,
    )
    assert decisions(got) == expected
    assert got.counts.writes == len(expected[0]) and got.counts.conflicts == len(expected[1])


def test_lazy_writes_are_the_same_writes_counted_once_consumed() -> None:
    transactions = [txn(ins(row(1)), ins(row(2))), txn(upd(row(1), row(1, "b")), dele(row(2)))]
    eager = decide(engine(LWW), *transactions)
    lazy_engine = engine(LWW)
    pending = lazy_engine.prepare(transactions)
    lazy = lazy_engine.decide(pending, observed(pending.probes, {}, {}), lazy=True)
    assert lazy.counts.writes == 0  # nothing planned yet
    assert [shown(w) for w in lazy.writes] == [shown(w) for w in eager.writes]
    assert lazy.counts == eager.counts and lazy.counts.changes == 4
