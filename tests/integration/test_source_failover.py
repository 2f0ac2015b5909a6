"""Source failover on real MariaDB: a GTID replica promoted while writes go on, a diverged
replica, and another datacenter's server (drc.replicator.failover).

Each test gets its own sandbox of one datacenter with a replica (``drc sandbox up --replica``),
since promoting a replica changes which server is the primary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.core.errors import SourceDivergedError
from drc.core.events import Transaction
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.replicator.replicator import CaptureOptions
from drc.sandbox import mariadb
from drc.sandbox.procs import stop_pid
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.capture import Capture, capturing, read_all
from tests.support.failover import Writer, caught_up, one_datacenter_with_replica
from tests.support.servers import master_position, sql

CAPTURE = CaptureOptions(capture=TableFilter.build(["fo_db.*"]), retry_max_s=1.0)


@pytest.fixture
def group() -> Iterator[SandboxDescription]:
    with one_datacenter_with_replica() as description:
        yield description


def _with_table(group: SandboxDescription) -> tuple[ServerInfo, ServerInfo]:
    """dc1's primary and replica, both holding the empty table fo_db.t."""
    primary, replica = group.server("dc1"), group.replica("dc1")
    sql(primary, "CREATE DATABASE fo_db", "CREATE TABLE fo_db.t (id INT PRIMARY KEY, v TEXT)")
    caught_up(replica, primary)
    return primary, replica


def _inserted_ids(stored: list[Transaction]) -> list[int]:
    return [c.after["id"] for t in stored for c in t.changes if c.after is not None]


def _wait_for_ids(capture: Capture, count: int, timeout: float = 120.0) -> list[Transaction]:
    deadline = time.monotonic() + timeout
    while True:
        if capture.errors:
            raise capture.errors[0]
        stored = read_all(capture.buffer)
        if len(_inserted_ids(stored)) >= count or time.monotonic() > deadline:
            return stored
        time.sleep(0.3)


def test_a_promoted_replica_continues_capture_with_change_id_plus_one_nothing_lost_or_repeated(
    group: SandboxDescription, tmp_path: Path
) -> None:
    primary, replica = _with_table(group)
    writer = Writer(primary)
    with capturing(primary, tmp_path / "buf", CAPTURE, also=(replica,)) as capture:
        capture.wait_for(master_position(primary))  # the start is fixed before writes begin
        writer.thread.start()
        before = _wait_for_ids(capture, 200)
        # Planned switchover: writes stop on the old primary, the replica catches up and is
        # promoted, writes go on there, and the old primary goes away.
        writer.pause()
        caught_up(replica, primary)
        mariadb.promote(Path(replica.socket))
        sql(primary, "SET GLOBAL read_only = 1")
        writer.resume_on(replica)
        stop_pid(primary.pid, primary.marker)
        time.sleep(2)
        writer.stop.set()
        writer.thread.join(30)
        stored = _wait_for_ids(capture, len(writer.written))
        stats = capture.replicator.stats

    first_change_id = before[0].scn.change_id
    assert _inserted_ids(stored) == writer.written  # each row once, in commit order
    scns = [t.scn for t in stored if t.last_fragment]
    assert all(a < b for a, b in zip(scns, scns[1:], strict=False)), "SCNs strictly increase"
    assert {s.change_id for s in scns} == {first_change_id, first_change_id + 1}
    after = [t for t in stored if t.scn.change_id == first_change_id + 1]
    assert after and all(t.scn.server_id == replica.server_id for t in after)
    assert any(t.server_id == replica.server_id for t in after), "rows written on the new primary"
    assert stats.source_switches >= 1 and stats.change_id == first_change_id + 1


def test_a_diverged_replica_is_refused_naming_both_positions(
    group: SandboxDescription, tmp_path: Path
) -> None:
    primary, replica = _with_table(group)
    sql(replica, "STOP SLAVE")
    sql(replica, "INSERT INTO fo_db.t VALUES (1000, 'only on the replica')")
    with capturing(primary, tmp_path / "buf", CAPTURE) as capture:
        capture.wait_for(master_position(primary))
        for n in range(1, 21):
            sql(primary, f"INSERT INTO fo_db.t VALUES ({n}, 'v')")
        _wait_for_ids(capture, 20)
    [(buffer_pos,)] = sql(primary, "SELECT @@gtid_binlog_pos")
    [(replica_pos,)] = sql(replica, "SELECT @@gtid_binlog_pos")
    stop_pid(primary.pid, primary.marker)  # the old primary is gone: only the replica is left

    with pytest.raises(SourceDivergedError) as refused:  # noqa: PT012
        with capturing(primary, tmp_path / "buf", CAPTURE, also=(replica,)) as capture:
            _wait_for_ids(capture, 21, timeout=30)
    message = str(refused.value)
    assert buffer_pos in message and replica_pos in message
    assert len(_inserted_ids(read_all_closed(tmp_path / "buf"))) == 20  # nothing appended


def test_another_datacenters_server_is_refused(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    sql(dc1, "CREATE DATABASE IF NOT EXISTS fo_db")
    sql(dc1, "CREATE TABLE IF NOT EXISTS fo_db.t (id INT PRIMARY KEY, v TEXT)")
    with capturing(dc1, tmp_path / "buf", CAPTURE) as capture:
        capture.wait_for(master_position(dc1))
        sql(dc1, "REPLACE INTO fo_db.t VALUES (1, 'dc1')")
        _wait_for_ids(capture, 1)
    with pytest.raises(SourceDivergedError, match="another datacenter"):  # noqa: PT012
        with capturing(dc2, tmp_path / "buf", CAPTURE) as capture:
            _wait_for_ids(capture, 2, timeout=30)


def read_all_closed(buffer_dir: Path) -> list[Transaction]:
    with EventBuffer.open_read_only(buffer_dir) as buffer:
        return read_all(buffer)
