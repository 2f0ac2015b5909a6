"""The conflict engine (drc.apply.conflicts) without a server.

Each probe the engine asks for is answered the way the target would answer it, from a stated
local row and tombstone ("local row = X, tombstone = Y"): one flag per probe image (1 when the
row equals the image on every column the image has), then the row's columns; a second result
set with (deleted_at, origin) when the probe reads the tombstone too. The tests mirror the
end-to-end scenarios of tests/integration/test_conflicts.py at the pure level.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import sys
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.apply.engine import Decision
from drc.apply.stages import NameMap
from drc.conflicts import log, tombstones
from drc.conflicts.engine import ConflictEngine, Resolution, TombstoneWrite
from drc.conflicts.policies import POLICIES, Policies, TablePolicy
from drc.conflicts.probes import Probe, observe
from drc.conflicts.rules import (
    ConflictContext,
    Ranks,
    ResolverError,
    Version,
    derived_delete_stamp,
    load_resolver,
    stamp_key,
)
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.core.errors import ConfigError, FatalError
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.core.target_errors import ApplyError
from drc.core.target_table import TargetTable
from drc.core.values import ZeroDate
from tests.support.changes import delete, insert, update

UTC = dt.UTC
T0 = dt.datetime(2026, 3, 1, 12, 0, 0)  # naive UTC, as DATETIME(6) columns decode
COMMIT = int(T0.replace(tzinfo=UTC).timestamp()) + 1  # the origin's commit second: T0 + 1 s
COLUMNS = ("id", "v", "ts")
LWW = TablePolicy("lww", "ts")
NOTHING = Resolution()


def at(ms: float) -> dt.datetime:
    return T0 + dt.timedelta(milliseconds=ms)


def target(schema: str, table: str) -> TargetTable:
    return TargetTable(schema, table, COLUMNS, ("id",))


def row(id: int = 1, v: str = "a", ts: Any = None) -> dict[str, Any]:
    return {"id": id, "v": v, "ts": at(0) if ts is None else ts}


def make_engine(
    *rules: tuple[str, TablePolicy | None],
    origin: str = "dc2",
    datacenter: str = "dc1",
    tables: Any = target,
    names: NameMap | None = None,
) -> ConflictEngine:
    return ConflictEngine(
        Policies(list(rules or [("db.t", LWW)])),
        Ranks(["dc1", "dc2"]),
        channel=f"from-{origin}",
        origin=origin,
        datacenter=datacenter,
        tables=tables,
        names=names,
    )


_positions = itertools.count(1000, 100)


def txn(*changes: RowChange, timestamp: int = COMMIT) -> Transaction:
    return Transaction(SCN(3, 2, 7, next(_positions)), 2, None, timestamp, tuple(changes))


def tombstone_row(
    id: int, deleted_at: Any, origin: str = "dc2", schema: str = "db", table: str = "t"
) -> RowChange:
    """What the origin's delete trigger writes in the deleting transaction."""
    return RowChange(
        tombstones.SCHEMA,
        tombstones.name(schema, table),
        Op.INSERT,
        None,
        {
            "id": id,
            tombstones.COL_SCHEMA: schema,
            tombstones.COL_TABLE: table,
            tombstones.COL_DELETED_AT: deleted_at,
            tombstones.COL_ORIGIN: origin,
        },
    )


def answer(
    probe: Probe, local: Mapping[str, Any] | None, tombstone: tuple[Any, str] | None
) -> list[tuple[list[str], list[tuple[Any, ...]]]]:
    """The result sets the target returns for ``probe`` when it holds ``local``/``tombstone``."""
    flags = [
        int(local is not None and all(c in local and local[c] == v for c, v in image.items()))
        for image in probe.images
    ] or [1]
    names = [f"flag{i}" for i in range(len(flags))] + list(probe.table.columns)
    rows = [] if local is None else [(*flags, *(local[c] for c in probe.table.columns))]
    results = [(names, rows)]
    if probe.tombstone:
        found = [] if tombstone is None else [tombstone]
        results.append(([tombstones.COL_DELETED_AT, tombstones.COL_ORIGIN], found))
    return results


def run(
    engine: ConflictEngine,
    *transactions: Transaction,
    rows: Mapping[int, Mapping[str, Any]] | None = None,
    tombs: Mapping[int, tuple[Any, str]] | None = None,
    plain: Callable[[SCN, str, str], bool] | None = None,
) -> Resolution:
    """Prepare (``plain``: the snapshot windows), answer every probe from ``rows``/``tombs``
    (by id), resolve."""
    rows, tombs = rows or {}, tombs or {}
    prepared = engine.prepare(list(transactions), plain)
    seen = [observe(p, answer(p, rows.get(p.key[0]), tombs.get(p.key[0]))) for p in prepared.probes]
    return prepared.resolve(seen)


def decided(resolution: Resolution) -> list[tuple[str, str]]:
    return [(e.kind, e.decision) for e in resolution.entries]


def upserted(after: dict[str, Any], table: str = "t") -> RowChange:
    """The write of a winning incoming row: an INSERT, which the planner makes an upsert."""
    return RowChange("db", table, Op.INSERT, None, after)


def tomb_write(id: int, stamp: Any, origin: str = "dc2") -> TombstoneWrite:
    return TombstoneWrite(target("db", "t"), (id,), Version(stamp, origin))


def final_row(local: dict[str, Any] | None, resolution: Resolution) -> dict[str, Any] | None:
    """The row the target holds once the resolution's changes are applied."""
    for change in resolution.changes:
        local = None if change.op is Op.DELETE else dict(change.after or {})
    return local


# ------------------------------------------------------------------ tables without a policy


def test_tables_without_a_policy_pass_through_untouched_and_need_no_probe() -> None:
    engine = make_engine(("db.other", LWW))
    changes = (
        insert(row(1)),
        update(row(2), row(3, "b")),  # a key change: not split without a policy
        delete(row(4)),
    )
    prepared = engine.prepare([txn(*changes)])
    assert prepared.probes == []
    resolution = prepared.resolve([])
    assert len(resolution.changes) == 3
    assert all(a is b for a, b in zip(resolution.changes, changes, strict=True))
    assert resolution.entries == [] and resolution.tombstones == []


def test_no_rules_at_all_means_no_probes() -> None:
    engine = ConflictEngine(
        Policies([]), Ranks([]), channel="c", origin="dc2", datacenter="dc1", tables=target
    )
    change = update(row(), row(v="b"))
    prepared = engine.prepare([txn(change)])
    assert prepared.probes == []
    assert prepared.resolve([]).changes == [change]


def test_changes_keep_stream_order_across_tables_with_and_without_a_policy() -> None:
    engine = make_engine(("db.t", LWW))
    first, second, third = insert(row(1), "plain"), insert(row(2)), delete(row(3), "plain")
    resolution = run(engine, txn(first, second, third))
    assert resolution.changes == [first, second, third]


# ------------------------------------------------------------------ detection: inserts


def test_insert_onto_no_row_is_applied() -> None:
    change = insert(row(ts=at(10)))
    resolution = run(make_engine(), txn(change))
    assert resolution.changes == [change]
    assert resolution.entries == [] and resolution.tombstones == []


def test_insert_onto_an_equal_row_is_a_replay_not_a_conflict() -> None:
    change = insert(row(ts=at(10)))
    resolution = run(make_engine(), txn(change), rows={1: row(ts=at(10))})
    assert resolution.changes == [change]
    assert resolution.entries == []


