"""Every row image capture decodes from a real binlog is the row the server's SELECT showed.

One binlog range on the sandbox's dc1: every MariaDB type with edge values and NULLs,
multi-row inserts, updates and deletes, latin1, a sysbench-like and a bulk table, an ALTER
mid-range, and rows logged with binlog_row_image=MINIMAL. Each statement runs on its own
(autocommit), with the table SELECTed just before and just after it, and its GTID taken from
@@last_gtid. The BinlogStream (drc.replicator.binlog decodes every row) must give each statement
exactly one transaction with that GTID whose images are those rows: an insert's after image a row
that appeared, a delete's before image a row that went, an update's images the row before and
after. A MINIMAL image carries some columns only: those must match. The server's values are
compared with the rules of test_capture_types (a ZeroDate is the text SELECT shows, a Bit its
bytes, a SET its text, doubles bit for bit); a FLOAT must be the shortest decimal naming the
single the server holds (drc.core.values.shortest_single of ``col + 0e0``), as SELECT shows
only 6 digits of it.
"""

from __future__ import annotations

import re
import struct
import threading
from dataclasses import dataclass
from typing import Any

from pymysql.constants import FIELD_TYPE

from drc.core.events import Op
from drc.core.values import shortest_single
from drc.replicator.source import BinlogStream, SourceSettings, split_binlog_name
from drc.replicator.source_events import Begin, Commit, Heartbeat, Rows, Statement
from drc.sandbox.sandbox import ServerInfo
from tests.support.column_types import COLUMNS, ROWS, matches_select
from tests.support.servers import connect, master_position

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
    "UPDATE eq.sb SET extra = 0.5, c = 'changed' WHERE id >= 1000",
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
Table = dict[Any, dict[str, Any]]


@dataclass
class Step:
    """One DML statement: its table as SELECT showed it before and after, its GTID, and the
    binlog position after its commit."""

    sql: str
    before: Table
    after: Table
    gtid: str
    end: tuple[int, int]


@dataclass(frozen=True)
class Single:
    """A FLOAT as the double the server holds for it (SELECT shows only 6 digits of it)."""

    exact: float


def _select(cur: Any, table: str) -> Table:
    cur.execute(f"SELECT * FROM eq.{table} ORDER BY id")
    names = [d[0] for d in cur.description]
    floats = [d[0] for d in cur.description if d[1] == FIELD_TYPE.FLOAT]
    rows = {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}
    for name in floats:
        cur.execute(f"SELECT id, {name} + 0e0 FROM eq.{table}")
        for row_id, exact in cur.fetchall():
            rows[row_id][name] = None if exact is None else Single(exact)
    return rows


def _same(ours: Any, selected: Any) -> bool:
    if isinstance(selected, Single):  # the shortest decimal naming the same single
        expected = shortest_single(selected.exact)
        return type(ours) is float and struct.pack("<d", ours) == struct.pack("<d", expected)
    return matches_select(ours, selected)


def _write(server: ServerInfo) -> tuple[tuple[str, int], list[Step]]:
    conn = connect(server)
    steps: list[Step] = []
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")  # zero dates and invalid ENUMs, kept as-is
            cur.execute("SET time_zone = '+00:00'")
            for sql in SCHEMA:
                cur.execute(sql)
            start = master_position(server)
            for sql in WORKLOAD:
                table = re.search(r"\beq\.(\w+)", sql)
                dml = table is not None and not sql.startswith("ALTER")
                before = _select(cur, table.group(1)) if dml and table else {}
                cur.execute(sql)
                if dml and table:
                    cur.execute("SELECT @@last_gtid")
                    (gtid,) = cur.fetchone()
                    file, pos = master_position(server)
                    end = (split_binlog_name(file)[1], pos)
                    steps.append(Step(sql, before, _select(cur, table.group(1)), gtid, end))
            return start, steps
    finally:
        conn.close()


def _transactions(
    server: ServerInfo, start: tuple[str, int], end: tuple[int, int]
) -> dict[tuple[int, int], tuple[str | None, list[Rows]]]:
    """(GTID, rows events) of every transaction from start to end, by its end position."""
    settings = SourceSettings(server.host, server.port, server.user, server.password)
    stream = BinlogStream(settings, start[0], start[1], blocking=False, server_id=99103)
    found: dict[tuple[int, int], tuple[str | None, list[Rows]]] = {}
    gtid: str | None = None
    rows: list[Rows] = []
    try:
        for event in stream.events(threading.Event()):
            if isinstance(event, Begin):
                gtid, rows = event.gtid, []
            elif isinstance(event, Rows):
                rows.append(event)
            elif isinstance(event, Commit | Statement):
                found[(event.log_index, event.log_pos)] = (gtid, rows)
                if (event.log_index, event.log_pos) >= end:
                    break
            else:
                assert isinstance(event, Heartbeat), event
    finally:
        stream.close()
    return found


def _differences(
    ours: dict[str, Any], selected: dict[str, Any], present_only: bool = False
) -> list[str]:
    """Where a row image is not the SELECTed row (``present_only``: of the columns it has)."""
    if list(ours) != list(selected):
        return [f"columns {list(ours)} != {list(selected)}"]
    return [
        f"{name}: {value!r} != SELECT {selected[name]!r}"
        for name, value in ours.items()
        if not (present_only and value is None) and not _same(value, selected[name])
    ]


def _check(step: Step, events: list[Rows]) -> int:
    """The images of one statement against the rows SELECT showed; how many there were."""
    images = [image for event in events for image in event.images]
    ops = {event.op for event in events}
    minimal = step.sql.startswith(("UPDATE eq.minimal", "DELETE FROM eq.minimal"))
    assert len(ops) == 1, step.sql
    op = ops.pop()
    if op is Op.INSERT:
        new = {k: v for k, v in step.after.items() if k not in step.before}
        assert sorted(after["id"] for _, after in images) == sorted(new), step.sql
        for _, after in images:
            assert not _differences(after, new[after["id"]]), _differences(after, new[after["id"]])
    elif op is Op.DELETE:
        gone = {k: v for k, v in step.before.items() if k not in step.after}
        assert sorted(before["id"] for before, _ in images) == sorted(gone), step.sql
        for before, _ in images:
            assert not _differences(before, gone[before["id"]], minimal), step.sql
    else:
        changed = {k for k, v in step.after.items() if step.before.get(k) != v}
        assert sorted(before["id"] for before, _ in images) == sorted(changed), step.sql
        for before, after in images:
            row_id = before["id"]
            assert not _differences(before, step.before[row_id], minimal), step.sql
            assert not _differences(after, step.after[row_id], minimal), step.sql
    return len(images)


def test_every_decoded_row_image_is_the_row_select_showed(dc1: ServerInfo) -> None:
    start, steps = _write(dc1)
    transactions = _transactions(dc1, start, steps[-1].end)

    decoded = 0
    for step in steps:
        assert step.end in transactions, f"no transaction ends where {step.sql!r} did"
        gtid, events = transactions[step.end]
        assert gtid == step.gtid, step.sql
        decoded += _check(step, events)
    assert decoded > 2000
    minimal = [s for s in steps if "eq.minimal" in s.sql]
    assert [len(transactions[s.end][1]) for s in minimal] == [1, 1]
    [(before, after)] = transactions[minimal[0].end][1][0].images
    assert before == {"id": 1, "v": None, "n": None} and after == {
        "id": None,
        "v": "after",
        "n": None,
    }
