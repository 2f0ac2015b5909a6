"""The replicator flags exactly what DRC's apply wrote: checkpoint writes and skip_replication."""

from __future__ import annotations

from pathlib import Path

from drc.apply import checkpoint
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import captured
from tests.support.servers import connect, master_position


def test_apply_writes_are_flagged_and_ordinary_writes_are_not(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS marker_db")
        for statement in checkpoint.create_statements():  # the table exactly as apply makes it
            cur.execute(statement)
        start = master_position(dc1)
        cur.execute("CREATE TABLE marker_db.local_ddl (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO marker_db.local_ddl VALUES (1)")
        cur.execute("SET SESSION skip_replication = 1")
        cur.execute("CREATE TABLE marker_db.applied_ddl (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO marker_db.applied_ddl VALUES (2)")
        cur.execute("SET SESSION skip_replication = 0")
        cur.execute("BEGIN")
        cur.execute("INSERT INTO marker_db.local_ddl VALUES (3)")
        cur.execute("REPLACE INTO drc.checkpoint (channel, origin) VALUES ('marker-test', 'dc2')")
        cur.execute("COMMIT")
        end = master_position(dc1)
    conn.close()

    stored = [
        t
        for t in captured(dc1, tmp_path / "buf", ["marker_db.*"], start, end)
        if t.changes or t.ddl
    ]

    seen = [
        (t.ddl[0].statement.split()[2] if t.ddl else t.changes[0].after["id"], t.drc_originated)
        for t in stored
    ]
    assert seen == [
        ("marker_db.local_ddl", False),
        (1, False),
        ("marker_db.applied_ddl", True),
        (2, True),
        (3, True),  # flagged by its checkpoint write, which the filter itself drops
    ]
    assert [c.table for c in stored[-1].changes] == ["local_ddl"]
