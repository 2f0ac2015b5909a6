"""Bad sources get clear errors; the replicator never skips ahead or loses its place."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from drc.core.errors import BinlogPurgedError, SourceConfigError
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.metastore.store import MetaStore
from drc.replicator.replicator import CaptureOptions, Replicator
from drc.replicator.source import SourceSettings, inspect_source
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import capturing, source_settings
from tests.support.servers import connect, master_position


@pytest.mark.parametrize(
    ("variable", "bad", "good"),
    [
        ("binlog_format", "STATEMENT", "ROW"),
        ("binlog_row_image", "MINIMAL", "FULL"),
        ("binlog_row_metadata", "MINIMAL", "FULL"),
    ],
)
def test_source_without_row_full_binlog_is_refused_naming_the_fix(
    dc2: ServerInfo, variable: str, bad: str, good: str
) -> None:
    conn = connect(dc2)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL {variable} = %s", (bad,))
        with pytest.raises(SourceConfigError) as info:
            inspect_source(source_settings(dc2))
    finally:
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL {variable} = %s", (good,))
        conn.close()
    message = str(info.value)
    assert f"{variable}={bad}" in message and f"{variable}={good}" in message
    assert "server config" in message
    assert dc2.password not in message


def test_resuming_from_a_purged_binlog_fails_instead_of_skipping(
    dc2: ServerInfo, tmp_path: Path
) -> None:
    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS purge_db")
        cur.execute("CREATE TABLE IF NOT EXISTS purge_db.t (id INT PRIMARY KEY)")
        start = master_position(dc2)
        cur.execute("INSERT INTO purge_db.t VALUES (1)")
        end = master_position(dc2)
    options = CaptureOptions(
        capture=TableFilter.build(["purge_db.*"]), start_from=f"{start[0]}:{start[1]}"
    )
    with capturing(dc2, tmp_path / "buf", options) as capture:
        capture.wait_for(end)
        resume_from = capture.buffer.last_scn
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("INSERT INTO purge_db.t VALUES (2)")  # a change the purge must not hide
        cur.execute("SHOW MASTER STATUS")
        newest = cur.fetchone()[0]
        cur.execute("PURGE BINARY LOGS TO %s", (newest,))
    conn.close()

    with pytest.raises(BinlogPurgedError) as info:
        with capturing(dc2, tmp_path / "buf", options) as capture:
            capture.wait_for(master_position(dc2), timeout=15)
    assert start[0] in str(info.value) and "will not skip ahead" in str(info.value)
    with EventBuffer.open_read_only(tmp_path / "buf") as buffer:
        assert buffer.last_scn == resume_from, "the buffer did not move past the gap"


def test_unreachable_source_is_retried_not_fatal(tmp_path: Path) -> None:
    closed_port = 1  # nothing listens on port 1 of loopback
    settings = SourceSettings("127.0.0.1", closed_port, "drc", "secret-password", 77100)
    buffer = EventBuffer.open(tmp_path / "buf")
    metastore = MetaStore.open(tmp_path / "meta.sqlite3")
    options = CaptureOptions(retry_initial_s=0.05, retry_max_s=0.1)
    replicator = Replicator(settings, buffer, metastore, options)
    stop = threading.Event()
    thread = threading.Thread(target=replicator.run, args=(stop,))
    thread.start()
    try:
        stop.wait(1.0)
    finally:
        stop.set()
        thread.join(timeout=10)
        buffer.close()
        metastore.close()
    assert not thread.is_alive()
    assert replicator.stats.reconnects >= 3
    assert "cannot connect" in (replicator.stats.last_error or "")
    assert "secret-password" not in (replicator.stats.last_error or "")