def test_insert_onto_another_older_row_is_insert_insert_and_the_incoming_row_wins() -> None:
    local, incoming = row(v="mine", ts=at(5)), row(v="theirs", ts=at(10))
    resolution = run(make_engine(), txn(insert(incoming)), rows={1: local})
    assert decided(resolution) == [("insert-insert", "incoming")]
    assert resolution.changes == [upserted(incoming)]
    entry = resolution.entries[0]
    assert entry.policy == "lww"
    assert entry.local_row == local
    assert entry.incoming_before is None and entry.incoming_after == incoming
    assert entry.result_row == incoming
    assert "newer than the local row ts" in entry.reason


def test_insert_onto_another_newer_row_is_insert_insert_and_the_local_row_stays() -> None:
    local = row(v="mine", ts=at(20))
    resolution = run(make_engine(), txn(insert(row(v="theirs", ts=at(10)))), rows={1: local})
    assert decided(resolution) == [("insert-insert", "local")]
    assert resolution.changes == []
    assert resolution.entries[0].result_row == local


def test_insert_onto_a_newer_tombstone_is_insert_delete_and_the_delete_stays() -> None:
    resolution = run(make_engine(), txn(insert(row(ts=at(10)))), tombs={1: (at(20), "dc1")})
    assert decided(resolution) == [("insert-delete", "local")]
    assert resolution.changes == [] and resolution.tombstones == []
    entry = resolution.entries[0]
    assert entry.local_row is None and entry.result_row is None
    assert "local delete (by dc1)" in entry.reason


def test_insert_onto_an_older_tombstone_is_applied_without_a_conflict() -> None:
    change = insert(row(ts=at(10)))
    resolution = run(make_engine(), txn(change), tombs={1: (at(5), "dc1")})
    assert resolution.changes == [change]
    assert resolution.entries == [] and resolution.tombstones == []


def test_insert_on_the_tombstone_s_exact_time_loses_to_a_higher_ranked_deleter() -> None:
    resolution = run(make_engine(), txn(insert(row(ts=at(10)))), tombs={1: (at(10), "dc1")})
    assert decided(resolution) == [("insert-delete", "local")]
    on_dc2 = run(
        make_engine(origin="dc1", datacenter="dc2"),
        txn(insert(row(ts=at(10)))),
        tombs={1: (at(10), "dc2")},
    )
    assert on_dc2.entries == []  # dc1's insert beats dc2's delete at the same instant


# ------------------------------------------------------------------ detection: updates


def test_update_onto_its_before_image_is_applied() -> None:
    before, after = row(v="a", ts=at(0)), row(v="b", ts=at(10))
    change = update(before, after)
    resolution = run(make_engine(), txn(change), rows={1: dict(before)})
    assert resolution.changes == [change]
    assert resolution.changes[0].op is Op.UPDATE
    assert resolution.entries == []


def test_update_onto_its_after_image_is_a_replay() -> None:
    before, after = row(v="a", ts=at(0)), row(v="b", ts=at(10))
    change = update(before, after)
    resolution = run(make_engine(), txn(change), rows={1: dict(after)})
    assert resolution.changes == [change]
    assert resolution.entries == []


def test_update_onto_another_row_is_update_update() -> None:
    local = row(v="x", ts=at(5))
    after = row(v="b", ts=at(10))
    resolution = run(make_engine(), txn(update(row(), after)), rows={1: local})
    assert decided(resolution) == [("update-update", "incoming")]
    # The local row is not the before image: the winner is written whole, as an upsert.
    assert resolution.changes == [upserted(after)]
    entry = resolution.entries[0]
    assert entry.local_row == local and entry.incoming_before == row()
    assert entry.incoming_after == after and entry.result_row == after


def test_update_onto_no_row_is_update_delete_and_comes_back_when_nothing_is_known() -> None:
    after = row(v="b", ts=at(10))
    resolution = run(make_engine(), txn(update(row(), after)))
    assert decided(resolution) == [("update-delete", "incoming")]
    assert resolution.changes == [upserted(after)]
    assert "no local row or tombstone" in resolution.entries[0].reason


def test_update_older_than_the_local_delete_stays_deleted() -> None:
    resolution = run(
        make_engine(), txn(update(row(), row(v="b", ts=at(10)))), tombs={1: (at(20), "dc1")}
    )
    assert decided(resolution) == [("update-delete", "local")]
    assert resolution.changes == [] and resolution.tombstones == []
    assert resolution.entries[0].result_row is None
    assert "local delete (by dc1) at" in resolution.entries[0].reason


def test_update_newer_than_the_local_delete_brings_the_row_back() -> None:
    after = row(v="b", ts=at(30))
    resolution = run(make_engine(), txn(update(row(), after)), tombs={1: (at(20), "dc1")})
    assert decided(resolution) == [("update-delete", "incoming")]
    assert resolution.changes == [upserted(after)]


# ------------------------------------------------------------------ detection: deletes


def test_delete_of_the_before_image_is_applied_with_the_carried_tombstone() -> None:
    before = row(ts=at(0))
    change = delete(before)
    resolution = run(make_engine(), txn(change, tombstone_row(1, at(30))), rows={1: dict(before)})
    assert resolution.changes == [change]  # the tombstone row itself is not replayed
    assert resolution.entries == []
    assert resolution.tombstones == [tomb_write(1, at(30))]


def test_delete_of_a_missing_row_is_applied_and_still_records_the_tombstone() -> None:
    change = delete(row(ts=at(0)))
    engine = make_engine()
    resolution = run(engine, txn(change, tombstone_row(1, at(30))))
    assert resolution.changes == [change]
    assert resolution.entries == []
    assert resolution.tombstones == [tomb_write(1, at(30))]
    assert engine.fallback_stamps == 0


def test_delete_of_a_missing_row_keeps_a_newer_local_tombstone() -> None:
    change = delete(row(ts=at(0)))
    resolution = run(
        make_engine(), txn(change, tombstone_row(1, at(30))), tombs={1: (at(40), "dc1")}
    )
    assert resolution.changes == [change]
    assert resolution.entries == [] and resolution.tombstones == []


def test_delete_of_a_row_changed_later_here_is_delete_update_and_the_row_stays() -> None:
    local = row(v="x", ts=at(40))
    resolution = run(make_engine(), txn(delete(row()), tombstone_row(1, at(30))), rows={1: local})
    assert decided(resolution) == [("delete-update", "local")]
    assert resolution.changes == [] and resolution.tombstones == []
    assert resolution.entries[0].result_row == local
    assert resolution.entries[0].incoming_after is None


def test_delete_newer_than_the_local_change_removes_the_row_and_records_it() -> None:
    local = row(v="x", ts=at(20))
    change = delete(row())
    resolution = run(make_engine(), txn(change, tombstone_row(1, at(30))), rows={1: local})
    assert decided(resolution) == [("delete-update", "incoming")]
    assert resolution.changes == [change]
    assert resolution.tombstones == [tomb_write(1, at(30))]
    entry = resolution.entries[0]
    assert entry.result_row is None
    assert "incoming deleted at" in entry.reason  # as the integration test checks on dc2


# ------------------------------------------------------------------ lww: ties and times


def test_equal_timestamps_go_to_dc1_on_dc1() -> None:
    local = row(v="dc1", ts=at(10))
    resolution = run(make_engine(), txn(update(row(), row(v="dc2", ts=at(10)))), rows={1: local})
    assert decided(resolution) == [("update-update", "local")]
    assert resolution.changes == []
    assert "dc1 comes first in conflicts.priority" in resolution.entries[0].reason


