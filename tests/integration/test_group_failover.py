"""Source failover in a replicator group, on real ZooKeeper and MariaDB: three members read a
source given as a list (the primary and its GTID replica).

- The replica is promoted while both datacenters write (two-way): the group's leader follows
  it with change_id + 1, the followers keep identical buffers, and the other datacenter ends
  row for row equal, every transaction applied once and none echoed.
- The only server left has diverged: the leader refuses it naming both positions, the member
  elected next refuses too, and so does a member that was paused behind the refusal (the group
  keeps the refusal in ZooKeeper; that member's own older position would have passed).

Each test gets its own one-datacenter sandbox with a replica (promotion changes which server
is the primary); the session sandbox's dc2 is the other datacenter.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from drc.core.codec import decode_transaction
from drc.core.events import Op
from drc.core.scn import SCN
from drc.sandbox import mariadb
from drc.sandbox.procs import stop_pid, wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.integration.capture import master_position
from tests.integration.group import Group, Member, assert_identical_on_common_range, records
from tests.integration.servers import fresh_database
from tests.integration.test_apply_support import apply_process_config, apply_user
from tests.integration.test_source_failover import (
    Writer,
    caught_up,
    one_datacenter_with_replica,
    sql,
)

SESSION_S = 2.0
DB = "gfo_db"
TABLE = f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(40))"


def _address(server: ServerInfo) -> str:
    return f"{server.host}:{server.port}"


def _position(server: ServerInfo) -> SCN:
    log_file, pos = master_position(server)
    return SCN(0, 0, int(log_file.rsplit(".", 1)[1]), pos)


def _stored(directory: Path) -> list[tuple[SCN, bool, list[int]]]:
    """Each record of a buffer: its SCN, whether DRC applied it, and the ids it inserted."""
    out = []
    for scn, payload, _ts, _more in records(directory):
        txn, _ = decode_transaction(payload)
        ids = [
            int(c.after["id"])
            for c in txn.changes
            if c.schema == DB and c.op == Op.INSERT and c.after is not None
        ]
        out.append((scn, txn.drc_originated, ids))
    return out


def _ids(directory: Path, applied: bool) -> list[int]:
    """Ids inserted by this datacenter's own clients (``applied`` False) or by DRC."""
    return [i for _scn, drc, ids in _stored(directory) if drc == applied for i in ids]


def _rows(server: ServerInfo) -> list[tuple[object, ...]]:
    return sql(server, f"SELECT id, v FROM {DB}.t ORDER BY id")


