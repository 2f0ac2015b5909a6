"""A leader that stops answering without dying (issue 24, items 1-2): paused (SIGSTOP, as a
hung host or a long pause would), or behind a half-open link (its outgoing traffic lost, the
connections still up). Under the two-way workload, with dc2's channel and an SDK reader on
the group through ``zk://``:

- a new leader appends within the session timeout + 2 s of the fault;
- every ``zk://`` reader reads what dc1's clients wrote after the fault within the session
  timeout + 3 s: a leadership change seen in ZooKeeper wakes them at once;
- once the old leader is back it never appends again and stops (deposed); restarted, it
  rejoins as a follower, and nothing is lost, doubled or echoed.

The bounds are asserted from the session timeout (correctness of failover, not speed).
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drc.core.scn import SCN
from drc.sandbox.procs import free_port
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.group import Group, Member, last_scn, records
from tests.support.network import pipe
from tests.support.servers import fresh_database
from tests.support.two_way import (
    GROUP_TABLE,
    Reader,
    TwoWay,
    check_after_fault,
    rows,
    started_group,
    two_way,
    zk_url,
)

SESSION_S = 2.0
LEADER_BOUND_S = SESSION_S + 2  # a new leader appends
READER_BOUND_S = SESSION_S + 3  # every zk:// reader reads from it


def _newest(group: Group) -> SCN:
    scns = [s for s in (last_scn(m.buffer_dir) for m in group.members) if s is not None]
    return max(scns)


def _within(bound_s: float, since: float, what: str, done: Callable[[], bool]) -> float:
    """Poll ``done`` until it holds; the seconds from ``since`` it took, asserted <= bound."""
    while not done():
        elapsed = time.monotonic() - since
        assert elapsed <= bound_s, f"{what}: not within {bound_s:.1f}s of the fault"
        time.sleep(0.05)
    return time.monotonic() - since


def _assert_failover(group: Group, old: Member, load: TwoWay, reader: Reader, at: float) -> None:
    """The bounds of the module docstring, from the fault at monotonic ``at``."""
    newest = _newest(group)  # nothing the old leader held is newer than this now
    written = list(load.dc1_writes.written)
    boundary = written[-1] if written else 0  # ids above it were written after the fault

    def a_new_leader_appends() -> bool:
        for member in group.members:
            if member is old or not member.alive():
                continue
            status = member.status(timeout=0.5)
            last = last_scn(member.buffer_dir)
            if status and status["role"] == "leader" and last is not None and last > newest:
                return True
        return False

    leader_s = _within(LEADER_BOUND_S, at, "a new leader appends", a_new_leader_appends)
    channel_s = _within(
        READER_BOUND_S,
        at,
        "dc2's channel applies dc1's new writes",
        lambda: any(r[0] % 2 and r[0] > boundary for r in rows(load.other.server, load.db)),
    )
    reader_s = _within(
        READER_BOUND_S,
        at,
        "the SDK reader reads dc1's new writes",
        lambda: any(i > boundary for i in list(reader.ids)),
    )
    print(f"new leader {leader_s:.2f}s, channel {channel_s:.2f}s, SDK reader {reader_s:.2f}s")


def _back(group: Group, old: Member, load: TwoWay, frozen: list[object]) -> None:
    """The old leader, back, stops by itself having appended nothing; restarted it follows."""
    assert old.proc is not None
    old.proc.wait(timeout=30 + 3 * SESSION_S)
    assert old.proc.returncode != 0
    assert "never appends again" in old.log.read_text()
    after = records(old.buffer_dir)
    assert after == frozen[: len(after)], "the old leader appended nothing once back"
    group.restart_dead()


def _nothing_lost(load: TwoWay, reader: Reader, old: Member) -> None:
    """The SDK reader got each of dc1's writes once, in order, and the usual checks after a
    fault hold (the members other than ``old`` hold everything)."""
    reader.wait_for(len(load.dc1_writes.written))
    assert reader.error is None
    assert reader.ids == load.dc1_writes.written, "the reader lost or repeated nothing"
    check_after_fault(load, [m for m in load.group.members if m is not old])


@pytest.fixture
def group(sandbox: SandboxDescription, dc1: ServerInfo, tmp_path: Path) -> Iterator[Group]:
    with started_group(sandbox, dc1, tmp_path, "sil", SESSION_S) as made:
        yield made


@pytest.mark.slow
@pytest.mark.parametrize("pause_s", [5, 40])
def test_a_paused_leader_is_replaced_and_readers_follow_within_the_session_timeout(
    sandbox: SandboxDescription, group: Group, dc2: ServerInfo, tmp_path: Path, pause_s: int
) -> None:
    reader = Reader(zk_url(sandbox, group))
    with two_way(sandbox, group, dc2, tmp_path, SESSION_S) as load:
        old = group.wait_leader(30)
        time.sleep(1.5)
        at = old.pause()
        frozen: list[object] = list(records(old.buffer_dir))
        _assert_failover(group, old, load, reader, at)
        time.sleep(max(0.0, at + pause_s - time.monotonic()))
        old.signal(signal.SIGCONT)
        _back(group, old, load, frozen)
        time.sleep(1.0)
    _nothing_lost(load, reader, old)


class HalfOpenLink:
    """A TCP forwarder whose one direction can go silent: bytes sent that way are read and
    dropped while every connection stays up (no FIN, no RST), as behind a half-open link."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.port = free_port()
        self.outbound_lost = threading.Event()  # upstream -> client dropped
        self.inbound_lost = threading.Event()  # client -> upstream dropped
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(self.upstream)
            except OSError:
                return
            self._sockets += [client, upstream]
            for a, b, lost in (
                (client, upstream, self.inbound_lost),
                (upstream, client, self.outbound_lost),
            ):
                threading.Thread(target=pipe, args=(a, b, lost), daemon=True).start()

    def close(self) -> None:
        for sock in [self._listener, *self._sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


@pytest.mark.slow
def test_a_leader_whose_outgoing_traffic_is_lost_is_replaced_and_readers_follow(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """Each member reaches ZooKeeper, and is reached by readers and followers, through links
    of its own; the leader's go half-open in its outgoing direction: ZooKeeper stops hearing
    it (its session expires) and readers get no answer on open connections."""
    fresh_database(dc1, "grp_db", GROUP_TABLE)
    group = Group.create(sandbox, dc1, tmp_path, 3, SESSION_S, name=f"hol{time.time_ns() % 10**9}")
    zk_host, zk_port = sandbox.zookeeper.connect.rsplit(":", 1)
    links: dict[str, tuple[HalfOpenLink, HalfOpenLink]] = {}
    for member in group.members:
        port = int(member.url.rsplit(":", 1)[1])
        to_zk, to_api = HalfOpenLink(zk_host, int(zk_port)), HalfOpenLink("127.0.0.1", port)
        links[member.member_id] = (to_zk, to_api)
        text = member.config.read_text()
        text = text.replace(
            f'zookeeper = "{sandbox.zookeeper.connect}"', f'zookeeper = "127.0.0.1:{to_zk.port}"'
        ).replace(
            f'advertise_url = "{member.url}"', f'advertise_url = "http://127.0.0.1:{to_api.port}"'
        )
        assert str(to_zk.port) in text and str(to_api.port) in text, text
        member.config.write_text(text)
    group.start()
    reader = Reader(zk_url(sandbox, group))
    try:
        with two_way(sandbox, group, dc2, tmp_path, SESSION_S) as load:
            old = group.wait_leader(30)
            time.sleep(1.5)
            to_zk, to_api = links[old.member_id]
            at = time.monotonic()
            to_zk.inbound_lost.set()  # the leader's requests and pings never reach ZooKeeper
            to_api.outbound_lost.set()  # its answers never reach readers and followers
            _assert_failover(group, old, load, reader, at)
            frozen_newest = last_scn(old.buffer_dir)
            time.sleep(2 * SESSION_S)
            assert last_scn(old.buffer_dir) == frozen_newest, "the cut-off leader appends nothing"
            frozen: list[object] = list(records(old.buffer_dir))
            to_zk.inbound_lost.clear()
            to_api.outbound_lost.clear()
            _back(group, old, load, frozen)
            time.sleep(1.0)
        _nothing_lost(load, reader, old)
    finally:
        group.stop()
        for pair in links.values():
            for link in pair:
                link.close()
