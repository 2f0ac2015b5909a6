"""Two-phase XA transactions (XA PREPARE, later XA COMMIT) on a real MariaDB source.

MariaDB writes a prepared transaction's rows at its PREPARE, in a group that ends with an
XA_PREPARE event, and its XA COMMIT later as a group of its own. Capture does not support them
yet: it stops at one that touches a captured table, naming where and which, instead of
dropping its rows (docs/operations.md, Two-phase XA transactions). ONE PHASE commits are
ordinary transactions, and XA transactions of tables the filter leaves out do not stop it.
"""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest

from drc.core.errors import UnsupportedTransactionError
from drc.core.events import Transaction
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import capturing, read_all
from tests.support.servers import connect, fresh_database, master_position

_DB = "xa_db"


def _two_phase(conn: pymysql.connections.Connection, xid: str, sql: str, end: str) -> None:
    with conn.cursor() as cur:
        cur.execute("XA START %s", (xid,))
        cur.execute(sql)
        cur.execute("XA END %s", (xid,))
        cur.execute("XA PREPARE %s", (xid,))
        cur.execute(f"XA {end} %s", (xid,))


def _rows(stored: list[Transaction]) -> list[dict[str, object]]:
    return [dict(change.after or {}) for t in stored for change in t.changes]


def test_two_phase_xa_stops_capture_naming_its_position_and_xid(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    fresh_database(dc1, _DB, "CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    conn = connect(dc1, autocommit=True)
    start = master_position(dc1)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {_DB}.t VALUES (1, 1)")
    _two_phase(conn, "a1", f"INSERT INTO {_DB}.t VALUES (2, 2)", "COMMIT")
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {_DB}.t VALUES (3, 3)")
        cur.execute("SHOW BINLOG EVENTS IN %s FROM %s", start)
        prepare_end = next(row[4] for row in cur.fetchall() if row[2] == "XA_prepare")
    end = master_position(dc1)
    conn.close()
    options = CaptureOptions(
        capture=TableFilter.build([f"{_DB}.*"]), start_from=f"{start[0]}:{start[1]}"
    )
    for _ in range(2):  # restarted, it stops at the same transaction again, never past it
        with pytest.raises(UnsupportedTransactionError) as info:
            with capturing(dc1, tmp_path / "buf", options) as capture:
                capture.wait_for(end)
        message = str(info.value)
        assert f"{start[0]}:{prepare_end}" in message
        assert "X'6131',X'',1" in message and f"{_DB}.t" in message
        assert "two-phase XA" in message and "docs/operations.md" in message
        assert _stored_rows(tmp_path / "buf") == [{"id": 1, "v": 1}]  # nothing past it


def test_one_phase_xa_and_xa_of_tables_left_out_are_captured(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    fresh_database(
        dc1,
        _DB,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE other (id INT PRIMARY KEY)",
    )
    conn = connect(dc1, autocommit=True)
    start = master_position(dc1)
    with conn.cursor() as cur:
        cur.execute("XA START 'one'")
        cur.execute(f"INSERT INTO {_DB}.t VALUES (1, 1)")
        cur.execute("XA END 'one'")
        cur.execute("XA COMMIT 'one' ONE PHASE")
    _two_phase(conn, "b1", f"INSERT INTO {_DB}.other VALUES (1)", "COMMIT")
    _two_phase(conn, "b2", f"INSERT INTO {_DB}.other VALUES (2)", "ROLLBACK")
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {_DB}.t VALUES (2, 2)")
    end = master_position(dc1)
    conn.close()
    options = CaptureOptions(
        capture=TableFilter.build([f"{_DB}.t"]), start_from=f"{start[0]}:{start[1]}"
    )
    with capturing(dc1, tmp_path / "buf", options) as capture:
        capture.wait_for(end)
        stored = read_all(capture.buffer)
    assert _rows(stored) == [{"id": 1, "v": 1}, {"id": 2, "v": 2}]
    assert all(t.ddl == () for t in stored)  # no XA statement taken for DDL


def _stored_rows(buffer_dir: Path) -> list[dict[str, object]]:
    buffer = EventBuffer.open(buffer_dir)
    try:
        return _rows(read_all(buffer))
    finally:
        buffer.close()
