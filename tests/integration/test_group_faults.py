"""Replicator-group faults of issue 27 (item 3), under the two-way workload
(tests/support/two_way.py: both datacenters write, dc2's channel reads dc1's group through
``zk://``) and with an SDK reader of the group through ``zk://``:

- the leader cut off from ZooKeeper (a blackholed link between it and ZooKeeper) while its API
  stays reachable: another member leads, the old one stops appending and never says it leads,
  readers follow the new leader;
- a follower held far behind (paused) while the leader captures a backlog, then elected alone
  (the leader and the other follower killed -9): it reads the gap from the source binlog;
- every member killed -9 (or sent SIGTERM) at once and started again under writes: one
  leader again.

Each ends with the other datacenter row for row equal, every transaction applied once and none
echoed, every member's buffer identical on the common range with SCNs strictly increasing, and
the SDK reader having every dc1 transaction once, in commit order.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from drc.core.scn import SCN
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.faults import FaultyLink
from tests.support.group import Group, Member, last_scn, records
from tests.support.servers import fresh_database
from tests.support.two_way import (
    GROUP_TABLE,
    Reader,
    TwoWay,
    check_after_fault,
    started_group,
    two_way,
    zk_url,
)

SESSION_S = 2.0
LONG_SESSION_S = 8.0  # a follower paused for less keeps its place in the election


def _reader_done(load: TwoWay, reader: Reader, complete: list[Member]) -> None:
    """The SDK reader got each of dc1's writes once, in order; the checks after a fault."""
    reader.wait_for(len(load.dc1_writes.written))
    assert reader.error is None
    assert reader.ids == load.dc1_writes.written, "the reader lost, repeated or reordered"
    check_after_fault(load, complete)


def _wait_appends(member: Member, timeout: float = 60.0) -> None:
    """Until ``member``'s buffer grows (it captures)."""
    before = last_scn(member.buffer_dir)
    deadline = time.monotonic() + timeout
    while last_scn(member.buffer_dir) == before:
        assert time.monotonic() < deadline, f"{member.member_id} appends nothing"
        time.sleep(0.1)


@pytest.fixture
def readers() -> Iterator[Callable[[str], Reader]]:
    """Makes SDK readers; each is closed at the end even if the test failed (an open one
    keeps the test process from exiting)."""
    made: list[Reader] = []

    def make(url: str) -> Reader:
        made.append(Reader(url))
        return made[-1]

    yield make
    for reader in made:
        if not reader.stop.is_set():
            reader.wait_for(0, timeout=0)


@pytest.fixture
def group(sandbox: SandboxDescription, dc1: ServerInfo, tmp_path: Path) -> Iterator[Group]:
    with started_group(sandbox, dc1, tmp_path, "gft", SESSION_S) as made:
        yield made


@pytest.mark.slow
def test_a_leader_cut_off_from_zookeeper_but_reachable_stops_leading_and_readers_follow(
    sandbox: SandboxDescription,
    dc1: ServerInfo,
    dc2: ServerInfo,
    tmp_path: Path,
    readers: Callable[[str], Reader],
) -> None:
    """Each member reaches ZooKeeper through a FaultyLink of its own; readers and followers
    reach its API directly. The leader's link is blackholed."""
    fresh_database(dc1, "grp_db", GROUP_TABLE)
    group = Group.create(sandbox, dc1, tmp_path, 3, SESSION_S, name=f"gzk{time.time_ns() % 10**9}")
    zk_host, zk_port = sandbox.zookeeper.connect.rsplit(":", 1)
    links: dict[str, FaultyLink] = {}
    for member in group.members:
        link = FaultyLink(zk_host, int(zk_port))
        links[member.member_id] = link
        text = member.config.read_text()
        old = f'zookeeper = "{sandbox.zookeeper.connect}"'
        assert old in text, text
        member.config.write_text(text.replace(old, f'zookeeper = "127.0.0.1:{link.port}"'))
    group.start()
    reader = readers(zk_url(sandbox, group))
    try:
        with two_way(sandbox, group, dc2, tmp_path, SESSION_S) as load:
            old = group.wait_leader(30)
            time.sleep(1.5)
            cut_at = time.monotonic()
            links[old.member_id].blackhole()
            new = group.wait_leader(30 + 3 * SESSION_S, exclude=old)
            _wait_appends(new)
            print(f"new leader appends {time.monotonic() - cut_at:.1f}s after the cut")
            # The old leader is still up and reachable, and neither appends nor says it leads.
            frozen = last_scn(old.buffer_dir)
            for _ in range(int(4 * SESSION_S / 0.25)):
                status = old.status()
                assert status is not None, "the old leader's API stays reachable"
                assert status["role"] != "leader", status
                assert old.alive()
                time.sleep(0.25)
            assert last_scn(old.buffer_dir) == frozen, "the cut-off leader appends nothing"
            kept = records(old.buffer_dir)
            links[old.member_id].heal()  # its session turns out expired: it stops for good
            assert old.proc is not None
            healed_at = time.monotonic()
            assert old.proc.wait(timeout=60 + 3 * SESSION_S) != 0
            print(f"old leader stopped {time.monotonic() - healed_at:.1f}s after the heal")
            assert "never appends again" in old.log.read_text()
            after = records(old.buffer_dir)
            assert after == kept[: len(after)], "the old leader appended nothing once back"
            group.restart_dead()
            time.sleep(1.0)
        _reader_done(load, reader, [m for m in group.members if m is not old])
        print(f"{len(load.dc1_writes.written)} / {len(load.dc2_writes.written)} written")
    finally:
        group.stop()
        for link in links.values():
            link.close()


