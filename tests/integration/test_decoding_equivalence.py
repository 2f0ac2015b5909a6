"""The plan-based fast path decodes a real binlog to exactly what the per-value path decodes,
and DRC's own event decoding (drc.replicator.fast_events) to exactly the library path's events.

One binlog range on the sandbox's dc1 (every MariaDB type with edge values and NULLs, multi-row
inserts, updates and deletes, latin1, a sysbench-like and a bulk table, an ALTER mid-range, and
rows logged with binlog_row_image=MINIMAL) is read twice by a plain BinLogStreamReader: once with
only decoding.py's per-value override, once with fast_rows installed. Every row dict must be
identical: keys and their order, value types and values (floats bit-exact, Decimal exponents).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    RowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from drc.core.values import ZeroDate
from drc.replicator import decoding, fast_rows, tablemap_cache
from drc.replicator.fast_events import NOT_MINE, FastDecoder
from drc.replicator.source import BinlogStream, SourceSettings, split_binlog_name
from drc.replicator.source_events import Commit, Heartbeat, Rows, Statement
from drc.sandbox.sandbox import ServerInfo
from tests.support.column_types import COLUMNS, ROWS
from tests.support.servers import connect, master_position
from tests.support.values import identical

# Edge values beyond test_capture_types' rows, in its column order.
MORE_EDGES = (
    "(4, 0, 1, -1, 1, -1, -1, 1, '-0.000000000000000000000000000001', -0.01,"
    " 1.17549435e-38, 5e-324,"
    " '2020-02-00', '2020-01-01 00:00:00.000001', '0000-01-01 00:00:00',"
    " '1970-01-01 00:00:01.000001',"
    " '-00:00:00.500000', '-01:00:00', 1901,"
    " '😀', 'x', '😀', '', 'ÿ€',"
    " x'61000000', x'0000', x'00', '',"
    " b'1', b'0', b'0',"
    " 'nope', 'red,green,blue', 'null', ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'))"
)
WORKLOAD = [
    f"INSERT INTO eq.all_types VALUES {', '.join(ROWS)}",
    f"INSERT INTO eq.all_types VALUES {MORE_EDGES}",
    "UPDATE eq.all_types SET vc = 'changed 😀', dc = -dc, tm = '-00:00:01.25', s = '', j = '{}',"
    " f = -f, ti = NULL WHERE id IN (1, 2, 4)",
    "UPDATE eq.all_types SET ti = 5, dtm = '0000-00-00 00:00:00', y = 0 WHERE id = 3",
    "DELETE FROM eq.all_types WHERE id IN (3, 4)",
    "INSERT INTO eq.latin VALUES (1, 'café ÿ', '€', 'naïve'), (2, '', '', NULL)",
    "INSERT INTO eq.sb SELECT seq, seq % 97, REPEAT('c', 120), REPEAT('p', 60)"
    " FROM eq.seq_1_to_300",
    "UPDATE eq.sb SET k = k + 1 WHERE id <= 100",
    "DELETE FROM eq.sb WHERE id > 250",
    "INSERT INTO eq.bulk SELECT seq, seq % 1000, CONCAT('row ', seq), '2024-01-02 03:04:05.123456',"
    " seq / 100 FROM eq.seq_1_to_2000",
    "ALTER TABLE eq.sb ADD COLUMN extra DECIMAL(5,1) NULL",
    "INSERT INTO eq.sb VALUES (1000, 1, 'c', 'p', -1234.5), (1001, 2, 'c', 'p', NULL)",
    "SET SESSION binlog_row_image = 'MINIMAL'",
    "UPDATE eq.minimal SET v = 'after' WHERE id = 1",
    "DELETE FROM eq.minimal WHERE id = 2",
    "SET SESSION binlog_row_image = 'FULL'",
]
SCHEMA = [
    "DROP DATABASE IF EXISTS eq",
    "CREATE DATABASE eq",
    f"CREATE TABLE eq.all_types ({COLUMNS}) CHARACTER SET utf8mb4",
    "CREATE TABLE eq.latin (id INT PRIMARY KEY, a VARCHAR(20), b CHAR(5), t TEXT)"
    " CHARACTER SET latin1",
    "CREATE TABLE eq.sb (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL,"
    " pad CHAR(60) NOT NULL)",
    "CREATE TABLE eq.bulk (id BIGINT PRIMARY KEY, a INT, b VARCHAR(100), c DATETIME(6),"
    " d DECIMAL(12,2))",
    "CREATE TABLE eq.minimal (id INT PRIMARY KEY, v VARCHAR(10), n INT)",
    "INSERT INTO eq.minimal VALUES (1, 'before', 1), (2, 'gone', NULL)",
]


@pytest.fixture
def production_decoding() -> Iterator[None]:
    """Both overrides and the TABLE_MAP cache, as source.py installs them; restored after."""
    tablemap_cache.install()
    decoding.install()
    yield
    decoding.install()


def _write(server: ServerInfo) -> tuple[tuple[str, int], tuple[str, int]]:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # zero dates and invalid ENUMs, kept as-is
            cur.execute("SET time_zone = '+00:00'")
            for sql in SCHEMA:
                cur.execute(sql)
            start = master_position(server)
            for sql in WORKLOAD:
                cur.execute(sql)
            return start, master_position(server)
    finally:
        conn.close()


def _decode(server: ServerInfo, start: tuple[str, int], end: tuple[str, int], server_id: int):
    """[(event class, table, row dict)] of every row event from start to end."""
    reader = BinLogStreamReader(
        connection_settings={
            "host": server.host, "port": server.port, "user": server.user,
            "password": server.password,
        },
        server_id=server_id, log_file=start[0], log_pos=start[1], resume_stream=True,
        blocking=False, is_mariadb=False,
        only_events=[TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )  # fmt: skip
    rows: list[tuple[str, str, dict[str, Any]]] = []
    try:
        for event in reader:
            if isinstance(event, RowsEvent):
                rows.extend((type(event).__name__, event.table, row) for row in event.rows)
            if (reader.log_file, reader.log_pos) >= end:
                break
    finally:
        reader.close()
    return rows


def test_fast_path_decodes_every_row_identically(
    dc1: ServerInfo, production_decoding: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    start, end = _write(dc1)

    fast_rows.uninstall()
    reference = _decode(dc1, start, end, server_id=99101)

    fast_rows.install()
    fell_back: list[str] = []
    original = fast_rows._ORIGINAL

    def counting(event: Any, *args: Any) -> Any:
        fell_back.append(event.table)
        return original(event, *args)

    monkeypatch.setattr(fast_rows, "_ORIGINAL", counting)
    fast = _decode(dc1, start, end, server_id=99102)

    assert len(fast) == len(reference) > 2000
    for i, (ours, theirs) in enumerate(zip(fast, reference, strict=True)):
        assert identical(ours, theirs), f"row {i}: fast {ours!r} != reference {theirs!r}"
    assert set(fell_back) == {"minimal"}, "only the MINIMAL images need the per-value path"
    by_table = {(kind, table) for kind, table, _ in fast}
    assert {("UpdateRowsEvent", "all_types"), ("DeleteRowsEvent", "sb")} <= by_table
    first = next(row["values"] for kind, table, row in fast if table == "all_types")
    assert first["dtm"] == ZeroDate("0000-00-00 00:00:00.000000") and first["y"] == 0


def _source_events(
    server: ServerInfo, start: tuple[str, int], end: tuple[str, int], fast: bool
) -> list[Any]:
    """Every source event BinlogStream gives from start up to the transaction ending at end."""
    settings = SourceSettings(server.host, server.port, server.user, server.password)
    stream = BinlogStream(settings, start[0], start[1], blocking=False, fast=fast,
                          server_id=99103 + fast)  # fmt: skip
    last = (split_binlog_name(end[0])[1], end[1])
    events: list[Any] = []
    try:
        for event in stream.events(threading.Event()):
            if isinstance(event, Heartbeat):
                continue
            events.append(event)
            if isinstance(event, Commit | Statement) and (event.log_index, event.log_pos) >= last:
                break
    finally:
        stream.close()
    return events


def _comparable(event: Any) -> Any:
    if isinstance(event, Rows):
        return ("rows", event.table, event.op, [list(i) for i in event.images], event.size_bytes)
    return event


def test_own_event_decoding_gives_the_library_path_events(
    dc1: ServerInfo, production_decoding: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """drc.replicator.fast_events (GTID, XID, TABLE_MAP, rows from the bytes) yields exactly
    the events the library path yields, on the same binlog range; rows it cannot decode
    (MINIMAL images) and every other event type go to the library."""
    fast_rows.install()
    start, end = _write(dc1)
    reference = _source_events(dc1, start, end, fast=False)
    decoded: list[str] = []
    original = FastDecoder.decode

    def counting(self: FastDecoder, *args: Any) -> Any:
        result = original(self, *args)
        if result is not NOT_MINE:
            decoded.append(type(result).__name__)
        return result

    monkeypatch.setattr(FastDecoder, "decode", counting)
    fast = _source_events(dc1, start, end, fast=True)

    assert len(fast) == len(reference) > 20
    for i, (ours, theirs) in enumerate(zip(fast, reference, strict=True)):
        same = identical(_comparable(ours), _comparable(theirs))
        assert same, f"event {i} ({type(ours).__name__}) differs from the library's"
    assert {"Begin", "Commit", "Rows", "NoneType"} <= set(decoded)
    rows = [e for e in fast if isinstance(e, Rows)]
    assert sum(len(e.images) for e in rows) > 2000
