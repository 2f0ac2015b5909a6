"""The replicator group's pure rules: which source servers a member may read, and when a new
leader must refuse a source an earlier leader refused (drc.replicator.group); and how a member
keeps trying to reach ZooKeeper (a stand-in client, no server)."""

from __future__ import annotations

import threading

import pytest
from kazoo.handlers.threading import KazooTimeoutError

from drc.core.scn import SCN
from drc.replicator.group import GroupSettings, Halt, connect, halt_refusal, source_mismatch

HALTED_AT = SCN(3, 1, 2, 900)


def test_a_member_sharing_one_source_server_with_the_group_may_join() -> None:
    assert source_mismatch(frozenset({1, 101}), frozenset({1, 101})) is None
    assert source_mismatch(frozenset({101, 102}), frozenset({1, 101})) is None  # a new replica


def test_a_member_whose_servers_are_all_unknown_to_the_group_is_refused() -> None:
    why = source_mismatch(frozenset({2, 102}), frozenset({1, 101}))
    assert why is not None and "[2, 102]" in why


def test_nothing_to_compare_is_no_refusal() -> None:
    assert source_mismatch(None, frozenset({1})) is None  # no configured server answered
    assert source_mismatch(frozenset({2}), frozenset()) is None  # a new group


def test_no_halt_or_a_buffer_at_the_refusal_may_read_the_source() -> None:
    halt = Halt("r1", 4, HALTED_AT, "source x lacks transactions")
    assert halt_refusal(None, None, "/g/dc1") is None
    assert halt_refusal(halt, HALTED_AT, "/g/dc1") is None  # capture checks the same position
    assert halt_refusal(halt, SCN(4, 101, 1, 10), "/g/dc1") is None


def test_a_leader_behind_the_refusal_refuses_and_says_how_to_clear_it() -> None:
    halt = Halt("r1", 4, HALTED_AT, "source x lacks transactions: buffer position 1-1-20.")
    for behind in (None, SCN(3, 1, 2, 100)):
        why = halt_refusal(halt, behind, "/g/dc1")
        assert why is not None
        assert "member r1 (term 4)" in why and str(HALTED_AT) in why
        assert "buffer position 1-1-20" in why and "/g/dc1/halt" in why


def test_a_halt_at_an_unknown_scn_refuses_every_leader() -> None:
    assert halt_refusal(Halt("?", 0, None, "unreadable"), SCN(9, 1, 9, 9), "/g") is not None


class Refusing:
    """A KazooClient stand-in whose start fails ``failures`` times, then connects."""

    def __init__(self, failures: int, stop: threading.Event | None = None) -> None:
        self.failures, self.starts, self.stop = failures, 0, stop

    def start(self, timeout: float) -> None:
        self.starts += 1
        if self.starts > self.failures:
            return
        if self.stop is not None:
            self.stop.set()
        raise KazooTimeoutError("connection time-out")


SETTINGS = GroupSettings("zk:2181", "/g/dc1", "r1", "dc1", "http://r1", connect_retry_s=0.01)


def test_connect_retries_at_a_steady_pace_naming_zookeeper_until_it_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = Refusing(failures=3)
    assert connect(client, SETTINGS, threading.Event())
    assert client.starts == 4
    unreachable = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 3
    assert (
        "ZooKeeper zk:2181 unreachable (KazooTimeoutError); member r1 retries in 0s"
        in (unreachable[0])
    )


def test_connect_gives_up_when_stopped_while_zookeeper_is_unreachable() -> None:
    stop = threading.Event()
    client = Refusing(failures=10, stop=stop)
    assert not connect(client, SETTINGS, stop)
    assert client.starts == 1
    assert not connect(Refusing(failures=0), SETTINGS, stop)
