"""Transaction assembly from binlog events: SCNs, grouping, filtering, loop flag, fragments."""

from __future__ import annotations

import pytest

from drc.core.errors import UnsupportedTransactionError
from drc.core.gtid import Gtid
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import TransactionAssembler
from drc.replicator.source_events import (
    Begin,
    Commit,
    GtidList,
    Heartbeat,
    Statement,
    XaPrepare,
)
from tests.support.assembler import assembler, rows_event


def test_commit_gives_one_transaction_with_the_commit_position_as_scn() -> None:
    asm = assembler()
    assert asm.feed(Begin("1-7-5", 7, standalone=False)) is None
    assert asm.feed(rows_event("shop", "t", 1, 2)) is None
    assert asm.feed(rows_event("shop", "u", 3)) is None
    committed = asm.feed(Commit(7, 1700000000, 3, 1234))
    assert committed is not None and committed.scn == SCN(2, 7, 3, 1234)
    [txn] = list(committed.fragments())
    assert (txn.gtid, txn.timestamp, txn.last_fragment) == ("1-7-5", 1700000000, True)
    assert [(c.table, c.after["id"]) for c in txn.changes] == [("t", 1), ("t", 2), ("u", 3)]
    assert set(committed.tables) == {("shop", "t"), ("shop", "u")}


def test_ddl_is_a_transaction_at_its_own_position() -> None:
    asm = assembler()
    asm.feed(Begin("1-7-6", 7, standalone=True))
    committed = asm.feed(Statement("shop", "ALTER TABLE t ADD c INT", 7, 5, 3, 2000))
    assert committed is not None and committed.scn == SCN(2, 7, 3, 2000)
    assert [d.statement for d in committed.ddl] == ["ALTER TABLE t ADD c INT"]
    without_begin = asm.feed(Statement("shop", "DROP TABLE t", 7, 6, 3, 2100))
    assert without_begin is not None and without_begin.ddl[0].statement == "DROP TABLE t"


def test_account_statements_with_comments_are_dropped_and_counted_at_capture() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    spellings = [
        "CREATE /* c */ USER 'x6'@'%' IDENTIFIED BY 'S3cretPW!cm'",
        "/*! CREATE USER 'x7'@'%' IDENTIFIED BY 'S3cretPW!ec' */",
        "/*M!100100 GRANT SELECT ON shop.* TO 'x7'@'%' IDENTIFIED BY 'S3cretPW!gr' */",
    ]
    for pos, sql in enumerate(spellings, start=1):
        asm.feed(Begin(f"1-7-{pos}", 7, standalone=True))
        committed = asm.feed(Statement("shop", sql, 7, 5, 3, pos * 100))
        assert committed is not None and committed.ddl == () and committed.empty
    assert asm.account_statements_dropped == len(spellings)


