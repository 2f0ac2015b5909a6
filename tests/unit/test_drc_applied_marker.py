"""``[replicator] drc_applied = "marker"``: DRC-applied transactions stored without their rows.

Capture (the assembler and the event decoder's packet skip), the record flag (codec, JSON), and
what the pull API's batching does with such records for each kind of subscriber.
"""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import pytest

from drc.api import wire
from drc.api.app import create_app
from drc.api.batching import BatchBuilder, RowsOmitted, select
from drc.api.deps import ApiDeps
from drc.api.pullquery import BadQuery, Limits, Selection, ServerLimits, parse_pull_query
from drc.core.codec import decode_transaction, encode_transaction, peek_tables, rows_omitted
from drc.core.errors import CorruptRecordError
from drc.core.events import Column, Op, RowChange, SchemaChange, TableSchema, Transaction
from drc.core.jsonwire import transaction_from_json, transaction_to_json
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.reader import Record
from drc.replicator.assembler import FragmentLimits, TransactionAssembler
from drc.replicator.binlog.columns import layout_of
from drc.replicator.binlog.events import HEADER, EventDecoder, TableEntry, TableMaps
from drc.replicator.source_events import Begin, Commit, Rows, SkippedRows, Statement

with warnings.catch_warnings():  # starlette nags about httpx; the TestClient works as it is
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def _table(db: str, name: str) -> TableSchema:
    return TableSchema(db, name, (Column("id", "int", False), Column("v", "int", True)), ("id",))


def _rows(db: str, name: str, *ids: int) -> Rows:
    images = tuple((None, {"id": i, "v": i * 10}) for i in ids)
    return Rows(_table(db, name), Op.INSERT, images, size_bytes=20 * len(ids))


def _assembler(
    omit: bool = True, capture: TableFilter | None = None, rows: int = 10_000
) -> TransactionAssembler:
    limits = FragmentLimits(rows=rows, bytes=1 << 30)
    return TransactionAssembler(7, 2, capture or TableFilter(), limits, omit_drc_rows=omit)


# ---------------------------------------------------------------- capture


def test_flagged_transaction_is_one_record_without_rows_keeping_scn_gtid_and_time() -> None:
    asm = _assembler()
    asm.feed(Begin("1-7-5", 7, standalone=False, skip_replication=True))
    asm.feed(SkippedRows(_table("shop", "t")))
    asm.feed(SkippedRows(_table("drc", "checkpoint")))
    committed = asm.feed(Commit(7, 1_700_000_000, 3, 1234))
    assert committed is not None and not committed.empty and committed.drc_originated
    assert committed.scn == SCN(2, 7, 3, 1234) and committed.gtid == "1-7-5"
    assert set(committed.tables) == {("shop", "t"), ("drc", "checkpoint")}
    [txn] = list(committed.fragments())
    assert txn.rows_omitted and txn.drc_originated and txn.changes == ()
    assert (txn.gtid, txn.timestamp, txn.last_fragment) == ("1-7-5", 1_700_000_000, True)


def test_rows_of_a_transaction_known_by_its_checkpoint_row_only_are_dropped_spill_too() -> None:
    asm = _assembler(rows=2)  # the first rows spill before the checkpoint row is seen
    asm.feed(Begin("1-7-6", 7, standalone=False))
    asm.feed(_rows("shop", "t", 1, 2, 3))
    asm.feed(_rows("drc", "checkpoint", 1))
    committed = asm.feed(Commit(7, 5, 3, 20))
    assert committed is not None and committed.drc_originated
    [txn] = list(committed.fragments())  # one record: no fragments left
    assert txn.rows_omitted and txn.changes == () and txn.fragment == 0


def test_other_transactions_keep_their_rows_in_marker_mode() -> None:
    asm = _assembler()
    asm.feed(Begin("1-7-7", 7, standalone=False))
    asm.feed(_rows("shop", "t", 1))
    committed = asm.feed(Commit(7, 5, 3, 30))
    assert committed is not None
    [txn] = list(committed.fragments())
    assert not txn.rows_omitted and [c.after for c in txn.changes] == [{"id": 1, "v": 10}]


def test_full_mode_keeps_rows_of_drc_transactions() -> None:
    asm = _assembler(omit=False)
    asm.feed(Begin("1-7-8", 7, standalone=False, skip_replication=True))
    asm.feed(_rows("shop", "t", 1))
    committed = asm.feed(Commit(7, 5, 3, 40))
    assert committed is not None
    [txn] = list(committed.fragments())
    assert txn.drc_originated and not txn.rows_omitted and len(txn.changes) == 1


