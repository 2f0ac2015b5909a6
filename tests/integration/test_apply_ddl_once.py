"""A replicated DDL is applied exactly once, whatever crash or rewind comes between.

The DDL journal (drc.apply.ddl_journal) is put by hand into each state a crash can leave, on
real servers: the statement ran but was not marked done, it never ran, or the channel was
rewound past DDL the target already has. Each time the channel goes on and both sides end equal;
without the journal the first and last case stopped the channel (1054 unknown column, 1007
database exists). Then kill -9 of the applying process while the target rebuilds a big table.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drc.apply.service import build_channel
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import (
    APPLY_USER,
    ApplyProcess,
    Running,
    apply_process_config,
    apply_user,
    assert_same,
    channel_config,
    journal_done,
    just_before,
    serving,
    set_checkpoint,
)
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end

SCHEMA = "ddl_once"
RENAME = f"ALTER TABLE {SCHEMA}.t RENAME COLUMN b TO b2"


def _apply(source: ServerInfo, target: ServerInfo, url: str, channel: str) -> Running:
    config = channel_config(channel, url, [f"{SCHEMA}.*"])
    with Running(build_channel(config, apply_user(target))) as running:
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
        renamed, seq = journal_done(dc2, channel, "%RENAME COLUMN%")
        created, _ = journal_done(dc2, channel, f"CREATE TABLE {SCHEMA}.u %")
        before_rename = just_before(renamed)  # where a crash during the rename leaves it

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
        _set(dc2, channel, created, 0, "done", checkpoint=just_before(created), pending=None)
        again = _apply(dc1, dc2, url, channel)
        assert again.stats.ddl == 0
        assert_same(dc1, dc2, SCHEMA)


def _set(target: ServerInfo, channel: str, scn: str, seq: int, state: str, *, checkpoint: str,
         pending: str | None) -> None:  # fmt: skip
    conn = connect(target)
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE drc.ddl_journal SET state = %s WHERE channel = %s AND scn = %s AND seq = %s",
            (state, channel, scn, seq),
        )
        set_checkpoint(cur, channel, checkpoint, pending)
    conn.close()


KILL_SCHEMA = "ddl_kill"
KILL_DDL = [
    "ALTER TABLE {s}.big RENAME COLUMN b TO b2, ALGORITHM=COPY",
    "ALTER TABLE {s}.big ADD COLUMN c INT NOT NULL DEFAULT 7, ALGORITHM=COPY",
    "ALTER TABLE {s}.big ADD INDEX (c), ALGORITHM=COPY",  # unnamed: a second run adds c_2
    "ALTER TABLE {s}.big DROP INDEX c, ALGORITHM=COPY",
    "ALTER TABLE {s}.big MODIFY b2 BIGINT, ALGORITHM=COPY",
    "ALTER TABLE {s}.big CHANGE c c3 INT NOT NULL DEFAULT 7, ALGORITHM=COPY",
    "ALTER TABLE {s}.big DROP COLUMN c3, ALGORITHM=COPY",
    "RENAME TABLE {s}.big TO {s}.big2",
]


def _kill_config(tmp: Path, target: ServerInfo, url: str) -> Path:
    return apply_process_config(tmp, target, url, "ddl-kill", [f"{KILL_SCHEMA}.*"])


def _ddl_running(target: ServerInfo) -> bool:
    rows = query(
        target,
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = %s "
        "AND (INFO LIKE 'ALTER TABLE%%' OR INFO LIKE 'RENAME%%')",
        (APPLY_USER,),
    )
    return bool(rows[0][0])


@pytest.mark.slow
def test_kill_9_during_each_kind_of_ddl_applies_it_once(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    drop_everywhere(KILL_SCHEMA, dc1, dc2)
    apply_user(dc2)
    start = position(dc1)
    execute(
        dc1,
        f"CREATE DATABASE {KILL_SCHEMA}",
        f"CREATE TABLE {KILL_SCHEMA}.big (id INT AUTO_INCREMENT PRIMARY KEY, b INT, "
        "pad CHAR(200) NOT NULL DEFAULT 'x')",
        f"INSERT INTO {KILL_SCHEMA}.big (b) SELECT seq FROM {KILL_SCHEMA}.seq_1_to_60000",
    )
    killed = 0
    with serving(dc1, tmp_path / "buf", [f"{KILL_SCHEMA}.*"], start) as (_, url):
        config = _kill_config(tmp_path, dc2, url)
        with ApplyProcess(config, tmp_path / "apply.log", "--stats-every", "1") as apply:
            wait_end(dc2, KILL_SCHEMA, mark_end(dc1, KILL_SCHEMA), timeout=180)
            for ddl in KILL_DDL:
                execute(dc1, ddl.format(s=KILL_SCHEMA))
                deadline = time.monotonic() + 30
                while not _ddl_running(dc2) and time.monotonic() < deadline:
                    time.sleep(0.01)
                if _ddl_running(dc2):  # mid-DDL (a quick one may already be over: after it)
                    killed += 1
                apply.kill()
                apply.start()
            wait_end(dc2, KILL_SCHEMA, mark_end(dc1, KILL_SCHEMA), timeout=180)
            assert apply.alive(), apply.tail()
    assert killed >= len(KILL_DDL) // 2, f"only {killed} kills landed during a DDL"
    assert_same(dc1, dc2, KILL_SCHEMA)
    create = [query(s, f"SHOW CREATE TABLE {KILL_SCHEMA}.big2")[0][1] for s in (dc1, dc2)]
    assert create[0].split("AUTO_INCREMENT=")[0] == create[1].split("AUTO_INCREMENT=")[0]