@contextmanager
def _applying(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m drc.apply`` for ``config`` until the block ends."""
    argv = [sys.executable, "-m", "drc.apply", "--config", str(config), "--stats-every", "1"]
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _zk_url(box: SandboxDescription, group: Group) -> str:
    return f"zk://{box.zookeeper.connect}/drc-sandbox/{group.datacenter}"


@pytest.mark.slow
def test_a_replica_promoted_under_two_way_writes_the_group_follows_and_nothing_is_lost(
    sandbox: SandboxDescription, dc2: ServerInfo, tmp_path: Path
) -> None:
    with one_datacenter_with_replica() as box:
        primary, replica = box.server("dc1"), box.replica("dc1")
        sql(primary, f"CREATE DATABASE {DB}", TABLE)
        fresh_database(dc2, DB, TABLE)
        for server in (primary, replica, dc2):
            apply_user(server)
        caught_up(replica, primary)
        name = f"gfo{time.time_ns() % 10**9}"
        servers = (_address(primary), _address(replica))
        group = Group.create(box, primary, tmp_path / "dc1", 3, SESSION_S, name, servers=servers)
        other = Group.create(box, dc2, tmp_path / "dc2", 1, SESSION_S, f"{name}x")  # dc2's
        dc1_writes = Writer(primary, f"{DB}.t", first=1, step=2)
        dc2_writes = Writer(dc2, f"{DB}.t", first=2, step=2)
        try:
            group.start()
            other.start()
            group.wait_started(group.wait_leader(30))
            other.wait_started(other.wait_leader(30))
            group.wait_roles(["follower", "follower", "leader"])
            change_id = _switch_over_under_writes(
                box, group, other, tmp_path, (dc1_writes, dc2_writes)
            )
            group.wait_caught_up(_position(replica))
            other.wait_caught_up(_position(dc2))
            leader = group.wait_leader(30)
            status = leader.status()
        finally:
            group.stop()
            other.stop()

    assert status is not None and status["capture"]["change_id"] == change_id + 1, status
    expected = sorted(dc1_writes.written + dc2_writes.written)
    assert [row[0] for row in _rows(dc2)] == expected
    assert_identical_on_common_range([m.buffer_dir for m in group.members])
    for member in group.members:
        stored = _stored(member.buffer_dir)
        assert {scn.change_id for scn, _drc, _ids in stored} == {change_id, change_id + 1}
        after = [scn for scn, _drc, _ids in stored if scn.change_id == change_id + 1]
        assert after and all(scn.server_id == replica.server_id for scn in after)
        assert _ids(member.buffer_dir, applied=False) == dc1_writes.written, "each once, in order"
        assert sorted(_ids(member.buffer_dir, applied=True)) == dc2_writes.written, "dc2's once"
    dc2_buffer = other.members[0].buffer_dir
    assert sorted(_ids(dc2_buffer, applied=True)) == dc1_writes.written, "applied once on dc2"
    assert _ids(dc2_buffer, applied=False) == dc2_writes.written, "none of dc1's came back"


def _switch_over_under_writes(
    box: SandboxDescription,
    group: Group,
    other: Group,
    tmp: Path,
    writers: tuple[Writer, Writer],
) -> int:
    """Both sides write; dc1's replica is promoted (planned switchover, docs/source-failover.md)
    and the old primary stops; writes go on, then stop and both sides converge. Returns the
    change_id the group read the old primary with."""
    primary, replica = box.server("dc1"), box.replica("dc1")
    dc1_writes, dc2_writes = writers
    (tmp / "to_dc2").mkdir(exist_ok=True)
    to_dc2 = apply_process_config(
        tmp / "to_dc2", other.server, _zk_url(box, group), "from_dc1", [f"{DB}.*"],
        max_commit_delay_ms=20,
    )  # fmt: skip

    def to_dc1(target: ServerInfo, where: str) -> Path:
        (tmp / where).mkdir(exist_ok=True)
        return apply_process_config(
            tmp / where, target, _zk_url(box, other), "from_dc2", [f"{DB}.*"],
            local="dc1", origin="dc2", max_commit_delay_ms=20,
        )  # fmt: skip

    with _applying(to_dc2, tmp / "to_dc2.log"):
        with _applying(to_dc1(primary, "to_old"), tmp / "to_dc1.log"):
            for writer in writers:
                writer.thread.start()
            time.sleep(3)
            change_id = _stored(group.members[0].buffer_dir)[-1][0].change_id
            dc1_writes.pause()  # 1. writes stop on the old primary (DRC's channel too)
        sql(primary, "SET GLOBAL read_only = 1")
        caught_up(replica, primary)  # 2. the replica has everything
        mariadb.promote(Path(replica.socket))  # 3. promoted; clients move there
        with _applying(to_dc1(replica, "to_new"), tmp / "to_dc1.log") as applying:
            dc1_writes.resume_on(replica)
            stop_pid(primary.pid, primary.marker)  # 4. the old primary goes away
            time.sleep(4)
            for writer in writers:
                writer.stop.set()
                writer.thread.join(30)
            expected = sorted(dc1_writes.written + dc2_writes.written)

            def converged() -> bool:
                assert applying.poll() is None, (tmp / "to_dc1.log").read_text()[-3000:]
                return (
                    [r[0] for r in _rows(replica)]
                    == [r[0] for r in _rows(other.server)]
                    == (expected)
                )

            assert wait_for(converged, 120, interval=0.5), group.logs()
    return change_id


def _wait_reached(members: list[Member], target: SCN, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lasts = [_stored(m.buffer_dir)[-1][0] for m in members]
        if all((s.log_index, s.log_pos) >= (target.log_index, target.log_pos) for s in lasts):
            return
        time.sleep(0.2)
    raise AssertionError(f"members did not reach {target}")


@pytest.mark.slow
def test_a_diverged_source_is_refused_by_every_leader_even_one_behind_the_refusal(
    tmp_path: Path,
) -> None:
    with one_datacenter_with_replica() as box:
        primary, replica = box.server("dc1"), box.replica("dc1")
        sql(primary, f"CREATE DATABASE {DB}", TABLE)
        caught_up(replica, primary)
        servers = (_address(primary), _address(replica))
        name = f"gdv{time.time_ns() % 10**9}"
        group = Group.create(box, primary, tmp_path, 3, SESSION_S, name, servers=servers)
        try:
            group.start()
            leader = group.wait_leader(30)
            group.wait_started(leader)
            group.wait_roles(["follower", "follower", "leader"])
            for n in range(1, 6):
                sql(primary, f"INSERT INTO {DB}.t VALUES ({n}, 'both')")
            group.wait_caught_up(_position(primary))
            stale = next(m for m in group.members if m is not leader)
            stale.signal(signal.SIGSTOP)  # it will wake up behind the refusal
            paused_at = time.monotonic()
            sql(replica, "STOP SLAVE", f"INSERT INTO {DB}.t VALUES (1000, 'replica only')")
            for n in range(6, 26):
                sql(primary, f"INSERT INTO {DB}.t VALUES ({n}, 'primary only')")
            awake = [m for m in group.members if m is not stale]
            _wait_reached(awake, _position(primary))
            [(buffer_pos,)] = sql(primary, "SELECT @@gtid_binlog_pos")
            [(replica_pos,)] = sql(replica, "SELECT @@gtid_binlog_pos")
            time.sleep(max(0.0, paused_at + 2.5 * SESSION_S - time.monotonic()))  # it expired
            stop_pid(primary.pid, primary.marker)  # only the diverged replica is left
            for member in awake:
                assert member.proc is not None
                assert member.proc.wait(timeout=60) != 0, group.logs()
            stale.signal(signal.SIGCONT)
            assert stale.proc is not None
            assert stale.proc.wait(timeout=60) != 0, group.logs()
        finally:
            group.stop()

    first = leader.log.read_text()
    # Heartbeats go on writing to the primary, so the buffer may hold a few after buffer_pos.
    named = re.search(r"buffer position (\S+), server gtid_binlog_pos (\S+)", first)
    assert "lacks transactions" in first and named is not None, first[-3000:]
    assert _seqs(named.group(1)) >= _seqs(buffer_pos) and replica_pos in first
    buffer_pos = named.group(1)
    second = next(m for m in awake if m is not leader).log.read_text()
    assert "lacks transactions" in second or "refused the group's source" in second, second
    woken = stale.log.read_text()
    assert "refused the group's source at SCN" in woken and buffer_pos in woken, woken[-3000:]
    for member in group.members:
        stored = _stored(member.buffer_dir)
        assert len({scn.change_id for scn, _drc, _ids in stored}) == 1, "never read the replica"
        assert 1000 not in _ids(member.buffer_dir, applied=False)
    for member in awake:
        assert _ids(member.buffer_dir, applied=False) == list(range(1, 26))
    assert _ids(stale.buffer_dir, applied=False) == list(range(1, 6))


def _seqs(position: str) -> tuple[int, ...]:
    """A GTID position's sequence numbers by domain (one server writes each domain here)."""
    found = sorted((int(d), int(q)) for d, _s, q in (g.split("-") for g in position.split(",")))
    return tuple(q for _d, q in found)