def test_drc_transaction_of_tables_the_filter_leaves_out_stays_empty() -> None:
    asm = _assembler(capture=TableFilter.build(["shop.*"]))
    asm.feed(Begin("1-7-9", 7, standalone=False, skip_replication=True))
    asm.feed(SkippedRows(_table("other", "t")))
    asm.feed(SkippedRows(_table("drc", "checkpoint")))
    committed = asm.feed(Commit(7, 5, 3, 50))
    assert committed is not None and committed.empty and committed.drc_originated


def test_drc_applied_ddl_is_kept() -> None:
    asm = _assembler()
    asm.feed(Begin("1-7-10", 7, standalone=True, skip_replication=True))
    committed = asm.feed(Statement("shop", "ALTER TABLE t ADD c INT", 7, 5, 3, 60, True))
    assert committed is not None and committed.drc_originated
    [txn] = list(committed.fragments())
    assert [d.statement for d in txn.ddl] == ["ALTER TABLE t ADD c INT"] and not txn.rows_omitted


def _packet(kind: int, body: bytes, flags: int = 0) -> bytes:
    size = 19 + len(body) + 4  # header, body, checksum
    return HEADER.pack(1, kind, 7, size, 999, flags) + body + b"\0\0\0\0"


def test_event_decoder_skips_rows_packets_reading_only_the_table_id() -> None:
    table = _table("shop", "t")
    decoder = EventDecoder(TableMaps(), "mysql-bin.000003")
    decoder.checksum = True
    decoder.tables[42] = TableEntry(42, table, layout_of("shop", "t", []))
    body = (42).to_bytes(6, "little") + b"\xff\xff" + b"garbage that is never decoded"
    for kind in (23, 24, 25):
        assert decoder.decode(_packet(kind, body), skip_rows=True) == SkippedRows(table)
    unknown = _packet(23, (41).to_bytes(6, "little") + b"\0\0")
    assert decoder.decode(unknown, skip_rows=True) is None  # no TABLE_MAP: dropped, as ever
    gtid = _packet(162, struct.pack("<QIB", 5, 1, 0) + b"\0" * 6)
    assert decoder.decode(gtid, skip_rows=True) == Begin("1-7-5", 7, False, False)
    xid = decoder.decode(_packet(16, b"\0" * 8), skip_rows=True)  # decoded as usual
    assert xid == Commit(7, 1, 3, 999)


# ---------------------------------------------------------------- the record


def _marker(pos: int = 10, ddl: tuple[SchemaChange, ...] = ()) -> Transaction:
    return Transaction(
        SCN(1, 7, 1, pos), 7, f"0-7-{pos}", 1_700_000_000, (), ddl, True, rows_omitted=True
    )


def test_marker_record_round_trips_with_its_flag_in_the_header() -> None:
    record = encode_transaction(_marker())
    assert record[3] == 1 and rows_omitted(record)
    txn, end = decode_transaction(record)
    assert end == len(record) and txn == _marker()
    assert peek_tables(record) == (True, set(), 0)
    plain = encode_transaction(Transaction(SCN(1, 7, 1, 5), 7, None, 1, ()))
    assert plain[3] == 0 and not rows_omitted(plain)


def test_rows_omitted_only_on_a_drc_transaction_without_changes() -> None:
    change = RowChange("shop", "t", Op.INSERT, None, {"id": 1})
    with pytest.raises(ValueError, match="rows_omitted"):
        Transaction(SCN(1, 7, 1, 5), 7, None, 1, (change,), (), True, rows_omitted=True)
    with pytest.raises(ValueError, match="rows_omitted"):
        Transaction(SCN(1, 7, 1, 5), 7, None, 1, (), (), False, rows_omitted=True)


def test_a_record_flagged_rows_omitted_that_has_rows_is_corrupt() -> None:
    change = RowChange("shop", "t", Op.INSERT, None, {"id": 1})
    full = encode_transaction(Transaction(SCN(1, 7, 1, 5), 7, None, 1, (change,), (), True))
    forged = bytearray(full)
    forged[3] = 1
    with pytest.raises(CorruptRecordError):  # the CRC covers the flags byte
        decode_transaction(bytes(forged))


def test_json_form_says_rows_omitted_only_when_set() -> None:
    data = transaction_to_json(_marker())
    assert data["rows_omitted"] is True and data["changes"] == []
    assert transaction_from_json(data) == _marker()
    plain = Transaction(SCN(1, 7, 1, 5), 7, None, 1, ())
    assert "rows_omitted" not in transaction_to_json(plain)


# ---------------------------------------------------------------- the pull API


def _record(txn: Transaction) -> Record:
    return Record(txn.scn, encode_transaction(txn), txn.timestamp * 1000, False, 0, 0)


def _user(pos: int) -> Transaction:
    change = RowChange("shop", "t", Op.INSERT, None, {"id": pos})
    return Transaction(SCN(1, 7, 1, pos), 7, None, 1, (change,))


