"""A replicated DDL is applied exactly once, whatever crash or rewind comes between.

The DDL journal (drc.apply.ddl_journal) is put by hand into each state a crash can leave, on
real servers: the statement ran but was not marked done, it never ran, or the channel was
rewound past DDL the target already has. Each time the channel goes on and both sides end equal;
without the journal the first and last case stopped the channel (1054 unknown column, 1007
database exists). Then kill -9 of the applying process while the target rebuilds a big table.
"""

from __future__ import annotations

from pathlib import Path

from drc.apply import ApplyChannel
from drc.sandbox.sandbox import ServerInfo
from tests.integration.servers import connect
from tests.integration.test_apply_support import (
    Running,
    apply_user,
    assert_same,
    channel_config,
    drop_everywhere,
    execute,
    mark_end,
    position,
    query,
    serving,
    wait_end,
)

SCHEMA = "ddl_once"
RENAME = f"ALTER TABLE {SCHEMA}.t RENAME COLUMN b TO b2"


def _journal(target: ServerInfo, channel: str, like: str) -> tuple[str, int]:
    rows = query(target, "SELECT scn, seq FROM drc.ddl_journal WHERE channel = %s AND "
                 "statement LIKE %s AND state = 'done'", (channel, like))  # fmt: skip
    assert len(rows) == 1, rows
    return str(rows[0][0]), int(rows[0][1])


def _apply(source: ServerInfo, target: ServerInfo, url: str, channel: str) -> Running:
    config = channel_config(channel, url, [f"{SCHEMA}.*"])
    with Running(ApplyChannel(config, apply_user(target))) as running:
        wait_end(target, SCHEMA, mark_end(source, SCHEMA), running)
    return running


def test_the_journal_says_whether_a_ddl_ran(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    drop_everywhere(SCHEMA, dc1, dc2)
    start = position(dc1)
    execute(
        dc1,
        f"CREATE DATABASE {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, b INT)",
        f"INSERT INTO {SCHEMA}.t VALUES (1, 1), (2, 2)",
        RENAME,
        f"INSERT INTO {SCHEMA}.t VALUES (3, 3)",
        f"CREATE TABLE {SCHEMA}.u (id INT PRIMARY KEY)",
        f"INSERT INTO {SCHEMA}.u VALUES (1)",
        f"CREATE INDEX on_b2 ON {SCHEMA}.t (b2)",
    )
    channel = "ddl-once"
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        first = _apply(dc1, dc2, url, channel)
        assert first.stats.ddl == 5  # database, two tables, rename, index
        assert_same(dc1, dc2, SCHEMA)
        renamed, seq = _journal(dc2, channel, "%RENAME COLUMN%")
        created, _ = _journal(dc2, channel, f"CREATE TABLE {SCHEMA}.u %")
        before_rename = _just_before(renamed)  # where a crash during the rename leaves it

        # 1. The rename ran, then the process died before marking it done.
        _set(dc2, channel, renamed, seq, "running", checkpoint=before_rename, pending=renamed)
        again = _apply(dc1, dc2, url, channel)
        assert again.stats.ddl == 0, "the rename ran a second time"
        assert_same(dc1, dc2, SCHEMA)

        # 2. The process died before the rename reached the target.
        execute(dc2, f"ALTER TABLE {SCHEMA}.t RENAME COLUMN b2 TO b")
        _set(dc2, channel, renamed, seq, "running", checkpoint=before_rename, pending=renamed)
        again = _apply(dc1, dc2, url, channel)
        assert again.stats.ddl == 1
        assert_same(dc1, dc2, SCHEMA)

        # 3. Rewound past CREATE TABLE u and CREATE INDEX: both are there already, skipped.
        _set(dc2, channel, created, 0, "done", checkpoint=_just_before(created), pending=None)
        again = _apply(dc1, dc2, url, channel)
        assert again.stats.ddl == 0
        assert_same(dc1, dc2, SCHEMA)


def _just_before(scn: str) -> str:
    change_id, server_id, index, pos = scn.split(":")
    return f"{change_id}:{server_id}:{index}:{int(pos) - 1}"


def _set(target: ServerInfo, channel: str, scn: str, seq: int, state: str, *, checkpoint: str,
         pending: str | None) -> None:  # fmt: skip
    conn = connect(target)
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE drc.ddl_journal SET state = %s WHERE channel = %s AND scn = %s AND seq = %s",
            (state, channel, scn, seq),
        )
        cur.execute("UPDATE drc.checkpoint SET scn = %s, pending_ddl_scn = %s WHERE channel = %s",
                    (checkpoint, pending, channel))  # fmt: skip
    conn.close()
