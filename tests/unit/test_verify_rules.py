"""Verify's pure rules: row hash SQL, row-list comparison, the recheck verdicts, repair sides."""

from __future__ import annotations

from drc.conflicts.rules import Version
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.core.rowsum import (
    Difference,
    chunk_sum,
    compare_multisets,
    compare_sums,
    row_hash,
)
from drc.core.scn import SCN
from drc.core.settle import binlog_point, judge, reached, within
from drc.verify.compare import TableSpec
from drc.verify.repair import decide


def test_the_row_hash_casts_text_to_bytes_and_flags_nulls() -> None:
    expr = row_hash(["`id`", "`name`"], ["int", "varchar"])
    assert expr == ("CRC32(CONCAT_WS('#', `id`, CAST(`name` AS BINARY), "
                    "CONCAT(ISNULL(`id`), ISNULL(`name`))))")  # fmt: skip
    assert chunk_sum("`d`.`t`", expr, "1 = 1").startswith("SELECT COUNT(*), COALESCE(BIT_XOR(")


def test_row_lists_give_missing_extra_and_different_keys() -> None:
    found = compare_sums({(1,): 10, (2,): 20, (3,): 30}, {(2,): 21, (3,): 30, (4,): 40})
    assert found == [Difference("missing", (1,)), Difference("different", (2,)),
                     Difference("extra", (4,))]  # fmt: skip


def test_keyless_rows_compare_as_a_multiset() -> None:
    found = compare_multisets({7: 2, 8: 1}, {7: 1, 9: 1})
    assert sorted((d.kind, d.key) for d in found) == [
        ("extra", (9,)), ("missing", (7,)), ("missing", (8,))]  # fmt: skip


def test_a_difference_is_confirmed_only_when_seen_twice_alike() -> None:
    first = judge({}, {"a": (1, 2), "b": (3, 3)})
    assert first.equal == {"b"} and first.moving == {"a": (1, 2)} and not first.confirmed
    second = judge(first.moving, {"a": (1, 2)})
    assert second.confirmed == {"a": (1, 2)}
    moved = judge(first.moving, {"a": (1, 5)})
    assert moved.moving == {"a": (1, 5)} and not moved.confirmed


def test_binlog_points_compare_with_checkpoints_of_the_same_server_only() -> None:
    point = binlog_point(7, "mysql-bin.000003", 500)
    assert reached(SCN(0, 7, 3, 500), point) and not reached(SCN(0, 7, 3, 499), point)
    assert reached(SCN(0, 7, 4, 4), point) and reached(SCN(0, 8, 9, 9), point) is None
    assert within(SCN(0, 7, 3, 500), point) and not within(SCN(0, 7, 3, 501), point)


SPEC = TableSpec(("d", "t"), ("d", "t"), ("id", "v", "ts"), ("int", "int", "int"), ("id",))


def test_repair_writes_the_source_row_unless_lww_says_the_target_is_newer() -> None:
    plain = ConflictsConfig()
    assert decide(SPEC, ((1, 5, 10), (1, 6, 20)), plain, "dc2", "dc1").write_target
    assert decide(SPEC, (None, (1, 6, 20)), plain, "dc2", "dc1").action == "target:delete"
    rule = ConflictTableConfig(table="d.*", policy="lww", column="ts")
    lww = ConflictsConfig(priority=("dc1", "dc2"), tables=(rule,))
    newer_target = decide(SPEC, ((1, 5, 10), (1, 6, 20)), lww, "dc2", "dc1")
    assert newer_target.action == "source:upsert" and newer_target.row == (1, 6, 20)
    assert decide(SPEC, ((1, 5, 30), (1, 6, 20)), lww, "dc2", "dc1").action == "target:upsert"
    tie = decide(SPEC, ((1, 5, 20), (1, 6, 20)), lww, "dc2", "dc1")
    assert tie.write_target  # dc1 (the source) is first in priority
    assert decide(SPEC, (None, (1, 6, 20)), lww, "dc2", "dc1").action == "source:upsert"


def test_lww_a_newer_deletion_on_the_other_side_beats_a_surviving_row() -> None:
    rule = ConflictTableConfig(table="d.*", policy="lww", column="ts")
    lww = ConflictsConfig(priority=("dc1", "dc2"), tables=(rule,))
    only_target, only_source = (None, (1, 6, 20)), ((1, 5, 20), None)
    # the source deleted the row after the target last wrote it: delete it on the target
    newer = decide(SPEC, only_target, lww, "dc2", "dc1", Version(25, "dc1"))
    assert newer.action == "target:delete" and newer.row is None
    # an older deletion loses: the row is written where it is missing
    older = decide(SPEC, only_target, lww, "dc2", "dc1", Version(15, "dc1"))
    assert older.action == "source:upsert" and older.row == (1, 6, 20)
    # the target deleted it later: delete on the source; equal times go by priority
    assert decide(SPEC, only_source, lww, "dc2", "dc1", Version(21, "dc2")).action == (
        "source:delete")  # fmt: skip
    tie = decide(SPEC, only_source, lww, "dc2", "dc1", Version(20, "dc2"))
    assert tie.action == "target:upsert"  # dc1's row wins the tie
    # tables without lww ignore tombstones: the source is right
    plain = decide(SPEC, only_target, ConflictsConfig(), "dc2", "dc1", Version(99, "dc1"))
    assert plain.action == "target:delete"
    assert decide(SPEC, only_source, ConflictsConfig(), "dc2", "dc1",
                  Version(99, "dc2")).action == "target:upsert"  # fmt: skip