STREAM = [_record(_user(5)), _record(_marker(10)), _record(_user(15))]


def _pull(selection: Selection) -> BatchBuilder:
    builder = BatchBuilder(selection, Limits(100, 1 << 20), SCN.zero())
    builder.add(STREAM)
    return builder


def test_skip_drc_leaves_markers_out() -> None:
    builder = _pull(Selection(skip_drc=True))
    assert [item.scn.log_pos for item in builder.items] == [5, 15]
    assert builder.next == STREAM[-1].scn


@pytest.mark.parametrize("tables", ["", "shop.*", "other.*"])
def test_a_subscriber_that_did_not_say_it_takes_markers_is_refused(tables: str) -> None:
    with pytest.raises(RowsOmitted) as raised:
        _pull(Selection(TableFilter.parse_list(tables)))
    assert raised.value.scn == STREAM[1].scn


@pytest.mark.parametrize("tables", ["", "shop.*", "other.*"])
def test_markers_taken_are_sent_as_stored_whatever_the_table_filter(tables: str) -> None:
    builder = _pull(Selection(TableFilter.parse_list(tables), markers=True))
    sent = {item.scn.log_pos: item for item in builder.items}
    assert sent[10].record() == STREAM[1].payload and sent[10].transaction().rows_omitted
    assert (5 in sent) == (tables != "other.*")


def test_select_refuses_a_marker_alone() -> None:
    with pytest.raises(RowsOmitted):
        select([STREAM[1]], Selection())
    assert select([STREAM[1]], Selection(skip_drc=True)) == []


def test_query_parses_drc_applied() -> None:
    def parse(**params: str) -> Selection:
        pairs = [("after", "0:0:0:0"), *params.items()]
        return parse_pull_query(pairs, ServerLimits()).selection

    assert not parse().markers and parse().refuses_markers
    assert parse(drc_applied="marker").markers and not parse(drc_applied="full").markers
    assert not parse(skip_drc="1").refuses_markers
    with pytest.raises(BadQuery, match="drc_applied must be 'full' or 'marker'"):
        parse(drc_applied="rows")


# ---------------------------------------------------------------- over HTTP


def _client(tmp_path: Path, mode: str) -> TestClient:
    buffer = EventBuffer.open(tmp_path / "buf")
    for record in STREAM:
        buffer.append(record.scn, record.payload, record.timestamp_ms, False)
    buffer.commit()
    deps = ApiDeps(buffer=buffer, datacenter="dc1", drc_applied=mode)
    return TestClient(create_app(deps), raise_server_exceptions=False)


def test_api_in_marker_mode_refuses_a_pull_that_would_want_drc_rows_at_once(
    tmp_path: Path,
) -> None:
    client = _client(tmp_path, "marker")
    after = str(STREAM[-1].scn)  # nothing left to send: refused all the same
    answer = client.get(wire.PATH_EVENTS, params={"after": after, "tables": "shop.*"})
    assert answer.status_code == 409 and answer.json()["error"] == wire.ERROR_ROWS_OMITTED
    assert "skip_drc=1" in answer.json()["message"] and answer.json()["scn"] is None
    for params in ({"skip_drc": "1"}, {"drc_applied": "marker"}):
        assert client.get(wire.PATH_EVENTS, params={"after": after, **params}).status_code == 200


@pytest.mark.parametrize("accept", [wire.MEDIA_JSON, wire.MEDIA_RECORDS])
def test_api_in_full_mode_refuses_a_batch_holding_a_marker_and_serves_it_when_asked(
    tmp_path: Path, accept: str
) -> None:
    client = _client(tmp_path, "full")
    headers = {"Accept": accept}
    refused = client.get(wire.PATH_EVENTS, params={"after": "0:0:0:0"}, headers=headers)
    assert refused.status_code == 409 and refused.json()["scn"] == str(STREAM[1].scn)
    before = client.get(wire.PATH_EVENTS, params={"after": "0:0:0:0", "max_events": "1"})
    assert before.status_code == 200  # the user transaction before it is served
    params = {"after": "0:0:0:0", "drc_applied": "marker"}
    served = client.get(wire.PATH_EVENTS, params=params, headers=headers)
    assert served.status_code == 200
    if accept == wire.MEDIA_JSON:
        txns = [transaction_from_json(t) for t in served.json()["transactions"]]
    else:
        txns = wire.split_records(served.content)
    assert [t.rows_omitted for t in txns] == [False, True, False]


def test_tail_shows_a_marker_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from drc.cli.tail import _table_lines

    _table_lines(_marker(10))
    assert capsys.readouterr().out == "1:7:1:10  rows not stored (drc_applied = marker) [drc]\n"
