"""A replicator group's ZooKeeper side: membership, election, terms and the leader's lease.

Layout under the group's path (``[group] path`` + ``/`` + datacenter)::

    group       persistent  {"datacenter": name}: a member of another datacenter is refused
    source      persistent  {"server_ids": [n, ...]}: the source servers (primary, replicas) the
                            leaders found answering; a member none of whose servers is among
                            them is refused
    term        persistent  the term counter, raised by one (compare-and-set) at each election
    halt        persistent  {"member", "term", "scn", "message"}: a leader refused the source
                            (it diverged) at that SCN; a later leader whose buffer ends before
                            it refuses too (see :func:`halt_refusal`)
    election/   kazoo's Election recipe (ephemeral sequential nodes, lowest leads)
    leader      ephemeral   {"member": id, "url": advertised API URL, "term": n}
    members/ID  ephemeral   {"member": id, "url": advertised API URL}: one live member per id
    known/ID    persistent  the same, for every member that ever joined: a new leader waits a
                            little for those not registered (drc.replicator.member); delete
                            the node of a member removed for good

The leader's session is confirmed by reading its own ``leader`` node every sixth of the
session timeout; each answer renews the lease (drc.core.term.Lease) from the moment the request
was sent. A lost session revokes the lease for good.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from drc.client import discovery
from drc.core.errors import GroupConfigError, MalformedScnError, RetriableError
from drc.core.retry import Backoff, Policy, Retrying, Stopped, retry
from drc.core.scn import SCN
from drc.core.term import Lease, next_term

log = logging.getLogger(__name__)
CONFIRMS_PER_TIMEOUT = 6


@dataclass(frozen=True)
class GroupSettings:
    hosts: str
    path: str  # the group's own path (datacenter included)
    member_id: str
    datacenter: str
    advertise_url: str
    session_timeout_s: float = 6.0
    connect_retry_s: float = 2.0
    catch_up_wait_s: float = 10.0  # a new leader waits this long at most for known members


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    url: str


@dataclass(frozen=True)
class LeaderInfo:
    member_id: str
    url: str
    term: int


class ZkUnavailable(RetriableError):
    """ZooKeeper could not be reached or did not answer in time."""


def source_mismatch(mine: frozenset[int] | None, recorded: frozenset[int]) -> str | None:
    """Why a member whose configured source servers have ``mine`` server_ids (None: none
    answered) does not read the group's source (``recorded``, empty: not known yet); None if
    it does. One server in common suffices: a list may add a new replica or drop an old one."""
    if not mine or not recorded or mine & recorded:
        return None
    return f"servers have server_id(s) {sorted(mine)}"


@dataclass(frozen=True)
class Halt:
    """A leader's refusal of the source, kept for the leaders after it."""

    member_id: str
    term: int
    scn: SCN | None  # the refusing leader's last SCN; None: unknown (every leader refuses)
    message: str


def halt_refusal(halt: Halt | None, last: SCN | None, path: str) -> str | None:
    """Why a new leader whose buffer ends at ``last`` must not read the source after ``halt``
    (None: it may, and capture checks the source against its own position, which then
    includes every record the refusing leader held). A leader behind the refusal would check
    an older position, which a diverged server may still contain, and continue silently."""
    if halt is None or (last is not None and halt.scn is not None and last >= halt.scn):
        return None
    return (
        f"member {halt.member_id} (term {halt.term}) refused the group's source at SCN "
        f"{halt.scn}: {halt.message.rstrip('.')}. This member's buffer ends at {last}, before "
        "that SCN, so it cannot check the source against everything the group gave out. "
        f"Start member {halt.member_id} (it holds those records; this member copies them when "
        "it leads), or, after rebuilding the group's buffers on purpose, delete the ZooKeeper node "
        f"{path}/halt"
    )


def _dump(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True).encode()


_load = discovery.load


def _create(client: KazooClient, path: str, data: bytes) -> None:
    """Create the persistent node ``path`` unless it exists (its data then stays)."""
    try:
        client.create(path, data)
    except NodeExistsError:
        pass


def _put(client: KazooClient, path: str, data: bytes) -> None:
    """Set the persistent node ``path`` to ``data``, creating it if need be."""
    try:
        client.create(path, data)
    except NodeExistsError:
        client.set(path, data)


def connect(client: KazooClient, settings: GroupSettings, stop: threading.Event) -> bool:
    """Start ``client``'s session, retrying at a steady pace with a clear message while
    ZooKeeper is unreachable; False if ``stop`` came first."""
    every = Backoff(settings.connect_retry_s, settings.connect_retry_s)  # steady, no growth
    policy = Policy(every, retriable=(KazooTimeoutError, KazooException, OSError))

    def unreachable(retrying: Retrying) -> None:
        log.error(
            "ZooKeeper %s unreachable (%s); member %s retries in %.0fs: check that "
            "[group] zookeeper names this datacenter's ensemble and that it runs",
            settings.hosts,
            type(retrying.error).__name__,
            settings.member_id,
            retrying.delay,
        )

    if stop.is_set():
        return False
    try:
        start = partial(client.start, timeout=max(settings.session_timeout_s, 2.0))
        retry(start, policy, sleep=stop.wait, stopped=stop.is_set, on_retry=unreachable)
    except Stopped:
        return False
    return True