@pytest.mark.slow
def test_a_follower_far_behind_elected_alone_reads_its_gap_from_the_source(
    sandbox: SandboxDescription,
    group: Group,
    dc2: ServerInfo,
    tmp_path: Path,
    readers: Callable[[str], Reader],
) -> None:
    reader = readers(zk_url(sandbox, group))
    with two_way(sandbox, group, dc2, tmp_path, SESSION_S) as load:
        leader = group.wait_leader(30)
        group.wait_roles(["follower", "follower", "leader"])
        behind, other = [m for m in group.members if m is not leader]
        behind.pause()
        held = last_scn(behind.buffer_dir)
        time.sleep(6)  # the leader captures a backlog the paused follower lacks
        backlog = _records_after(leader, held)
        assert backlog > 0
        killed_at = time.monotonic()
        leader.kill()
        other.kill()
        behind.signal(signal.SIGCONT)
        assert group.wait_leader(60) is behind
        _wait_appends(behind)
        print(f"backlog {backlog} records; {behind.member_id} appends "
              f"{time.monotonic() - killed_at:.1f}s after the kill")  # fmt: skip
        time.sleep(2)
        group.restart_dead()
        time.sleep(2)
    _reader_done(load, reader, group.members)
    print(f"{len(load.dc1_writes.written)} / {len(load.dc2_writes.written)} written")


def _records_after(member: Member, scn: SCN | None) -> int:
    return sum(1 for r in records(member.buffer_dir) if scn is None or r[0] > scn)


def _election_order(sandbox: SandboxDescription, group: Group) -> list[str]:
    """The members' ids in the order the election will make them lead."""
    client = KazooClient(hosts=sandbox.zookeeper.connect)
    client.start(timeout=30)
    try:
        path = f"/drc-sandbox/{group.datacenter}/election"
        return [str(c) for c in client.Election(path).contenders()]
    finally:
        client.stop()
        client.close()


@pytest.mark.slow
def test_a_follower_far_behind_elected_next_catches_up_from_the_other_member(
    sandbox: SandboxDescription,
    dc1: ServerInfo,
    dc2: ServerInfo,
    tmp_path: Path,
    readers: Callable[[str], Reader],
) -> None:
    """The follower next in line is paused for less than its session timeout (long, here),
    so it keeps its place: when the leader is killed it leads although the other follower
    holds more."""
    with started_group(sandbox, dc1, tmp_path, "gfb", LONG_SESSION_S) as group:
        reader = readers(zk_url(sandbox, group))
        with two_way(sandbox, group, dc2, tmp_path, SESSION_S) as load:
            leader = group.wait_leader(60)
            group.wait_roles(["follower", "follower", "leader"])
            order = _election_order(sandbox, group)
            assert order[0] == leader.member_id, order
            behind = next(m for m in group.members if m.member_id == order[1])
            other = next(m for m in group.members if m.member_id == order[2])
            paused_at = behind.pause()
            held = last_scn(behind.buffer_dir)
            time.sleep(LONG_SESSION_S / 2)  # a backlog the paused follower lacks
            leader.kill()
            backlog = _records_after(other, held)
            assert backlog > 0 and time.monotonic() - paused_at < LONG_SESSION_S - 1
            behind.signal(signal.SIGCONT)
            killed_at = time.monotonic()
            assert group.wait_leader(60 + 2 * LONG_SESSION_S) is behind, group.roles()
            _wait_appends(behind)
            print(f"backlog {backlog} records; {behind.member_id} appends "
                  f"{time.monotonic() - killed_at:.1f}s after the kill")  # fmt: skip
            group.restart_dead()
            time.sleep(2)
        _reader_done(load, reader, group.members)
    assert "caught up from member " + other.member_id in behind.log.read_text()
    print(f"{len(load.dc1_writes.written)} / {len(load.dc2_writes.written)} written")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "term"])
def test_the_whole_group_stopped_at_once_and_restarted_loses_and_repeats_nothing(
    sandbox: SandboxDescription,
    group: Group,
    dc2: ServerInfo,
    tmp_path: Path,
    readers: Callable[[str], Reader],
    sig: signal.Signals,
) -> None:
    reader = readers(zk_url(sandbox, group))
    with two_way(sandbox, group, dc2, tmp_path, SESSION_S) as load:
        group.wait_roles(["follower", "follower", "leader"])
        time.sleep(2)
        for member in group.members:  # all at once: signals first, then reap
            member.signal(sig)
        killed_at = time.monotonic()
        for member in group.members:
            assert member.proc is not None
            member.proc.wait(timeout=60)
        if sig == signal.SIGTERM:  # a clean stop, not an error
            assert [m.proc.returncode for m in group.members if m.proc] == [0, 0, 0]
        time.sleep(1)  # writes go on with no member up
        group.restart_dead()
        leader = group.wait_leader(60)
        _wait_appends(leader)
        print(f"{leader.member_id} appends {time.monotonic() - killed_at:.1f}s after the kill")
        group.wait_roles(["follower", "follower", "leader"], timeout=60)
        time.sleep(3)
    _reader_done(load, reader, group.members)
    print(f"{len(load.dc1_writes.written)} / {len(load.dc2_writes.written)} written")
