"""Columns added, dropped and reordered mid-stream: each event keeps its own column names."""

from __future__ import annotations

from pathlib import Path

from drc.core.tablefilter import TableFilter
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import capturing, read_all
from tests.support.servers import connect, master_position

STEPS = [
    "INSERT INTO ddl_db.t VALUES (1, 10, 'one')",
    "ALTER TABLE ddl_db.t ADD COLUMN c INT NOT NULL DEFAULT 7 AFTER a",
    "INSERT INTO ddl_db.t VALUES (2, 20, 8, 'two')",
    "ALTER TABLE ddl_db.t DROP COLUMN a",
    "INSERT INTO ddl_db.t VALUES (3, 9, 'three')",
    "ALTER TABLE ddl_db.t MODIFY COLUMN b VARCHAR(20) FIRST",
    "INSERT INTO ddl_db.t VALUES ('four', 4, 10)",
    "UPDATE ddl_db.t SET c = c + 1 WHERE id = 1",
]


def test_each_event_keeps_its_own_columns_across_alters(dc1: ServerInfo, tmp_path: Path) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS ddl_db")
        cur.execute("CREATE DATABASE ddl_db")
        start = master_position(dc1)
        cur.execute("CREATE TABLE ddl_db.t (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
        for sql in STEPS:
            cur.execute(sql)
        cur.execute("CREATE TABLE ddl_db.ignored (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO ddl_db.ignored VALUES (1)")
        end = master_position(dc1)
    conn.close()

    options = CaptureOptions(
        capture=TableFilter.build(["ddl_db.*"], ["ddl_db.ignored"]),
        start_from=f"{start[0]}:{start[1]}",
    )
    with capturing(dc1, tmp_path / "buf", options) as capture:
        capture.wait_for(end)
        stored = read_all(capture.buffer)
        history = capture.metastore.history("ddl_db", "t")
        schemas = {t.scn: capture.metastore.schema_at("ddl_db", "t", t.scn) for t in stored}

    rows = [(c.op.value, list((c.after or c.before).items())) for t in stored for c in t.changes]
    assert rows == [
        ("insert", [("id", 1), ("a", 10), ("b", "one")]),
        ("insert", [("id", 2), ("a", 20), ("c", 8), ("b", "two")]),
        ("insert", [("id", 3), ("c", 9), ("b", "three")]),
        ("insert", [("b", "four"), ("id", 4), ("c", 10)]),
        ("update", [("b", "one"), ("id", 1), ("c", 8)]),
    ]
    statements = [d.statement for t in stored for d in t.ddl]
    assert statements[0].startswith("CREATE TABLE ddl_db.t")
    assert statements[1:] == [s for s in STEPS if s.startswith("ALTER")]
    assert not any("ignored" in s for s in statements), "excluded table's DDL is not captured"
    scns = [t.scn for t in stored]
    assert scns == sorted(scns) and len(set(scns)) == len(scns)

    # The metastore answers "schema of ddl_db.t at SCN s" for every event.
    for txn in stored:
        for change in txn.changes:
            schema = schemas[txn.scn]
            assert schema is not None
            assert list(schema.column_names) == list((change.after or change.before).keys())
            assert schema.primary_key == ("id",)
    assert [e.kind for e in history].count("ddl") == 4