def test_equal_timestamps_go_to_dc1_on_dc2() -> None:
    after = row(v="dc1", ts=at(10))
    engine = make_engine(origin="dc1", datacenter="dc2")
    resolution = run(engine, txn(update(row(), after)), rows={1: row(v="dc2", ts=at(10))})
    assert decided(resolution) == [("update-update", "incoming")]
    assert resolution.changes == [upserted(after)]
    entry = resolution.entries[0]
    assert (entry.origin, entry.datacenter, entry.channel) == ("dc1", "dc2", "from-dc1")
    assert "dc1 comes first in conflicts.priority" in entry.reason


def test_a_delete_and_an_update_at_the_same_instant_go_to_dc1_on_both_sides() -> None:
    # dc1 deleted at 30, dc2 updated to 30: dc1's delete wins everywhere.
    on_dc1 = run(
        make_engine(), txn(update(row(), row(v="dc2", ts=at(30)))), tombs={1: (at(30), "dc1")}
    )
    assert decided(on_dc1) == [("update-delete", "local")]
    on_dc2 = run(
        make_engine(origin="dc1", datacenter="dc2"),
        txn(delete(row()), tombstone_row(1, at(30), origin="dc1")),
        rows={1: row(v="dc2", ts=at(30))},
    )
    assert decided(on_dc2) == [("delete-update", "incoming")]
    assert final_row(None, on_dc1) is None and final_row(row(), on_dc2) is None


def test_a_delete_without_its_tombstone_row_is_dated_by_its_commit_second() -> None:
    engine = make_engine()
    change = delete(row())
    newer_than_commit = run(engine, txn(change), rows={1: row(v="x", ts=at(1500))})
    assert decided(newer_than_commit) == [("delete-update", "local")]
    assert engine.fallback_stamps == 1
    older_than_commit = run(engine, txn(change), rows={1: row(v="x", ts=at(500))})
    assert decided(older_than_commit) == [("delete-update", "incoming")]
    assert older_than_commit.tombstones == [tomb_write(1, at(1000))]  # T0 + 1 s, naive UTC
    assert engine.fallback_stamps == 2


def test_the_commit_second_fallback_is_in_milliseconds_for_an_integer_column() -> None:
    engine = make_engine()
    change = delete({"id": 1, "v": "a", "ts": 1_000})
    resolution = run(engine, txn(change, timestamp=5))
    assert resolution.tombstones == [tomb_write(1, 5_000)]
    assert engine.fallback_stamps == 1


def test_a_delete_without_its_tombstone_row_comes_after_the_row_it_deleted() -> None:
    # Deleted in the same second it was written (T0 + 1.5 s, commit second T0 + 1 s): the
    # delete is dated one step after the row, as the origin's trigger would date it, and so
    # beats an older concurrent update (T0 + 1.2 s) though the commit second does not.
    engine = make_engine()
    change = delete(row(ts=at(1500)))
    resolution = run(engine, txn(change), rows={1: row(v="x", ts=at(1200))})
    assert decided(resolution) == [("delete-update", "incoming")]
    assert resolution.tombstones == [tomb_write(1, at(1500) + dt.timedelta(microseconds=1))]
    assert engine.fallback_stamps == 1


def test_the_derived_delete_time_is_the_same_function_everywhere() -> None:
    second = COMMIT
    assert derived_delete_stamp(second, at(0)) == at(1000)
    assert derived_delete_stamp(second, at(1000)) == at(1000) + dt.timedelta(microseconds=1)
    aware = at(2000).replace(tzinfo=UTC)
    assert derived_delete_stamp(second, aware) == at(2000) + dt.timedelta(microseconds=1)
    assert derived_delete_stamp(5, 1_000) == 5_000
    assert derived_delete_stamp(5, 9_000) == 9_001
    assert derived_delete_stamp(second, None) == at(1000)


def test_a_carried_tombstone_wins_over_the_commit_second() -> None:
    engine = make_engine()
    resolution = run(
        engine,
        txn(delete(row()), tombstone_row(1, at(1500))),
        rows={1: row(v="x", ts=at(1200))},  # newer than the commit second, older than the delete
    )
    assert decided(resolution) == [("delete-update", "incoming")]
    assert resolution.tombstones == [tomb_write(1, at(1500))]
    assert engine.fallback_stamps == 0


def test_a_tombstone_row_for_another_key_or_table_is_not_taken() -> None:
    engine = make_engine(("db.t", LWW), ("db.u", LWW))
    resolution = run(
        engine,
        txn(delete(row(1)), tombstone_row(2, at(30)), tombstone_row(1, at(40), table="u")),
    )
    assert resolution.tombstones == [tomb_write(1, at(1000))]
    assert engine.fallback_stamps == 1


def test_tombstone_rows_carry_source_names_that_are_mapped_to_the_target() -> None:
    names = NameMap({"src.t": "db.t"}, {"src.t": {"ID": "id"}})
    engine = make_engine(names=names)
    carried = RowChange(
        tombstones.SCHEMA,
        tombstones.name("src", "t"),
        Op.INSERT,
        None,
        {
            "ID": 1,
            tombstones.COL_SCHEMA: "src",
            tombstones.COL_TABLE: "t",
            tombstones.COL_DELETED_AT: at(30),
            tombstones.COL_ORIGIN: "dc2",
        },
    )
    change = delete(row())  # already mapped to the target's names by the channel
    resolution = run(engine, txn(change, carried))
    assert resolution.changes == [change]
    assert resolution.tombstones == [tomb_write(1, at(30))]
    assert engine.fallback_stamps == 0


def test_tombstone_rows_of_tables_without_a_policy_are_dropped() -> None:
    engine = make_engine(("db.t", LWW))
    change = delete(row(), table="plain")
    resolution = run(engine, txn(change, tombstone_row(1, at(30), table="plain")))
    assert resolution.changes == [change]
    assert resolution.tombstones == []


def test_an_aware_incoming_time_equal_to_the_naive_local_one_is_a_tie() -> None:
    plus2 = dt.timezone(dt.timedelta(hours=2))
    same_instant = at(10).replace(tzinfo=UTC).astimezone(plus2)
    local = row(v="dc1", ts=at(10))
    tie = run(make_engine(), txn(update(row(), row(v="dc2", ts=same_instant))), rows={1: local})
    assert decided(tie) == [("update-update", "local")]
    assert "equal timestamps" in tie.entries[0].reason
    later = same_instant + dt.timedelta(microseconds=1)
    newer = run(make_engine(), txn(update(row(), row(v="dc2", ts=later))), rows={1: local})
    assert decided(newer) == [("update-update", "incoming")]


def test_a_missing_lww_column_in_the_incoming_row_says_how_to_fix_it() -> None:
    engine = make_engine()
    with pytest.raises(ApplyError, match=r"lww column 'ts' is not in the incoming rows of db\.t"):
        run(engine, txn(update({"id": 1, "v": "a"}, {"id": 1, "v": "b"})), rows={1: row(v="x")})


def test_the_lww_column_is_found_in_the_incoming_row_whatever_its_case() -> None:
    after = {"id": 1, "v": "b", "TS": at(30)}
    resolution = run(make_engine(), txn(update(row(), after)), rows={1: row(v="x", ts=at(5))})
    assert decided(resolution) == [("update-update", "incoming")]


def test_a_newer_local_row_wins_when_the_configured_column_differs_in_case() -> None:
    engine = make_engine(("db.t", TablePolicy("lww", "TS")))
    local = row(v="mine", ts=at(90))
    resolution = run(engine, txn(update(row(), row(v="theirs", ts=at(50)))), rows={1: local})
    assert decided(resolution) == [("update-update", "local")]
    assert resolution.changes == []


