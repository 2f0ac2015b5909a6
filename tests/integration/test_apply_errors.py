"""Bad input and a misbehaving target: clear errors that lose nothing, and waits that end."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from drc.apply.service import build_channel
from drc.apply.sink import TargetSession
from drc.core.errors import RetriableError
from drc.core.target_errors import (
    MissingColumnError,
    MissingTableError,
    NoPrimaryKeyError,
    TargetUnavailableError,
)
from drc.mysql.sql import Statement
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, assert_same, channel_config, serving
from tests.support.network import Proxy
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end, wait_for


def test_table_without_primary_key_is_refused_then_applied_whole_row_when_allowed(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "apply_nopk"
    drop_everywhere(schema, dc1, dc2)
    start = position(dc1)
    execute(
        dc1,
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.ok (id INT PRIMARY KEY)",
        f"CREATE TABLE {schema}.nopk (a INT, b VARCHAR(10), c DATETIME(6))",
        f"INSERT INTO {schema}.ok VALUES (1)",
        f"INSERT INTO {schema}.nopk VALUES (1, NULL, '2024-01-01 00:00:00.5'), (2, 'x', NULL)",
        f"UPDATE {schema}.nopk SET b = 'y' WHERE a = 1",
        f"INSERT INTO {schema}.nopk VALUES (3, NULL, NULL)",
        f"DELETE FROM {schema}.nopk WHERE a = 2",
        f"INSERT INTO {schema}.ok VALUES (2)",
    )
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config("nopk", url, [f"{schema}.*"])
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_for(lambda: running.error is not None, "the channel to refuse the table")
        assert isinstance(running.error, NoPrimaryKeyError)
        assert "apply_nopk.nopk has no primary key" in str(running.error)
        assert query(dc2, f"SELECT COUNT(*) FROM {schema}.nopk") == [(0,)]  # rolled back
        whole_row = config.model_copy(update={"no_primary_key": "match_whole_row"})
        with Running(build_channel(whole_row, apply_user(dc2))) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
    assert_same(dc1, dc2, schema)


def test_a_column_missing_on_the_target_stops_the_channel_naming_it(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "apply_missing"
    drop_everywhere(schema, dc1, dc2)
    execute(
        dc1,
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v INT, w INT)",
    )
    execute(
        dc2, f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v INT)"
    )
    start = position(dc1)
    execute(dc1, f"INSERT INTO {schema}.t VALUES (1, 2, 3)")
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config("missing", url, [f"{schema}.*"])
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_for(lambda: running.error is not None, "the channel to stop")
        assert isinstance(running.error, MissingColumnError)
        assert "apply_missing.t has no column 'w'" in str(running.error)
        assert query(dc2, f"SELECT COUNT(*) FROM {schema}.t") == [(0,)]
        execute(dc2, f"ALTER TABLE {schema}.t ADD COLUMN w INT")  # the operator's fix
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_for(lambda: query(dc2, f"SELECT * FROM {schema}.t") == [(1, 2, 3)], "the row")


@pytest.mark.slow
def test_a_read_only_target_is_waited_for_and_nothing_is_lost(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "apply_ro"
    drop_everywhere(schema, dc1, dc2)
    start = position(dc1)
    execute(
        dc1, f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, n INT)"
    )
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        channel = build_channel(channel_config("ro", url, [f"{schema}.*"]), apply_user(dc2))
        with Running(channel) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
            execute(dc2, "SET GLOBAL read_only = 1")
            try:
                execute(dc1, *(f"INSERT INTO {schema}.t VALUES ({i}, {i})" for i in range(50)))
                execute(dc1, f"UPDATE {schema}.t SET n = n + 1")
                wait_for(lambda: running.stats.waits >= 2, "the channel to wait", running=running)
                assert query(dc2, f"SELECT COUNT(*) FROM {schema}.t") == [(0,)]
            finally:
                execute(dc2, "SET GLOBAL read_only = 0")
            wait_end(dc2, schema, mark_end(dc1, schema), running)
    assert_same(dc1, dc2, schema)
    assert "read-only" in (channel.stats.last_error or "")


@pytest.mark.slow
def test_a_target_that_goes_down_is_waited_for_and_nothing_is_lost(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "apply_down"
    drop_everywhere(schema, dc1, dc2)
    start = position(dc1)
    execute(
        dc1, f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, n INT)"
    )
    proxy = Proxy(dc2.host, dc2.port)
    target = dataclasses.replace(apply_user(dc2), port=proxy.port, connect_timeout_s=2)
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        channel = build_channel(channel_config("down", url, [f"{schema}.*"]), target)
        with Running(channel) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
            proxy.cut()
            execute(dc1, *(f"INSERT INTO {schema}.t VALUES ({i}, {i})" for i in range(50)))
            wait_for(lambda: running.stats.waits >= 2, "the channel to wait", running=running)
            time.sleep(0.5)
            proxy.restore()
            wait_end(dc2, schema, mark_end(dc1, schema), running)
    assert_same(dc1, dc2, schema)
    assert channel.stats.idempotent_fixes == 0


def test_the_apply_user_of_these_tests_has_no_privilege_that_bypasses_read_only(
    dc2: ServerInfo,
) -> None:
    settings = apply_user(dc2)
    grants = " ".join(r[0] for r in query(dc2, f"SHOW GRANTS FOR '{settings.user}'@'%'"))
    assert "SUPER" not in grants and "READ_ONLY ADMIN" not in grants


def test_a_table_altered_on_the_target_while_read_is_never_taken_for_missing(
    dc2: ServerInfo,
) -> None:
    """information_schema leaves out a table another session is altering (a warning, no
    rows): the channel must not stop saying the table does not exist (seen under two-way
    load with an ALTER on the target, issue 26's CI)."""
    schema = "apply_altered"
    drop_everywhere(schema, dc2)
    execute(
        dc2,
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20))",
        f"CREATE TABLE {schema}.other (id INT PRIMARY KEY)",
        f"INSERT INTO {schema}.t VALUES " + ", ".join(f"({n}, 'row {n}')" for n in range(2000)),
    )
    stop = threading.Event()

    def alter_over_and_over() -> None:
        conn = connect(dc2, database=schema)
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute("ALTER TABLE t ADD COLUMN c INT, ALGORITHM=COPY")
                cur.execute("ALTER TABLE t DROP COLUMN c, ALGORITHM=COPY")
        conn.close()

    session = TargetSession(apply_user(dc2))
    altering = threading.Thread(target=alter_over_and_over)
    altering.start()
    described = 0
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            try:
                # Mid-transaction, as a channel is: holding a lock, a session's
                # information_schema read skips a table it would have to wait for.
                session.query(Statement(f"SELECT COUNT(*) FROM {schema}.other", ()), "a write")
                found = session.table(schema, "t", refresh=True)
            except RetriableError:
                pass  # what the channel's retry loop takes again
            else:
                assert found.columns[:2] == ("id", "v")
                assert found.primary_key == ("id",)
                described += 1
            session.recover(TargetUnavailableError("next round"))
    finally:
        stop.set()
        altering.join()
        session.close()
    assert described > 0
    with pytest.raises(MissingTableError, match=f"no table {schema}.gone"):
        session.table(schema, "gone")
