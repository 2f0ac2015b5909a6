"""Source failover in a replicator group, on real ZooKeeper and MariaDB: three members read a
source given as a list (the primary and its GTID replica).

- The replica is promoted while both datacenters write (two-way): the group's leader follows
  it with change_id + 1, the followers keep identical buffers, and the other datacenter ends
  row for row equal, every transaction applied once and none echoed.
- The only server left has diverged (both datacenters wrote until the old primary went): the
  leader refuses it naming both positions, the member elected next refuses too, and so does a
  member that was paused behind the refusal (the group keeps the refusal in ZooKeeper; that
  member's own older position would have passed). Nothing is appended after the refusal.

Both tests run the two-way workload of tests/support/two_way.py.

Each test gets its own one-datacenter sandbox with a replica (promotion changes which server
is the primary); the session sandbox's dc2 is the other datacenter.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from drc.core.scn import SCN
from drc.sandbox import mariadb
from drc.sandbox.procs import stop_pid
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import apply_user
from tests.support.failover import caught_up, one_datacenter_with_replica
from tests.support.group import Group, Member, assert_identical_on_common_range
from tests.support.servers import fresh_database, master_position, sql
from tests.support.two_way import TwoWay, inserted, stored, strictly_increasing

SESSION_S = 2.0
DB = "gfo_db"
TABLE = f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(40))"
REPLICA_ONLY = -1  # written on the diverged replica alone (the writers' ids are positive)


def _address(server: ServerInfo) -> str:
    return f"{server.host}:{server.port}"


def _position(server: ServerInfo) -> SCN:
    log_file, pos = master_position(server)
    return SCN(0, 0, int(log_file.rsplit(".", 1)[1]), pos)


@contextmanager
def _two_groups(
    box: SandboxDescription, dc2: ServerInfo, tmp: Path, prefix: str
) -> Iterator[TwoWay]:
    """dc1's three-member group reading the source list (primary, replica) and dc2's one
    member, both leading and capturing, with the two-way workload ready (not started); every
    process stopped at the end."""
    primary, replica = box.server("dc1"), box.replica("dc1")
    sql(primary, f"CREATE DATABASE {DB}", TABLE)
    fresh_database(dc2, DB, TABLE)
    apply_user(replica)
    caught_up(replica, primary)
    name = f"{prefix}{time.time_ns() % 10**9}"
    servers = (_address(primary), _address(replica))
    group = Group.create(box, primary, tmp / "dc1", 3, SESSION_S, name, servers=servers)
    other = Group.create(box, dc2, tmp / "dc2", 1, SESSION_S, f"{name}x")  # dc2's
    load = TwoWay(box, group, other, DB, tmp)
    try:
        group.start()
        other.start()
        load.start_channels()
        group.wait_started(group.wait_leader(30))
        other.wait_started(other.wait_leader(30))
        group.wait_roles(["follower", "follower", "leader"])
        yield load
    finally:
        load.close()
        group.stop()
        other.stop()


@pytest.mark.slow
def test_a_replica_promoted_under_two_way_writes_the_group_follows_and_nothing_is_lost(
    sandbox: SandboxDescription, dc2: ServerInfo, tmp_path: Path
) -> None:
    with one_datacenter_with_replica() as box, _two_groups(box, dc2, tmp_path, "gfo") as load:
        replica = box.replica("dc1")
        group, other = load.group, load.other
        change_id = _switch_over_under_writes(box, load)
        group.wait_caught_up(_position(replica))
        other.wait_caught_up(_position(dc2))
        status = group.wait_leader(30).status()
        load.assert_applied_once_none_echoed(replica, group.members)

    assert status is not None and status["capture"]["change_id"] == change_id + 1, status
    assert_identical_on_common_range([m.buffer_dir for m in group.members])
    for member in group.members:
        strictly_increasing(member.buffer_dir)
        found = stored(member.buffer_dir, DB)
        assert {scn.change_id for scn, _drc, _ids in found} == {change_id, change_id + 1}
        after = [scn for scn, _drc, _ids in found if scn.change_id == change_id + 1]
        assert after and all(scn.server_id == replica.server_id for scn in after)


def _switch_over_under_writes(box: SandboxDescription, load: TwoWay) -> int:
    """Both sides write; dc1's replica is promoted (planned switchover, docs/source-failover.md)
    and the old primary stops; writes go on, then stop and both sides converge. Returns the
    change_id the group read the old primary with."""
    primary, replica = box.server("dc1"), box.replica("dc1")
    load.start()
    time.sleep(3)
    change_id = stored(load.group.members[0].buffer_dir, DB)[-1][0].change_id
    load.dc1_writes.pause()  # 1. writes stop on the old primary (DRC's channel too)
    load.stop_apply_into_dc1()
    sql(primary, "SET GLOBAL read_only = 1")
    caught_up(replica, primary)  # 2. the replica has everything
    mariadb.promote(Path(replica.socket))  # 3. promoted; clients move there
    load.apply_into_dc1(replica)
    load.dc1_writes.resume_on(replica)
    stop_pid(primary.pid, primary.marker)  # 4. the old primary goes away
    time.sleep(4)
    load.stop_writes()
    load.wait_converged(replica)
    return change_id


def _wait_reached(members: list[Member], target: SCN, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lasts = [stored(m.buffer_dir, DB)[-1][0] for m in members]
        if all((s.log_index, s.log_pos) >= (target.log_index, target.log_pos) for s in lasts):
            return
        time.sleep(0.2)
    raise AssertionError(f"members did not reach {target}")


@pytest.mark.slow
def test_a_diverged_source_is_refused_by_every_leader_even_one_behind_the_refusal(
    sandbox: SandboxDescription, dc2: ServerInfo, tmp_path: Path
) -> None:
    with one_datacenter_with_replica() as box, _two_groups(box, dc2, tmp_path, "gdv") as load:
        primary, replica = box.server("dc1"), box.replica("dc1")
        group = load.group
        leader = group.wait_leader(30)
        load.start()
        time.sleep(2)
        stale = next(m for m in group.members if m is not leader)
        stale.signal(signal.SIGSTOP)  # it will wake up behind the refusal
        paused_at = time.monotonic()
        sql(replica, "STOP SLAVE", f"INSERT INTO {DB}.t VALUES ({REPLICA_ONLY}, 'replica only')")
        time.sleep(2)  # both sides go on writing: the primary moves past the replica
        load.stop_writes()
        load.wait_converged(primary)
        awake = [m for m in group.members if m is not stale]
        _wait_reached(awake, _position(primary))
        load.other.wait_caught_up(_position(dc2))
        load.assert_applied_once_none_echoed(primary, awake)
        [(buffer_pos,)] = sql(primary, "SELECT @@gtid_binlog_pos")
        [(replica_pos,)] = sql(replica, "SELECT @@gtid_binlog_pos")
        time.sleep(max(0.0, paused_at + 2.5 * SESSION_S - time.monotonic()))  # it expired
        load.stop_apply_into_dc1()
        stop_pid(primary.pid, primary.marker)  # only the diverged replica is left
        for member in awake:
            assert member.proc is not None
            assert member.proc.wait(timeout=60) != 0, group.logs()
        stale.signal(signal.SIGCONT)
        assert stale.proc is not None
        assert stale.proc.wait(timeout=60) != 0, group.logs()

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
    mine = load.dc1_writes.written
    for member in group.members:
        found = stored(member.buffer_dir, DB)
        assert len({scn.change_id for scn, _drc, _ids in found}) == 1, "never read the replica"
        assert REPLICA_ONLY not in inserted(member.buffer_dir, DB, applied=False)
        strictly_increasing(member.buffer_dir)
    for member in awake:  # nothing appended after the refusal
        assert inserted(member.buffer_dir, DB, applied=False) == mine
    held = inserted(stale.buffer_dir, DB, applied=False)
    assert held == mine[: len(held)], "the paused member holds a prefix"


def _seqs(position: str) -> tuple[int, ...]:
    """A GTID position's sequence numbers by domain (one server writes each domain here)."""
    found = sorted((int(d), int(q)) for d, _s, q in (g.split("-") for g in position.split(",")))
    return tuple(q for _d, q in found)