# ------------------------------------------------------------------ several changes to one key


def test_later_changes_of_a_key_compare_with_what_the_earlier_ones_left() -> None:
    a, b, c = row(v="a", ts=at(0)), row(v="b", ts=at(10)), row(v="c", ts=at(20))
    first, second = update(a, b), update(dict(b), c)
    engine = make_engine()
    prepared = engine.prepare([txn(first), txn(second)])
    assert len(prepared.probes) == 1  # one locked read per key, whatever the number of changes
    resolution = run(engine, txn(first), txn(second), rows={1: dict(a)})
    assert resolution.changes == [first, second]
    assert resolution.entries == []


def test_a_key_inserted_then_deleted_in_one_group_needs_no_local_row() -> None:
    first, second = insert(row(ts=at(10))), delete(row(ts=at(10)))
    resolution = run(make_engine(), txn(first), txn(second, tombstone_row(1, at(30))))
    assert resolution.changes == [first, second]
    assert resolution.entries == []
    assert resolution.tombstones == [tomb_write(1, at(30))]


def test_a_key_deleted_then_inserted_again_later_in_the_group_is_no_conflict() -> None:
    removed, again = delete(row(ts=at(0))), insert(row(v="new", ts=at(40)))
    resolution = run(
        make_engine(), txn(removed, tombstone_row(1, at(30))), txn(again), rows={1: row()}
    )
    assert resolution.changes == [removed, again]
    assert resolution.entries == []
    assert resolution.tombstones == [tomb_write(1, at(30))]


def test_an_update_after_a_lost_conflict_is_still_a_conflict() -> None:
    local = row(v="mine", ts=at(90))
    a, b, c = row(v="a", ts=at(0)), row(v="b", ts=at(50)), row(v="c", ts=at(60))
    resolution = run(make_engine(), txn(update(a, b)), txn(update(b, c)), rows={1: local})
    assert decided(resolution) == [("update-update", "local"), ("update-update", "local")]
    assert resolution.changes == []
    assert [e.result_row for e in resolution.entries] == [local, local]


def test_an_update_after_a_lost_conflict_can_win_its_own_conflict() -> None:
    local = row(v="mine", ts=at(90))
    a, b, c = row(v="a", ts=at(0)), row(v="b", ts=at(50)), row(v="c", ts=at(100))
    resolution = run(make_engine(), txn(update(a, b)), txn(update(b, c)), rows={1: local})
    assert decided(resolution) == [("update-update", "local"), ("update-update", "incoming")]
    assert resolution.changes == [upserted(c)]


def test_an_update_after_a_won_conflict_applies_as_the_origin_expected() -> None:
    local = row(v="mine", ts=at(5))
    a, b, c = row(v="a", ts=at(0)), row(v="b", ts=at(50)), row(v="c", ts=at(60))
    second = update(dict(b), c)
    resolution = run(make_engine(), txn(update(a, b)), txn(second), rows={1: local})
    assert decided(resolution) == [("update-update", "incoming")]
    assert resolution.changes == [upserted(b), second]


def test_delete_insert_delete_of_one_key_in_one_origin_transaction_is_no_conflict() -> None:
    reinserted = row(v="b", ts=at(20))
    first, again, second = delete(row()), insert(reinserted), delete(dict(reinserted))
    resolution = run(
        make_engine(),
        txn(
            first,
            tombstone_row(1, at(10)),
            again,
            second,
            tombstone_row(1, at(30)),  # the trigger's upsert of the same tombstone key
        ),
        rows={1: row()},
    )
    assert resolution.entries == []
    assert final_row(row(), resolution) is None


# ------------------------------------------------------------------ key-changing updates


def test_a_key_changing_update_is_a_delete_of_the_old_key_and_an_insert_of_the_new() -> None:
    before, after = row(1, ts=at(0)), row(2, ts=at(10))
    engine = make_engine()
    prepared = engine.prepare([txn(update(before, after))])
    assert [p.key for p in prepared.probes] == [(1,), (2,)]
    resolution = run(engine, txn(update(before, after)), rows={1: dict(before)})
    assert resolution.changes == [
        RowChange("db", "t", Op.DELETE, before, None),
        RowChange("db", "t", Op.INSERT, None, after),
    ]
    assert resolution.entries == []
    # The old key was deleted when the new row was written.
    assert resolution.tombstones == [tomb_write(1, at(10))]
    assert engine.fallback_stamps == 0


def test_a_key_changing_update_onto_a_newer_row_keeps_that_row() -> None:
    before, after = row(1, ts=at(0)), row(2, ts=at(10))
    taken = row(2, v="mine", ts=at(20))
    resolution = run(make_engine(), txn(update(before, after)), rows={1: dict(before), 2: taken})
    assert decided(resolution) == [("insert-insert", "local")]
    assert resolution.changes == [RowChange("db", "t", Op.DELETE, before, None)]
    assert resolution.entries[0].key == {"id": 2}


# ------------------------------------------------------------ a snapshot's window (and at the end)


def test_a_change_after_the_window_meets_the_row_a_copy_read_later_left() -> None:
    # The copy holds the row at a later state than the window's change of it (the chunk was
    # read after it); one group ends the window and goes on past it.
    engine = make_engine(("db.t", TablePolicy("overwrite")))
    copied = row(v="copied", ts=at(5))
    inside = txn(update(row(v="a", ts=at(1)), row(v="b", ts=at(2))))
    past = txn(update(row(v="b", ts=at(2)), row(v="c", ts=at(3))))
    resolution = run(engine, inside, past, rows={1: copied},
                     plain=lambda scn, _s, _t: scn <= inside.scn)  # fmt: skip
    assert decided(resolution) == [], "no false conflict after the window"
    assert final_row(copied, resolution) == row(v="c", ts=at(3))


def test_converging_deletes_and_key_moves_leave_their_rows_for_later_changes() -> None:
    engine = make_engine(("db.t", TablePolicy("overwrite")))
    moved = txn(update(row(1, "a"), row(2, "a")), delete(row(3)))
    past = txn(insert(row(1, "new")), update(row(2, "a"), row(2, "b")), insert(row(3, "again")))
    resolution = run(engine, moved, past, rows={1: row(1, "a"), 3: row(3)},
                     plain=lambda scn, _s, _t: scn <= moved.scn)  # fmt: skip
    assert decided(resolution) == []


def test_outside_a_window_the_same_group_is_a_conflict() -> None:
    engine = make_engine(("db.t", TablePolicy("overwrite")))
    first = txn(update(row(v="a"), row(v="b")))
    second = txn(update(row(v="b"), row(v="c")))
    resolution = run(engine, first, second, rows={1: row(v="copied")})
    assert decided(resolution) == [("update-update", "incoming")]


# ------------------------------------------------------------------ overwrite and keep


def test_overwrite_always_takes_the_incoming_change() -> None:
    engine = make_engine(("db.t", TablePolicy("overwrite")))
    after = row(v="theirs", ts=at(1))
    prepared = engine.prepare([txn(update(row(), after))])
    assert [p.tombstone for p in prepared.probes] == [False]
    resolution = run(engine, txn(update(row(), after)), rows={1: row(v="mine", ts=at(99))})
    assert decided(resolution) == [("update-update", "incoming")]
    assert resolution.changes == [upserted(after)]
    assert resolution.entries[0].policy == "overwrite"
    assert resolution.entries[0].reason == "policy overwrite: the incoming change always wins"