class ZkGroup:
    """One ZooKeeper session of one member. A new session (after a loss) is a new ZkGroup."""

    def __init__(self, settings: GroupSettings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.lease = Lease(settings.session_timeout_s)
        self.lost = threading.Event()  # the session expired (or was closed)
        self.elected = threading.Event()
        self.term = 0
        self._clock = clock
        self._release = threading.Event()
        self._client = KazooClient(
            hosts=settings.hosts,
            timeout=settings.session_timeout_s,
            # Reconnect soon after ZooKeeper is back, while the session still holds.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=1.5, max_delay=1.0),
        )
        self._client.add_listener(self._state_changed)
        self._election_thread: threading.Thread | None = None
        self._keepalive: threading.Thread | None = None
        # Called (on kazoo's threads: it must not block) when this member is elected, its
        # session ends, or the leader node changes: a follower hangs up its read of the leader.
        self.on_change: Callable[[], None] = lambda: None

    # -- session -------------------------------------------------------------------------

    def connect(self, stop: threading.Event) -> bool:
        """Start the session (:func:`connect`); False if ``stop`` came first."""
        return connect(self._client, self.settings, stop)

    def _state_changed(self, state: str) -> None:
        # Called on kazoo's thread: flags only, never a blocking call.
        if state == KazooState.LOST:
            log.warning("ZooKeeper session of member %s ended", self.settings.member_id)
            self.lost.set()
            self.lease.revoke("its ZooKeeper session expired (or was closed)")
            self._release.set()
            self._changed()
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection lost; the session holds until it times out")
        else:
            log.info("ZooKeeper connected")

    def close(self) -> None:
        self._release.set()
        election = getattr(self, "_election", None)
        if election is not None:
            election.cancel()
        try:
            self._client.stop()
            self._client.close()
        except KazooException:
            pass
        for thread in (self._election_thread, self._keepalive):
            if thread is not None:
                thread.join(timeout=5)

    @property
    def _wait_s(self) -> float:
        """How long a read waits for ZooKeeper before giving up (and being tried again)."""
        return self.settings.session_timeout_s / 2

    @property
    def session_id(self) -> int | None:
        client_id = self._client.client_id
        return None if client_id is None else int(client_id[0])

    # -- membership ----------------------------------------------------------------------

    def join(self, source_server_ids: frozenset[int] | None) -> None:
        """Check this member belongs here and register it; GroupConfigError if not."""
        s = self.settings
        c = self._client
        c.ensure_path(f"{s.path}/members")
        c.ensure_path(f"{s.path}/election")
        c.ensure_path(f"{s.path}/known")
        _create(c, f"{s.path}/group", _dump({"datacenter": s.datacenter}))
        group = _load(c.get(f"{s.path}/group")[0])
        if group.get("datacenter") != s.datacenter:
            raise GroupConfigError(
                f"ZooKeeper path {s.path} belongs to datacenter {group.get('datacenter')!r}, "
                f"not {s.datacenter!r}: give each datacenter its own [group] path"
            )
        self.check_source(source_server_ids)
        self._register()
        _put(
            c,
            f"{s.path}/known/{s.member_id}",
            _dump({"member": s.member_id, "url": s.advertise_url}),
        )

    def check_source(self, server_ids: frozenset[int] | None) -> None:
        """GroupConfigError if none of this member's source servers is one the group reads
        (another datacenter's servers, say). ``server_ids``: those of the configured servers
        that answered; None: none did, checked again at election."""
        recorded = self.source_server_ids()
        why = source_mismatch(server_ids, recorded)
        if why is None:
            return
        raise GroupConfigError(
            f"member {self.settings.member_id}'s [source] {why}, but group "
            f"{self.settings.path} reads server_id(s) {sorted(recorded)}: is this member "
            "pointed at another datacenter's source? Every member of a group must read the "
            "same source servers (a primary and its replicas)"
        )

    def source_server_ids(self) -> frozenset[int]:
        """The server_ids of the group's source servers, as its leaders recorded them."""
        try:
            raw, _ = self._client.get(f"{self.settings.path}/source")
        except NoNodeError:
            return frozenset()
        data = _load(raw)
        found = data.get("server_ids", [data.get("server_id")])  # server_id: older groups
        if not isinstance(found, list):
            return frozenset()
        return frozenset(v for v in found if isinstance(v, int))

    def record_source(self, server_ids: frozenset[int]) -> None:
        """Add ``server_ids`` (a leader's answering source servers) to the group's."""
        data = _dump({"server_ids": sorted(self.source_server_ids() | server_ids)})
        _put(self._client, f"{self.settings.path}/source", data)

    def record_halt(self, halt: Halt) -> None:
        scn = None if halt.scn is None else str(halt.scn)
        data = {"member": halt.member_id, "term": halt.term, "scn": scn, "message": halt.message}
        _put(self._client, f"{self.settings.path}/halt", _dump(data))

    def halt(self) -> Halt | None:
        """The group's last source refusal (None: there was none). Unreadable content counts
        as a refusal at an unknown SCN: only an operator can clear it."""
        try:
            raw, _ = self._client.get(f"{self.settings.path}/halt")
        except NoNodeError:
            return None
        data = _load(raw)
        try:
            scn = SCN.parse(data["scn"]) if data.get("scn") else None
            return Halt(str(data["member"]), int(data["term"]), scn, str(data["message"]))
        except (KeyError, TypeError, ValueError, MalformedScnError):
            return Halt("?", 0, None, f"(unreadable halt node: {raw[:200]!r})")

    def _register(self) -> None:
        """Our ephemeral member node. One left by our own killed process goes away when its
        session expires; another live member with our id is refused."""
        s = self.settings
        path = f"{s.path}/members/{s.member_id}"
        data = _dump({"member": s.member_id, "url": s.advertise_url})
        deadline = self._clock() + s.session_timeout_s * 2 + 2
        while True:
            try:
                self._client.create(path, data, ephemeral=True)
                return
            except NodeExistsError:
                pass
            try:
                raw, stat = self._client.get(path)
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.session_id:
                return
            if self._clock() > deadline:
                raise GroupConfigError(
                    f"another live process is member {s.member_id!r} of group {s.path} "
                    f"({_load(raw).get('url')}): give each member its own [group] member_id"
                )
            log.info("member node %s still held by an older session; waiting for it", path)
            time.sleep(0.5)

    def members(self) -> list[MemberInfo]:
        found = discovery.read_members(self._client, self.settings.path, self._wait_s)
        return [MemberInfo(member, url) for member, url in found.items()]

    def known_members(self) -> frozenset[str]:
        """The ids of every member that ever joined the group (``known/``)."""
        try:
            found = self._client.get_children_async(f"{self.settings.path}/known")
            return frozenset(found.get(timeout=self._wait_s))
        except NoNodeError:
            return frozenset()

    def leader(self) -> LeaderInfo | None:
        data = discovery.read_leader(self._client, self.settings.path, self._wait_s)
        if data is None:
            return None
        member, url, term = data.get("member"), data.get("url"), data.get("term")
        if isinstance(member, str) and isinstance(url, str) and isinstance(term, int):
            return LeaderInfo(member, url, term)
        return None

    # -- election ------------------------------------------------------------------------

    def _changed(self) -> None:
        try:
            self.on_change()
        except Exception:  # never into kazoo's threads
            log.exception("group change handler of member %s failed", self.settings.member_id)

    def campaign(self) -> None:
        """Enter the election in the background; ``elected`` is set when this member wins.
        The leader node is watched from now on (:attr:`on_change`)."""
        s = self.settings
        changed = discovery.DataChanges(self._changed, self._release.is_set, "group change")
        self._client.DataWatch(f"{s.path}/leader", changed)  # until this session is released
        self._election = self._client.Election(f"{s.path}/election", s.member_id)

        def run() -> None:
            try:
                self._election.run(self._in_office)
            except Exception as exc:  # session lost mid-election: the runner starts again
                if not self._release.is_set():
                    log.warning("election of %s ended: %s", s.member_id, exc)

        self._election_thread = threading.Thread(target=run, name="drc-election", daemon=True)
        self._election_thread.start()

    def _in_office(self) -> None:
        log.info("member %s won the election", self.settings.member_id)
        self.elected.set()
        self._changed()
        self._release.wait()  # returning gives up the election lock

    def take_office(self) -> int:
        """Raise the term, publish ourselves as leader and start confirming the lease."""
        s = self.settings
        c = self._client
        path = f"{s.path}/term"
        _create(c, path, b"0")
        while True:
            raw, stat = c.get(path)
            term = next_term(int(raw or b"0"))
            try:
                c.set(path, str(term).encode(), version=stat.version)
                break
            except BadVersionError:
                continue
        leader = f"{s.path}/leader"
        data = _dump({"member": s.member_id, "url": s.advertise_url, "term": term})
        try:
            c.delete(leader)  # a stale node: we hold the election lock, no one else leads
        except NoNodeError:
            pass
        c.create(leader, data, ephemeral=True)
        self.term = term
        self.confirm()
        self._keepalive = threading.Thread(target=self._confirming, name="drc-lease", daemon=True)
        self._keepalive.start()
        return term

    def confirm(self) -> None:
        """One confirmation: our leader node, still ours, read back from ZooKeeper."""
        sent = self._clock()
        budget = self.settings.session_timeout_s * self.lease.fraction
        try:
            raw, stat = self._client.get_async(f"{self.settings.path}/leader").get(timeout=budget)
        except NoNodeError:
            self.lease.revoke("its leader node is gone: its ZooKeeper session expired")
            return
        except Exception:  # no answer in time, connection lost: the lease just runs out
            return
        if stat.ephemeralOwner != self.session_id or _load(raw).get("term") != self.term:
            self.lease.revoke(f"another member leads now ({_load(raw)})")
            return
        self.lease.confirmed(sent)

    def _confirming(self) -> None:
        every = self.settings.session_timeout_s / CONFIRMS_PER_TIMEOUT
        while not self._release.wait(every):
            self.confirm()
