"""A new leader's catch-up (drc.replicator.catch_up; issue #27): it copies from the most
advanced member first, and waits a bounded time for members known to the group that have
not answered yet (the whole group restarted at once: the first one elected may be behind)."""

from __future__ import annotations

from dataclasses import dataclass, field

from drc.client import http
from drc.core.scn import SCN
from drc.replicator import catch_up
from drc.replicator.follower import Copied
from drc.replicator.group import GroupSettings, MemberInfo

SETTINGS = GroupSettings("zk:2181", "/g/dc1", "r1", "dc1", "http://r1")
WAIT_S = 5.0


def scn(pos: int) -> SCN:
    return SCN(1, 1, 1, pos)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Stop:
    """A stop event whose waits move the fake clock (and let the world change)."""

    def __init__(self, clock: Clock, on_wait: object = None) -> None:
        self.clock = clock
        self.waits = 0
        self.on_wait = on_wait

    def is_set(self) -> bool:
        return False

    def wait(self, seconds: float) -> bool:
        self.clock.now += seconds
        self.waits += 1
        if callable(self.on_wait):
            self.on_wait(self.waits)
        return False


@dataclass
class Buffer:
    last_scn: SCN | None

    @property
    def resume_scn(self) -> SCN | None:
        return self.last_scn


@dataclass
class Group:
    registered: list[str]
    known: set[str]
    settings: GroupSettings = SETTINGS

    def members(self) -> list[MemberInfo]:
        return [MemberInfo(m, f"http://{m}") for m in ["r1", *self.registered]]

    def known_members(self) -> frozenset[str]:
        return frozenset(self.known)


@dataclass
class Copier:
    """Members' buffers by URL (their last SCN; None: not answering yet)."""

    holds: dict[str, SCN | None]
    buffer: Buffer
    asked: list[str] = field(default_factory=list)

    def newest(self, url: str) -> SCN | None:
        if url not in self.holds:
            raise http.Transient(f"{url}: connection refused")
        return self.holds[url]

    def copy_once(self, url: str, wait_ms: int) -> Copied:
        self.asked.append(url)
        newest = self.holds[url]
        mine = self.buffer.last_scn or SCN.ZERO
        if newest is None or newest <= mine:
            return Copied(0, None, newest)
        self.buffer.last_scn = newest
        return Copied(newest.log_pos - mine.log_pos, None, newest)


def test_the_most_advanced_member_is_copied_first_and_the_rest_not_at_all() -> None:
    buffer = Buffer(scn(10))
    copier = Copier({"http://r2": scn(20), "http://r3": scn(30)}, buffer)
    group = Group(["r2", "r3"], {"r1", "r2", "r3"})
    clock = Clock()
    catch_up.catch_up(group, copier, buffer, clock, Stop(clock), WAIT_S)  # type: ignore[arg-type]
    assert buffer.last_scn == scn(30)
    assert copier.asked == ["http://r3", "http://r3"]  # until it had nothing more; r2 holds less


def test_a_known_member_not_back_yet_is_waited_for_and_copied_from() -> None:
    """The defect: elected before r3 registered, r1 captured again from its own older SCN."""
    buffer = Buffer(scn(10))
    copier = Copier({"http://r2": scn(12)}, buffer)
    group = Group(["r2"], {"r1", "r2", "r3"})

    def r3_comes_back(waits: int) -> None:
        if waits == 3:
            group.registered.append("r3")
        if waits == 5:  # registered first, its API answers a little later
            copier.holds["http://r3"] = scn(40)

    clock = Clock()
    stop = Stop(clock, r3_comes_back)
    catch_up.catch_up(group, copier, buffer, clock, stop, WAIT_S)  # type: ignore[arg-type]
    assert stop.waits == 5
    assert buffer.last_scn == scn(40)
    assert copier.asked[0] == "http://r3"


def test_a_known_member_that_stays_away_is_waited_for_a_bounded_time() -> None:
    buffer = Buffer(scn(10))
    copier = Copier({"http://r2": scn(25)}, buffer)
    group = Group(["r2"], {"r1", "r2", "r9"})
    clock = Clock()
    catch_up.catch_up(group, copier, buffer, clock, Stop(clock), WAIT_S)  # type: ignore[arg-type]
    assert WAIT_S <= clock.now < WAIT_S + 1
    assert buffer.last_scn == scn(25)


def test_no_wait_when_every_known_member_answers() -> None:
    buffer = Buffer(None)
    copier = Copier({"http://r2": None}, buffer)  # a member with an empty buffer
    group = Group(["r2"], {"r1", "r2"})
    clock = Clock()
    catch_up.catch_up(group, copier, buffer, clock, Stop(clock), WAIT_S)  # type: ignore[arg-type]
    assert clock.now == 0 and copier.asked == [] and buffer.last_scn is None


def test_no_wait_without_a_wait_a_member_elected_after_seeing_a_leader() -> None:
    """After a failover the members not answering are down: the new leader goes on."""
    buffer = Buffer(scn(10))
    copier = Copier({"http://r2": scn(25)}, buffer)
    group = Group(["r2"], {"r1", "r2", "r3"})
    clock = Clock()
    catch_up.catch_up(group, copier, buffer, clock, Stop(clock), 0.0)  # type: ignore[arg-type]
    assert clock.now == 0 and buffer.last_scn == scn(25)