def test_statement_inside_an_open_transaction_waits_for_its_commit() -> None:
    asm = assembler()
    asm.feed(Begin(None, 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    assert asm.feed(Statement("shop", "CREATE TEMPORARY TABLE x (a INT)", 7, 5, 3, 10)) is None
    committed = asm.feed(Commit(7, 5, 3, 20))
    assert committed is not None and committed.scn.log_pos == 20


def test_checkpoint_write_flags_the_transaction_even_when_filtered_out() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    asm.feed(Begin(None, 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    asm.feed(rows_event("drc", "checkpoint", 1))
    committed = asm.feed(Commit(7, 5, 3, 20))
    assert committed is not None and committed.drc_originated
    [txn] = list(committed.fragments())
    assert txn.drc_originated and [c.table for c in txn.changes] == ["t"]


def test_a_transaction_the_filter_empties_is_marked_empty() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    asm.feed(Begin(None, 7, standalone=False))
    asm.feed(rows_event("other", "t", 1))
    committed = asm.feed(Commit(7, 5, 3, 20))
    assert committed is not None and committed.empty
    ddl = asm.feed(Statement("other", "CREATE TABLE other.x (a INT)", 7, 5, 3, 30))
    assert ddl is not None and ddl.empty


def test_big_transaction_is_fragmented_with_one_scn_and_ordered_rows() -> None:
    asm = assembler(rows=3)
    asm.feed(Begin("1-7-9", 7, standalone=False))
    for start in range(0, 10, 2):
        asm.feed(rows_event("shop", "t", start, start + 1))
    asm.feed(rows_event("drc", "checkpoint", 99))  # flag arrives after fragments were spilled
    committed = asm.feed(Commit(7, 42, 4, 500))
    assert committed is not None
    fragments = list(committed.fragments())
    assert [f.fragment for f in fragments] == list(range(len(fragments)))
    assert len(fragments) > 2
    assert [f.last_fragment for f in fragments] == [False] * (len(fragments) - 1) + [True]
    assert {f.scn for f in fragments} == {SCN(2, 7, 4, 500)}
    assert all(f.drc_originated and f.timestamp == 42 for f in fragments)
    assert all(len(f.changes) <= 3 for f in fragments), "the row limit holds inside an event"
    ids = [c.after["id"] for f in fragments for c in f.changes]
    assert ids == [*range(10), 99]


def test_reset_forgets_a_partly_read_transaction() -> None:
    asm = assembler()
    asm.feed(Begin(None, 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    asm.reset()
    assert asm.feed(Commit(7, 5, 3, 20)) is None
    assert asm.feed(Heartbeat(3, 20)) is None


def test_skip_replication_flag_marks_dml_and_ddl() -> None:
    asm = assembler()
    asm.feed(Begin(None, 7, standalone=False, skip_replication=True))
    asm.feed(rows_event("shop", "t", 1))
    dml = asm.feed(Commit(7, 5, 3, 20))
    ddl = asm.feed(Statement("shop", "DROP TABLE t", 7, 6, 3, 30, skip_replication=True))
    plain = asm.feed(Statement("shop", "DROP TABLE u", 7, 6, 3, 40))
    assert dml is not None and dml.drc_originated
    assert ddl is not None and ddl.drc_originated
    assert plain is not None and not plain.drc_originated


def test_drop_database_of_a_captured_database_is_kept_whatever_the_session_database() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    dropped = asm.feed(Statement("other", "DROP DATABASE shop", 7, 5, 3, 30))
    assert dropped is not None and not dropped.empty
    [txn] = list(dropped.fragments())
    assert [d.statement for d in txn.ddl] == ["DROP DATABASE shop"]
    elsewhere = asm.feed(Statement("shop", "DROP DATABASE other", 7, 5, 3, 40))
    assert elsewhere is not None and elsewhere.empty


def test_the_gtid_position_follows_every_domain_and_markers_carry_it() -> None:
    asm = TransactionAssembler(
        7, 2, TableFilter.build(["shop.*"]), gtid_position={1: Gtid(1, 7, 4), 2: Gtid(2, 9, 1)}
    )
    asm.feed(Begin("1-7-5", 7, standalone=False))
    asm.feed(rows_event("other", "t", 1))  # filtered out: an empty transaction
    empty = asm.feed(Commit(7, 1, 3, 100))
    assert empty is not None and empty.empty
    assert (empty.gtid, empty.gtid_position) == ("1-7-5", "1-7-5,2-9-1")
    asm.feed(Begin("2-9-2", 9, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    kept = asm.feed(Commit(9, 1, 3, 200))
    assert kept is not None
    [txn] = list(kept.fragments())
    assert (txn.gtid, txn.gtid_position) == ("2-9-2", "1-7-5,2-9-2")


def test_a_single_domain_source_stores_no_separate_position() -> None:
    asm = assembler()
    asm.feed(Begin("1-7-5", 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    committed = asm.feed(Commit(7, 1, 3, 100))
    assert committed is not None
    [txn] = list(committed.fragments())
    assert (txn.gtid, txn.gtid_position) == ("1-7-5", None)


def test_a_read_from_a_files_start_takes_its_position_from_the_gtid_list() -> None:
    asm = TransactionAssembler(7, 2, TableFilter())  # position unknown
    asm.feed(GtidList(("1-7-4", "1-3-2", "2-9-1")))
    asm.feed(Begin("1-7-5", 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    committed = asm.feed(Commit(7, 1, 3, 100))
    assert committed is not None and committed.gtid_position == "1-7-5,2-9-1"


def test_create_table_select_is_its_create_then_its_rows_under_a_later_scn() -> None:
    """MariaDB logs CREATE TABLE ... SELECT (ROW format) as one GTID group: the CREATE, then
    the copied rows, then the commit. The CREATE is a transaction of its own at its position,
    the rows a later one, fragmented like any: DDL never rides in a fragment before the last
    (the apply would move its checkpoint to that SCN and drop the later fragments)."""
    asm = assembler(rows=3)
    asm.feed(Begin("1-7-9", 7, standalone=False))
    create = asm.feed(Statement("shop", "CREATE TABLE `shop`.`t2` (`id` int)", 7, 42, 4, 300))
    assert create is not None and create.scn == SCN(2, 7, 4, 300)
    [ddl] = list(create.fragments())
    assert [d.statement for d in ddl.ddl] == ["CREATE TABLE `shop`.`t2` (`id` int)"]
    assert ddl.changes == () and ddl.last_fragment and ddl.gtid == "1-7-9"
    for start in range(0, 10, 2):
        assert asm.feed(rows_event("shop", "t2", start, start + 1)) is None
    copied = asm.feed(Commit(7, 42, 4, 900))
    assert copied is not None and copied.scn == SCN(2, 7, 4, 900) and copied.ddl == ()
    fragments = list(copied.fragments())
    assert len(fragments) > 2 and not any(f.ddl for f in fragments)
    assert [c.after["id"] for f in fragments for c in f.changes] == list(range(10))


def _xa_prepare(pos: int, one_phase: bool = False) -> XaPrepare:
    return XaPrepare("X'6131',X'',1", one_phase, 7, 5, "mysql-bin.000003", 3, pos)


def test_a_two_phase_xa_of_a_captured_table_stops_capture_naming_where_and_which() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    asm.feed(Begin("1-7-8", 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    with pytest.raises(UnsupportedTransactionError) as info:
        asm.feed(_xa_prepare(1093))
    message = str(info.value)
    assert "mysql-bin.000003:1093" in message and "X'6131',X'',1" in message
    assert "1-7-8" in message and "shop.t" in message and "not support" in message


def test_a_two_phase_xa_of_tables_left_out_is_stored_as_a_marker_and_its_commit_too() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    asm.feed(Begin("1-7-8", 7, standalone=False))
    asm.feed(rows_event("other", "t", 1))
    prepared = asm.feed(_xa_prepare(1093))
    assert prepared is not None and prepared.empty and prepared.scn == SCN(2, 7, 3, 1093)
    asm.feed(Begin("1-7-9", 7, standalone=False))
    committed = asm.feed(Commit(7, 5, 3, 1223))  # the adapter's XA COMMIT 'xid'
    assert committed is not None and committed.empty and committed.gtid == "1-7-9"


def test_a_one_phase_xa_prepare_event_commits_its_rows_there() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    asm.feed(Begin("1-7-8", 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    committed = asm.feed(_xa_prepare(1093, one_phase=True))
    assert committed is not None and committed.scn == SCN(2, 7, 3, 1093)
    assert [c.after for t in committed.fragments() for c in t.changes] == [{"id": 1, "v": 10}]


def test_a_two_phase_xa_up_to_the_ignored_position_is_empty_not_refused() -> None:
    asm = TransactionAssembler(7, 2, TableFilter.build(["shop.*"]), xa_ignored_until=(3, 1093))
    asm.feed(Begin("1-7-8", 7, standalone=False))
    asm.feed(rows_event("shop", "t", 1))
    prepared = asm.feed(_xa_prepare(1093))  # a back-to-source read before what it serves
    assert prepared is not None and prepared.empty
    asm.feed(Begin("1-7-10", 7, standalone=False))
    asm.feed(rows_event("shop", "t", 2))
    with pytest.raises(UnsupportedTransactionError):
        asm.feed(_xa_prepare(1500))