def test_overwrite_deletes_a_changed_row_without_a_tombstone() -> None:
    engine = make_engine(("db.t", TablePolicy("overwrite")))
    change = delete(row())
    resolution = run(engine, txn(change), rows={1: row(v="mine")})
    assert decided(resolution) == [("delete-update", "incoming")]
    assert resolution.changes == [change]
    assert resolution.tombstones == [] and engine.fallback_stamps == 0


@pytest.mark.parametrize(
    ("change", "local", "kind"),
    [
        (insert(row(v="theirs")), row(v="mine"), "insert-insert"),
        (update(row(), row(v="theirs")), row(v="mine"), "update-update"),
        (update(row(), row(v="theirs")), None, "update-delete"),
        (delete(row()), row(v="mine"), "delete-update"),
    ],
)
def test_keep_always_keeps_the_local_row(
    change: RowChange, local: dict[str, Any] | None, kind: str
) -> None:
    engine = make_engine(("db.t", TablePolicy("keep")))
    resolution = run(engine, txn(change), rows={} if local is None else {1: local})
    assert decided(resolution) == [(kind, "local")]
    assert resolution.changes == []
    entry = resolution.entries[0]
    assert entry.policy == "keep" and entry.result_row == local
    assert entry.reason == "policy keep: the local row always wins"


def test_keep_does_not_stop_changes_that_are_no_conflict() -> None:
    engine = make_engine(("db.t", TablePolicy("keep")))
    change = update(row(), row(v="b"))
    resolution = run(engine, txn(change), rows={1: row()})
    assert resolution.changes == [change] and resolution.entries == []


# ------------------------------------------------------------------ resolver


class Recorder:
    """A resolver returning ``choose(local, before, after)`` and remembering its calls."""

    def __init__(self, choose: Any) -> None:
        self.choose = choose
        self.calls: list[tuple[Any, Any, Any, ConflictContext]] = []

    def __call__(self, local: Any, before: Any, after: Any, context: ConflictContext) -> Any:
        self.calls.append((local, before, after, context))
        return self.choose(local, before, after)


def resolver_engine(fn: Any, column: str | None = None, **kw: Any) -> ConflictEngine:
    return make_engine(("db.t", TablePolicy("resolver", column, fn, "my.res:pick")), **kw)


def test_a_resolver_returning_the_local_row_keeps_it() -> None:
    local = row(v="mine")
    engine = resolver_engine(Recorder(lambda lo, b, a: dict(lo)))
    resolution = run(engine, txn(update(row(), row(v="theirs"))), rows={1: local})
    assert decided(resolution) == [("update-update", "local")]
    assert resolution.changes == []
    entry = resolution.entries[0]
    assert entry.policy == "resolver" and entry.result_row == local
    assert entry.reason == "resolver my.res:pick kept the local row"


def test_a_resolver_returning_the_incoming_row_writes_it() -> None:
    after = row(v="theirs")
    engine = resolver_engine(Recorder(lambda lo, b, a: dict(a)))
    resolution = run(engine, txn(update(row(), after)), rows={1: row(v="mine")})
    assert decided(resolution) == [("update-update", "incoming")]
    assert resolution.changes == [upserted(after)]
    assert resolution.entries[0].result_row == after


def test_a_resolver_returning_its_own_row_writes_that_row() -> None:
    merged = row(v="merged")
    engine = resolver_engine(Recorder(lambda lo, b, a: merged))
    resolution = run(engine, txn(update(row(), row(v="theirs"))), rows={1: row(v="mine")})
    assert decided(resolution) == [("update-update", "custom")]
    assert resolution.changes == [upserted(merged)]
    assert resolution.entries[0].result_row == merged
    assert resolution.entries[0].reason == "resolver my.res:pick wrote its own row"


def test_a_resolver_may_bring_back_a_row_the_origin_deleted() -> None:
    local = row(v="mine")
    engine = resolver_engine(Recorder(lambda lo, b, a: lo))
    resolution = run(engine, txn(delete(row())), rows={1: local})
    assert decided(resolution) == [("delete-update", "local")]
    assert resolution.changes == []


def test_a_resolver_returning_none_on_an_update_deletes_the_local_row() -> None:
    local = row(v="mine")
    engine = resolver_engine(Recorder(lambda lo, b, a: None))
    resolution = run(engine, txn(update(row(), row(v="theirs"))), rows={1: local})
    assert decided(resolution) == [("update-update", "delete")]
    assert resolution.changes == [RowChange("db", "t", Op.DELETE, local, None)]
    assert resolution.entries[0].result_row is None


def test_a_resolver_returning_none_on_a_delete_applies_the_delete() -> None:
    change = delete(row())
    engine = resolver_engine(Recorder(lambda lo, b, a: None))
    resolution = run(engine, txn(change), rows={1: row(v="mine")})
    assert decided(resolution) == [("delete-update", "incoming")]
    assert resolution.changes == [change]


def test_a_resolver_returning_none_where_there_is_no_row_writes_nothing() -> None:
    engine = resolver_engine(Recorder(lambda lo, b, a: None))
    resolution = run(engine, txn(update(row(), row(v="theirs"))))
    assert decided(resolution) == [("update-delete", "local")]
    assert resolution.changes == []


def test_a_resolver_can_bring_back_a_row_over_a_delete() -> None:
    after = row(v="theirs")
    engine = resolver_engine(Recorder(lambda lo, b, a: a))
    resolution = run(engine, txn(update(row(), after)))
    assert decided(resolution) == [("update-delete", "incoming")]
    assert resolution.changes == [upserted(after)]


def test_a_resolver_that_raises_stops_the_channel_naming_what_failed() -> None:
    def boom(*_: Any) -> None:
        raise RuntimeError("no idea")

    engine = resolver_engine(boom)
    transaction = txn(update(row(), row(v="theirs")))
    with pytest.raises(ResolverError) as info:
        run(engine, transaction, rows={1: row(v="mine")})
    message = str(info.value)
    assert "my.res:pick" in message
    assert "db.t" in message
    assert "{'id': 1}" in message
    assert f"at SCN {transaction.scn}" in message
    assert "RuntimeError: no idea" in message
    assert "restart" in message
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(info.value, ApplyError) and isinstance(info.value, FatalError)


def test_a_resolver_returning_something_else_than_a_row_is_an_error() -> None:
    engine = resolver_engine(lambda *_: ["not", "a", "row"])
    with pytest.raises(ResolverError, match=r"my\.res:pick returned list for db\.t key"):
        run(engine, txn(update(row(), row(v="theirs"))), rows={1: row(v="mine")})


@pytest.mark.parametrize("result", [row(2, v="moved"), {"v": "no key"}])
def test_a_resolver_must_keep_the_primary_key(result: dict[str, Any]) -> None:
    engine = resolver_engine(lambda *_: result)
    with pytest.raises(ResolverError, match="another primary key for db.t key {'id': 1}"):
        run(engine, txn(update(row(), row(v="theirs"))), rows={1: row(v="mine")})


def test_a_resolver_is_told_who_where_and_what() -> None:
    recorder = Recorder(lambda lo, b, a: lo)
    engine = resolver_engine(recorder)
    before, after, local = row(), row(v="theirs"), row(v="mine")
    transaction = txn(update(before, after))
    run(engine, transaction, rows={1: local})
    [(got_local, got_before, got_after, context)] = recorder.calls
    assert (got_local, got_before, got_after) == (local, before, after)
    assert context.channel == "from-dc2"
    assert (context.origin, context.datacenter) == ("dc2", "dc1")
    assert context.scn == transaction.scn
    assert context.origin_time == at(1000)
    assert (context.schema, context.table) == ("db", "t")
    assert context.kind == "update-update"
    assert context.key == {"id": 1}
    assert context.local_deleted_at is None and context.incoming_deleted_at is None


