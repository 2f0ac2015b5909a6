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
from tests.support.column_types import matches_select
from tests.support.decoding_workload import SCHEMA, WORKLOAD
from tests.support.servers import connect, master_position

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
