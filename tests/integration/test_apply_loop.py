"""What the channel writes, DDL included, is flagged DRC-originated by the target's own
replicator, so it is never sent back to where it came from."""

from __future__ import annotations

from pathlib import Path

from drc.apply.service import build_channel
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.capture import captured
from tests.support.servers import drop_everywhere, execute, position
from tests.support.waits import mark_end, wait_end

SCHEMA = "apply_loop"


def test_everything_applied_is_flagged_by_the_target_replicator(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    drop_everywhere(SCHEMA, dc1, dc2)
    start, target_start = position(dc1), position(dc2)
    execute(
        dc1,
        f"CREATE DATABASE {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v INT)",
        f"INSERT INTO {SCHEMA}.t VALUES (1, 1), (2, 2)",
        f"ALTER TABLE {SCHEMA}.t ADD COLUMN w INT DEFAULT 0",
        f"UPDATE {SCHEMA}.t SET w = 5",
        f"CREATE TABLE {SCHEMA}.u (id INT PRIMARY KEY)",
        f"INSERT INTO {SCHEMA}.u SELECT seq FROM {SCHEMA}.seq_1_to_50",
        f"DROP TABLE {SCHEMA}.u",
        f"DELETE FROM {SCHEMA}.t WHERE id = 2",
    )
    with serving(dc1, tmp_path / "buf1", [f"{SCHEMA}.*"], start) as (_, url):
        channel = build_channel(channel_config("loop", url, [f"{SCHEMA}.*"]), apply_user(dc2))
        with Running(channel) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
    execute(dc2, f"INSERT INTO {SCHEMA}.t VALUES (100, 0, 0)")  # a local write, for contrast
    end = position(dc2)

    captured_dc2 = captured(dc2, tmp_path / "buf2", [f"{SCHEMA}.*"], target_start, end)
    stored = [t for t in captured_dc2 if t.changes or t.ddl]

    applied, local = stored[:-1], stored[-1]
    ddl = [d.statement.split()[0] for t in applied for d in t.ddl]
    assert ddl.count("CREATE") >= 4 and "ALTER" in ddl and "DROP" in ddl  # database, tables, done
    assert all(t.drc_originated for t in applied), [
        (t.scn, t.ddl, len(t.changes)) for t in applied if not t.drc_originated
    ]
    assert sum(len(t.changes) for t in applied) == 2 + 2 + 50 + 1 + 1  # ... + done token
    assert not local.drc_originated and local.changes[0].after == {"id": 100, "v": 0, "w": 0}