def test_a_resolver_gets_values_as_the_target_binds_them() -> None:
    recorder = Recorder(lambda lo, b, a: lo)
    engine = resolver_engine(recorder)
    plus2 = dt.timezone(dt.timedelta(hours=2))
    after = {
        "id": 1,
        "v": frozenset({"b", "a"}),
        "ts": at(10).replace(tzinfo=UTC).astimezone(plus2),
    }
    run(engine, txn(update(row(), after)), rows={1: row(v="mine")})
    got_after = recorder.calls[0][2]
    assert got_after == {"id": 1, "v": "a,b", "ts": at(10)}


def test_a_resolver_with_a_column_is_told_when_the_local_row_was_deleted() -> None:
    recorder = Recorder(lambda lo, b, a: a)
    engine = resolver_engine(recorder, column="ts")
    run(engine, txn(update(row(), row(v="theirs"))), tombs={1: (at(20), "dc1")})
    context = recorder.calls[0][3]
    assert context.kind == "update-delete"
    assert context.local_deleted_at == at(20)
    assert context.incoming_deleted_at is None


def test_a_resolver_with_a_column_is_told_when_the_incoming_delete_was_made() -> None:
    recorder = Recorder(lambda lo, b, a: None)
    engine = resolver_engine(recorder, column="ts")
    change = delete(row())
    resolution = run(engine, txn(change, tombstone_row(1, at(30))), rows={1: row(v="mine")})
    context = recorder.calls[0][3]
    assert context.kind == "delete-update"
    assert context.incoming_deleted_at == at(30)
    assert context.local_deleted_at is None
    assert resolution.changes == [change]
    assert resolution.tombstones == [tomb_write(1, at(30))]


def test_a_resolver_is_not_asked_when_there_is_no_conflict() -> None:
    recorder = Recorder(lambda lo, b, a: lo)
    engine = resolver_engine(recorder)
    change = update(row(), row(v="b"))
    resolution = run(engine, txn(change), rows={1: row()})
    assert recorder.calls == [] and resolution.changes == [change]


def test_a_later_change_is_compared_with_the_resolver_s_row() -> None:
    merged = row(v="merged")
    engine = resolver_engine(Recorder(lambda lo, b, a: merged if b == row() else lo))
    a, b = row(), row(v="theirs")
    follow = update(dict(b), row(v="again"))
    resolution = run(engine, txn(update(a, b)), txn(follow), rows={1: row(v="mine")})
    assert decided(resolution) == [("update-update", "custom"), ("update-update", "local")]
    assert resolution.entries[1].local_row == merged


# ------------------------------------------------------------------ load_resolver


