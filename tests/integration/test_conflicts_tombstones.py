"""The triggers and tombstone tables DRC keeps for a lww table, on a real server.

Application sessions (no ``@drc_apply``) on the target: a delete leaves a tombstone newer than
the row it removed, a key inserted again comes after its tombstone, an update never moves the
row's time back; old tombstones are purged; local DDL that renames the key is followed.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from drc.apply.service import build_channel
from drc.conflicts import tombstones
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import wait_for

SCHEMA = "cf_tomb"
T = dt.datetime(2020, 1, 1, 12, 0, 0)  # long ago: tombstones of it are past any retention


def _epoch(when: dt.datetime) -> float:
    return when.replace(tzinfo=dt.UTC).timestamp()


def _app(server: ServerInfo, at: dt.datetime, *statements: str) -> None:
    """Statements of an application session whose clock says ``at`` (UTC session)."""
    execute(server, "SET time_zone = '+00:00'", f"SET TIMESTAMP = {_epoch(at)}", *statements)


def _tombstones(server: ServerInfo) -> list[tuple[object, ...]]:
    companion = tombstones.name(SCHEMA, "t")
    return query(server, f"SELECT id, `drc$deleted_at`, `drc$origin` FROM drc.`{companion}`")


def _channel(url: str, server: ServerInfo, retention_h: float) -> Running:
    config = channel_config("cf-tomb", url, [f"{SCHEMA}.*"])
    lww = ConflictsConfig(
        priority=("dc1", "dc2"),
        tombstone_retention_hours=retention_h,
        log_retention_days=30,
        tables=(ConflictTableConfig(table=f"{SCHEMA}.t", policy="lww", column="ts"),),
    )
    return Running(build_channel(config, apply_user(server), conflicts=lww, datacenter="dc2"))


def test_triggers_keep_row_time_moving_forward_and_old_tombstones_are_purged(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    drop_everywhere(SCHEMA, dc1, dc2)
    for server in (dc1, dc2):
        execute(
            server,
            f"CREATE DATABASE {SCHEMA}",
            f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(10), ts DATETIME(3) "
            "NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3))",
        )
    start = position(dc1)
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        with _channel(url, dc2, retention_h=24) as running:
            wait_for(lambda: _has_triggers(dc2), "the triggers", running=running)
        table = f"{SCHEMA}.t"
        _app(dc2, T, f"INSERT INTO {table} (id, v) VALUES (1, 'a')")
        # a clock 5 s behind: the update still moves the time forward (one millisecond)
        _app(dc2, T - dt.timedelta(seconds=5), f"UPDATE {table} SET v = 'b' WHERE id = 1")
        assert query(dc2, f"SELECT v, ts FROM {table}") == [("b", T + dt.timedelta(milliseconds=1))]
        # ... and so is the delete's tombstone, though its clock is even further behind
        _app(dc2, T - dt.timedelta(seconds=9), f"DELETE FROM {table} WHERE id = 1")
        deleted_at = T + dt.timedelta(milliseconds=2)
        assert _tombstones(dc2) == [(1, deleted_at, "dc2")]
        # the key inserted again with a clock behind comes after its tombstone
        _app(dc2, T - dt.timedelta(seconds=1), f"INSERT INTO {table} (id, v) VALUES (1, 'c')")
        assert query(dc2, f"SELECT v, ts FROM {table}") == [("c", T + dt.timedelta(milliseconds=3))]
        # an ordinary clock moves on as usual
        _app(dc2, T + dt.timedelta(seconds=1), f"UPDATE {table} SET v = 'd' WHERE id = 1")
        assert query(dc2, f"SELECT ts FROM {table}") == [(T + dt.timedelta(seconds=1),)]

        _log_entries(dc2, ages_days=(400, 0))
        time.sleep(1.5)  # the tombstone is now older than the retention below
        with _channel(url, dc2, retention_h=1 / 3600) as running:
            wait_for(lambda: not _tombstones(dc2), "the old tombstone purged", running=running)
            wait_for(lambda: _log_ages(dc2) == [0], "the old log entry purged", running=running)

        # the key column renamed by local DDL: the triggers and tombstone table follow it
        execute(dc2, f"ALTER TABLE {table} CHANGE id rid INT NOT NULL")
        with _channel(url, dc2, retention_h=24) as running:
            wait_for(lambda: _has_triggers(dc2, "rid"), "the triggers remade", running=running)
            now = dt.datetime.now(dt.UTC).replace(tzinfo=None)  # within the retention
            _app(dc2, now, f"DELETE FROM {table} WHERE rid = 1")
            _app(dc2, now, f"INSERT INTO {table} (rid, v) VALUES (2, 'e')")
            assert running.error is None
        companion = tombstones.name(SCHEMA, "t")
        rows = query(dc2, f"SELECT rid, `drc$deleted_at` FROM drc.`{companion}`")
        assert [r[0] for r in rows] == [1]


def _has_triggers(server: ServerInfo, key: str = "id") -> bool:
    """All three triggers there, written for the key column ``key``."""
    found = query(server, "SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE "
                  "EVENT_OBJECT_SCHEMA = %s", (SCHEMA,))  # fmt: skip
    return len(found) == 3 and sum(f"`{key}`" in row[0] for row in found) == 2


def _log_entries(server: ServerInfo, ages_days: tuple[int, ...]) -> None:
    """Conflict log entries detected ``ages_days`` ago."""
    from drc.conflicts import log as conflict_log
    from drc.conflicts.log import ConflictEntry

    execute(server, *conflict_log.create_statements(), "DELETE FROM drc.conflicts")
    for age in ages_days:
        entry = ConflictEntry(
            "cf-tomb", "1:1:1:4", "dc1", "dc2", SCHEMA, "t", {"id": age}, "update-update",
            "lww", "local", "test", {"id": age}, {"id": age}, {"id": age}, {"id": age},
        )  # fmt: skip
        statement = conflict_log.insert([entry])
        conn = connect(server)
        with conn.cursor() as cur:
            cur.execute(statement.sql, statement.params)
            cur.execute(
                "UPDATE drc.conflicts SET detected_at = detected_at - INTERVAL %s DAY "
                "WHERE id = LAST_INSERT_ID()",
                (age,),
            )
        conn.close()


def _log_ages(server: ServerInfo) -> list[int]:
    rows = query(server, "SELECT DATEDIFF(UTC_TIMESTAMP(), detected_at) FROM drc.conflicts")
    return sorted(int(r[0]) for r in rows)