def test_load_resolver_returns_the_named_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "drc_test_resolvers_ok.py").write_text(
        "def pick(local, before, after, context):\n    return after\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "drc_test_resolvers_ok", raising=False)
    fn = load_resolver("drc_test_resolvers_ok:pick")
    assert fn(None, None, {"id": 1}, None) == {"id": 1}  # type: ignore[arg-type]


def test_load_resolver_names_a_module_that_cannot_be_imported() -> None:
    with pytest.raises(ConfigError, match=r"'no_such_module_x:f': cannot import no_such_module_x"):
        load_resolver("no_such_module_x:f")


def test_load_resolver_names_a_module_that_fails_on_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "drc_test_resolvers_bad.py").write_text("raise ValueError('broken at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="cannot import drc_test_resolvers_bad: broken at import"):
        load_resolver("drc_test_resolvers_bad:f")


@pytest.mark.parametrize("spec", ["json:no_such_function", "json:__name__"])
def test_load_resolver_names_a_missing_or_uncallable_function(spec: str) -> None:
    function = spec.partition(":")[2]
    with pytest.raises(ConfigError, match=f"json has no function {function}"):
        load_resolver(spec)


# ------------------------------------------------------------------ Policies


def test_the_first_matching_entry_wins() -> None:
    keep, lww = TablePolicy("keep"), TablePolicy("lww", "ts")
    policies = Policies([("db.audit_*", keep), ("db.*", lww)])
    assert policies.get("db", "audit_log") is keep
    assert policies.get("db", "orders") is lww
    assert policies.get("other", "orders") is None


def test_off_disables_the_tables_it_matches() -> None:
    lww = TablePolicy("lww", "ts")
    policies = Policies([("db.scratch", None), ("db.*", lww)])
    assert policies.get("db", "scratch") is None
    assert policies.get("db", "orders") is lww
    assert policies.active
    assert not Policies([("db.*", None)]).active
    assert not Policies([]).active


def test_the_drc_schema_never_has_a_policy() -> None:
    policies = Policies([("*.*", TablePolicy("overwrite"))])
    assert policies.get("drc", "conflicts") is None
    assert policies.get("drc", tombstones.name("db", "t")) is None
    assert policies.get("db", "t") is not None


def test_policies_from_config_load_each_resolver_once_per_entry() -> None:
    config = ConflictsConfig(
        priority=("dc1", "dc2"),
        tables=(
            ConflictTableConfig(table="db.off", policy="off"),
            ConflictTableConfig(table="db.r", policy="resolver", resolver="m.x:f", column="ts"),
            ConflictTableConfig(table="db.*", policy="lww", column="updated_at"),
        ),
    )
    loaded: list[str] = []

    def load(spec: str) -> Any:
        loaded.append(spec)
        return lambda *_: None

    policies = Policies.from_config(config, load=load)
    assert loaded == ["m.x:f"]
    assert policies.get("db", "off") is None
    resolver = policies.get("db", "r")
    assert resolver is not None
    assert (resolver.name, resolver.column, resolver.resolver_name) == ("resolver", "ts", "m.x:f")
    assert policies.get("db", "x") == TablePolicy("lww", "updated_at")


def test_a_table_policy_is_one_that_detects() -> None:
    assert TablePolicy("keep").declared is POLICIES["keep"]
    with pytest.raises(ValueError, match="policy off detects nothing"):
        TablePolicy("off")


def test_every_policy_name_fits_the_conflict_log() -> None:
    width = re.search(r"VARCHAR\((\d+)\)", log._COLUMNS["policy"])
    assert width is not None
    assert all(len(name) <= int(width.group(1)) for name in POLICIES)
    assert log.POLICIES == tuple(n for n, p in POLICIES.items() if p.detects)


def test_policies_from_config_report_a_missing_resolver() -> None:
    config = ConflictsConfig(
        tables=(ConflictTableConfig(table="db.r", policy="resolver", resolver="nope_mod_y:f"),)
    )
    with pytest.raises(ConfigError, match="nope_mod_y"):
        Policies.from_config(config)


# ------------------------------------------------------------------ versions


def test_stamp_key_orders_timestamps_and_puts_unknown_times_first() -> None:
    naive = dt.datetime(2026, 1, 1, 10, 0)
    aware = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert stamp_key(naive) == stamp_key(aware) == (1, naive)
    assert stamp_key(aware.astimezone(UTC)) == (1, naive)
    assert stamp_key(dt.date(2026, 1, 1)) == (1, dt.datetime(2026, 1, 1))
    assert stamp_key(5) == (1, 5) and stamp_key(Decimal("1.5")) == (1, Decimal("1.5"))
    for unknown in (None, "2026-01-01", ZeroDate("0000-00-00 00:00:00")):
        assert stamp_key(unknown) == (0, 0)
        assert stamp_key(unknown) < stamp_key(dt.datetime(1970, 1, 1))


def test_ranks_break_ties_by_priority_and_anything_beats_nothing() -> None:
    ranks = Ranks(["dc1", "dc2"])
    assert ranks.newer(Version(at(2), "dc2"), Version(at(1), "dc1"))
    assert not ranks.newer(Version(at(1), "dc1"), Version(at(2), "dc2"))
    assert ranks.newer(Version(at(1), "dc1"), Version(at(1), "dc2"))
    assert not ranks.newer(Version(at(1), "dc2"), Version(at(1), "dc1"))
    assert not ranks.newer(Version(at(1), "dc1"), Version(at(1), "dc1"))
    assert ranks.newer(Version(None, "dc2"), None)
    assert ranks.newer(Version(at(1), "dc2"), Version(at(1), "unlisted"))


@given(
    a=st.tuples(st.integers(0, 3), st.sampled_from(["dc1", "dc2", "dc3"])),
    b=st.tuples(st.integers(0, 3), st.sampled_from(["dc1", "dc2", "dc3"])),
)
def test_versions_of_different_datacenters_are_never_both_newer(
    a: tuple[int, str], b: tuple[int, str]
) -> None:
    ranks = Ranks(["dc1", "dc2", "dc3"])
    va, vb = Version(a[0], a[1]), Version(b[0], b[1])
    assert not (ranks.newer(va, vb) and ranks.newer(vb, va))
    if a != b:
        assert ranks.newer(va, vb) or ranks.newer(vb, va)


# ------------------------------------------------------------------ probes


def test_a_probe_locks_the_row_and_binds_every_value() -> None:
    image = {"id": 1, "v": "x'); DROP TABLE t; --", "ts": at(0)}
    probe = Probe(target("db", "t"), (1,), (image,), tombstone=False)
    [select] = probe.statements()
    assert select.sql == (
        "SELECT (`id` <=> %s AND `v` <=> %s AND `ts` <=> %s), `db`.`t`.* FROM `db`.`t` "
        "WHERE `id` = %s FOR UPDATE"
    )
    assert select.params == (1, "x'); DROP TABLE t; --", at(0), 1)
    assert "DROP" not in select.sql


def test_a_probe_quotes_odd_names() -> None:
    table = TargetTable("s`1", "t%x", ("i`d", "v"), ("i`d",))
    probe = Probe(table, (7,), ({"i`d": 7, "v": None},), tombstone=False)
    [select] = probe.statements()
    assert "`s``1`.`t%%x`.*" in select.sql
    assert "(`i``d` <=> %s AND `v` <=> %s)" in select.sql
    assert select.sql.endswith("WHERE `i``d` = %s FOR UPDATE")
    assert select.params == (7, None, 7)


def test_a_probe_has_one_flag_per_image_and_adapted_values() -> None:
    plus2 = dt.timezone(dt.timedelta(hours=2))
    images = ({"id": 1, "v": "a"}, {"id": 1, "ts": at(0).replace(tzinfo=UTC).astimezone(plus2)})
    probe = Probe(TargetTable("db", "t", COLUMNS, ("id",)), (1,), images, tombstone=False)
    [select] = probe.statements()
    assert select.sql.startswith(
        "SELECT (`id` <=> %s AND `v` <=> %s), (`id` <=> %s AND `ts` <=> %s), `db`.`t`.*"
    )
    assert select.params == (1, "a", 1, at(0), 1)


def test_a_probe_reads_the_tombstone_only_for_policies_with_a_column() -> None:
    change = update(row(), row(v="b"))
    [with_column] = make_engine().prepare([txn(change)]).probes
    [without] = make_engine(("db.t", TablePolicy("keep"))).prepare([txn(change)]).probes
    assert with_column.tombstone and not without.tombstone
    assert len(without.statements()) == 1
    select, lookup = with_column.statements()
    assert lookup.sql == (
        f"SELECT `drc$deleted_at`, `drc$origin` FROM `drc`.`{tombstones.name('db', 't')}` "
        "WHERE `id` = %s FOR UPDATE"
    )
    assert lookup.params == (1,)
    assert select.sql.endswith("FOR UPDATE")


def test_a_probe_with_a_composite_key_matches_every_key_column() -> None:
    table = TargetTable("db", "t", ("a", "b", "ts"), ("a", "b"))
    probe = Probe(table, (1, "x"), ({"a": 1, "b": "x", "ts": at(0)},), tombstone=True)
    select, lookup = probe.statements()
    assert "WHERE (`a` = %s AND `b` = %s) FOR UPDATE" in select.sql
    assert select.params[-2:] == (1, "x")
    assert lookup.sql.endswith("WHERE (`a` = %s AND `b` = %s) FOR UPDATE")
    assert lookup.params == (1, "x")


def test_observe_reads_the_flags_the_row_and_the_tombstone() -> None:
    probe = Probe(target("db", "t"), (1,), (row(), row(v="b")), tombstone=True)
    names = ["f0", "f1", "id", "v", "ts"]
    seen = observe(probe, [(names, [(0, 1, 1, "b", at(0))]), (["d", "o"], [(at(5), "dc1")])])
    assert seen.row == {"id": 1, "v": "b", "ts": at(0)}
    assert seen.same == (False, True)
    assert seen.tombstone == Version(at(5), "dc1")
    gone = observe(probe, [(names, []), (["d", "o"], [])])
    assert gone.row is None and gone.same == (False, False) and gone.tombstone is None


# ------------------------------------------------------------------ what gets written


def test_the_resolution_s_writes_are_the_log_rows_and_the_newer_tombstones() -> None:
    engine = make_engine()
    resolution = run(
        engine,
        txn(update(row(), row(v="b", ts=at(10)))),
        txn(delete(row(2)), tombstone_row(2, at(30))),
        rows={1: row(v="mine", ts=at(20))},
    )
    decision = Decision(entries=resolution.entries, tombstones=resolution.tombstones)
    log_insert, tombstone_upsert = decision.log_statements()
    assert log_insert.sql.startswith("INSERT INTO `drc`.`conflicts`")
    assert "update-update" in log_insert.params and "local" in log_insert.params
    assert tombstone_upsert.sql.startswith(
        f"INSERT INTO `drc`.`{tombstones.name('db', 't')}` (`id`, `drc$schema`, `drc$table`, "
        "`drc$deleted_at`, `drc$origin`)"
    )
    assert tombstone_upsert.params == (2, "db", "t", at(30), "dc2")
    assert Decision().log_statements() == []


# ------------------------------------------------------------------ convergence (both sides)

stamps = st.integers(0, 4).map(at)  # few distinct times: ties are common


def side(
    datacenter: str,
    origin: str,
    change: RowChange,
    local: dict[str, Any] | None,
    *,
    carried: Any = None,
    tomb: tuple[Any, str] | None = None,
) -> dict[str, Any] | None:
    """What ``datacenter`` holds after applying ``origin``'s change over its own state."""
    changes = [change] if carried is None else [change, tombstone_row(1, carried, origin)]
    engine = make_engine(origin=origin, datacenter=datacenter)
    resolution = run(
        engine,
        txn(*changes),
        rows={} if local is None else {1: local},
        tombs={} if tomb is None else {1: tomb},
    )
    return final_row(local, resolution)


@given(mine=stamps, theirs=stamps)
def test_concurrent_updates_converge(mine: dt.datetime, theirs: dt.datetime) -> None:
    base = row(v="seed", ts=at(-1))
    by_dc1, by_dc2 = row(v="dc1", ts=mine), row(v="dc2", ts=theirs)
    on_dc1 = side("dc1", "dc2", update(base, by_dc2), by_dc1)
    on_dc2 = side("dc2", "dc1", update(base, by_dc1), by_dc2)
    assert on_dc1 == on_dc2
    assert on_dc1 == (by_dc1 if mine >= theirs else by_dc2)


@given(mine=stamps, theirs=stamps)
def test_concurrent_inserts_converge(mine: dt.datetime, theirs: dt.datetime) -> None:
    by_dc1, by_dc2 = row(v="dc1", ts=mine), row(v="dc2", ts=theirs)
    on_dc1 = side("dc1", "dc2", insert(by_dc2), by_dc1)
    on_dc2 = side("dc2", "dc1", insert(by_dc1), by_dc2)
    assert on_dc1 == on_dc2


@given(deleted=stamps, updated=stamps, deleter=st.sampled_from(["dc1", "dc2"]))
def test_a_delete_concurrent_with_an_update_converges(
    deleted: dt.datetime, updated: dt.datetime, deleter: str
) -> None:
    base = row(v="seed", ts=at(-1))
    updater = "dc2" if deleter == "dc1" else "dc1"
    changed = row(v=updater, ts=updated)
    # The deleter holds no row and its tombstone; the updater holds its changed row.
    on_deleter = side(deleter, updater, update(base, changed), None, tomb=(deleted, deleter))
    on_updater = side(updater, deleter, delete(base), changed, carried=deleted)
    assert on_deleter == on_updater
    newer_delete = deleted > updated or (deleted == updated and deleter == "dc1")
    assert on_deleter == (None if newer_delete else changed)


# ------------------------------------------------------------------ batched probes


def test_probes_of_one_table_are_read_in_one_locking_select_and_their_tombstones_in_another() -> (
    None
):
    from drc.conflicts.probes import MAX_FLAGS, SLOT, Probe, ProbePlan

    t = target("db", "t")
    one = Probe(t, (1,), (row(1), row(1, v="b")), tombstone=True)
    two = Probe(t, (2,), (row(2), row(2)), tombstone=True)  # equal images share one bit
    many = Probe(t, (3,), tuple(row(3, v=str(n)) for n in range(MAX_FLAGS + 1)), tombstone=True)
    plan = ProbePlan([one, two, many])
    batched = [s for s in plan.statements if "CASE WHEN" in s.sql]
    assert len(batched) == 2 and all(s.sql.endswith("FOR UPDATE") for s in plan.statements)
    assert "`db`.`t`.*" in batched[0].sql and "`drc$deleted_at`" in batched[1].sql
    assert batched[0].sql.count("%s") == len(batched[0].params)
    assert "`id` IN (%s, %s)" in batched[0].sql  # the key with too many images goes alone
    assert len(plan.statements) == 4

    names = ["drc_answer", "id", "v", "ts"]
    results = [  # in statement order: the lone probe first, then the batch
        (["f"] * MAX_FLAGS + ["f", "id", "v", "ts"], []),  # key 3: no row
        (["drc$deleted_at", "drc$origin"], []),
        (names, [(1 * SLOT + 1, 2, "a", at(0))]),  # batch slot 1 (key 2) equals its image
        (["drc_probe", "drc$deleted_at", "drc$origin"], [(0, at(5), "dc1")]),  # key 1 deleted
    ]
    first, second, third = plan.observe(results)
    assert first.row is None and first.tombstone == Version(at(5), "dc1")
    assert second.row == row(2) and second.same == (True, True) and second.tombstone is None
    assert third.row is None and third.same == (False,) * (MAX_FLAGS + 1)


def test_a_delete_whose_tombstone_row_is_in_the_next_fragment_gets_its_time() -> None:
    import dataclasses

    engine = make_engine()
    whole = txn(delete(row()), tombstone_row(1, at(40)))
    first = dataclasses.replace(whole, changes=whole.changes[:1], fragment=0, last_fragment=False)
    second = dataclasses.replace(whole, changes=whole.changes[1:], fragment=1)
    resolution = run(engine, first, second, rows={1: row()})
    assert resolution.tombstones == [tomb_write(1, at(40))]
    assert engine.fallback_stamps == 0


# ------------------------------------------------------------------ inside a snapshot's window


def in_window(scn: SCN, schema: str, table: str) -> bool:
    return True  # every change of these tests is inside the table's window


def test_in_a_window_an_lww_change_older_than_the_copied_row_is_dropped_and_not_logged() -> None:
    copied = row(v="later", ts=at(20))  # the chunk was read after this change
    resolution = run(make_engine(), txn(update(row(ts=at(5)), row(v="b", ts=at(10)))),
                     rows={1: copied}, plain=in_window)  # fmt: skip
    assert resolution.changes == [] and resolution.entries == []


def test_in_a_window_an_lww_change_keeps_a_newer_local_write_made_after_the_join() -> None:
    """Once joined, the table takes local writes while the channel still replays its window: an
    older origin change must not undo them here (the origin keeps the local write, it is newer),
    or the datacenters would differ for good."""
    local = row(v="written here after the join", ts=at(30))
    older = txn(update(row(ts=at(5)), row(v="origin", ts=at(10))))
    resolution = run(make_engine(), older, rows={1: local}, plain=in_window)
    assert final_row(local, resolution) == local and resolution.entries == []
    gone = run(make_engine(), txn(delete(row(ts=at(10))), tombstone_row(1, at(12))),
               rows={1: local}, plain=in_window)  # fmt: skip
    assert final_row(local, gone) == local and gone.entries == []


def test_in_a_window_a_newer_lww_change_applies_and_a_delete_leaves_its_tombstone() -> None:
    newer = row(v="origin", ts=at(40))
    resolution = run(make_engine(), txn(update(row(ts=at(5)), newer)), rows={1: row(ts=at(20))},
                     plain=in_window)  # fmt: skip
    assert final_row(row(ts=at(20)), resolution) == newer and resolution.entries == []
    deleted = run(make_engine(), txn(delete(row(ts=at(10))), tombstone_row(1, at(50))),
                  rows={1: row(ts=at(20))}, plain=in_window)  # fmt: skip
    assert final_row(row(ts=at(20)), deleted) is None and deleted.entries == []
    assert deleted.tombstones == [tomb_write(1, at(50))]


@pytest.mark.parametrize("policy", ["overwrite", "keep"])
def test_in_a_window_other_policies_write_the_change_as_it_is_and_log_nothing(
    policy: str,
) -> None:
    engine = make_engine(("db.t", TablePolicy(policy)))
    after = row(v="b", ts=at(10))
    resolution = run(engine, txn(update(row(ts=at(5)), after)), rows={1: row(v="later")},
                     plain=in_window)  # fmt: skip
    assert resolution.changes == [upserted(after)] and resolution.entries == []


@pytest.mark.parametrize("policy", [TablePolicy("overwrite"), LWW])
def test_a_change_after_the_window_is_compared_with_the_row_the_window_s_changes_leave(
    policy: TablePolicy,
) -> None:
    """One target transaction across the window's end: the change after it finds the row the
    change inside it wrote, not the row the probe read before (a false conflict, logged)."""
    copied, first, second = row(v="a", ts=at(5)), row(v="b", ts=at(10)), row(v="c", ts=at(20))
    inside, after = txn(update(copied, first)), txn(update(first, second))
    resolution = run(make_engine(("db.t", policy)), inside, after, rows={1: copied},
                     plain=lambda scn, _s, _t: scn <= inside.scn)  # fmt: skip
    assert resolution.entries == []
    assert final_row(copied, resolution) == second
