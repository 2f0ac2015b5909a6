"""One member of a datacenter's replicator group: follow the leader, or lead.

::

    connect to ZooKeeper (retry with a clear message) -> join (identity, datacenter, source)
      -> campaign ->  follower: copy the leader's records (drc.replicator.follower)
                      elected:  raise the term, catch up from the other members (the most
                                advanced first, waiting briefly for those known but not back:
                                drc.replicator.catch_up), capture the source under the lease
                                (drc.core.term)

A follower whose session is lost simply joins again with a new one. A leader whose lease ran
out because ZooKeeper did not answer stops capture (cleanly, before the lease ends) and resumes
when ZooKeeper confirms its session again. A leader whose session was lost, or that finds
another member leading, is *deposed*: it never appends again (the buffer's fence refuses) and
the process stops with an error saying why; its supervisor restarts it as a follower.

A leader that refuses the source (it diverged: drc.replicator.failover) records the refusal in
ZooKeeper before it stops, and a member elected after it whose buffer ends before that refusal
refuses too (drc.replicator.group.halt_refusal): the group never continues silently. A
follower serves pulls older than its buffer by asking the leader (back to source).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from drc.client import http
from drc.client.errors import ProtocolError
from drc.core.errors import BufferFullError, FencedError, RetriableError, SourceDivergedError
from drc.core.scn import SCN
from drc.core.term import check_append
from drc.eventbuffer.reader import Record
from drc.replicator.catch_up import catch_up
from drc.replicator.fencing import GroupBuffer
from drc.replicator.follower import Copier, ViaLeader
from drc.replicator.group import GroupSettings, Halt, LeaderInfo, ZkGroup, halt_refusal
from drc.replicator.replicator import Replicator

log = logging.getLogger(__name__)
FOLLOW_WAIT_MS = 500
RETRY_S = 0.3
STOP_MARGIN = 0.5  # of the lease: capture stops when less than this share of it is left
Backfill = Callable[[SCN, SCN, int, int], list[Record]]


class GroupMemberRunner:
    def __init__(
        self,
        settings: GroupSettings,
        replicator: Replicator,
        buffer: GroupBuffer,
        metastore: Any,
        token: str | None,
        source_server_ids: Callable[[], frozenset[int] | None],
        clock: Callable[[], float] = time.monotonic,
        verify: Any = True,
    ) -> None:
        self.settings = settings
        self._replicator = replicator
        self._buffer = buffer
        self._source_server_ids = source_server_ids
        self._clock = clock
        self._client = http.make_client(token, verify=verify)
        self._copier = Copier(buffer, metastore, self._client, token)
        self._via_leader = ViaLeader(self._client, token, self._leader_url)
        self.role = "joining"
        self.leader: LeaderInfo | None = None
        self._leader_moved = threading.Event()  # set on kazoo's thread by _group_changed
        self._group: ZkGroup | None = None
        # A leader answered (or this member led) since the process started: the group was
        # running, so the members it does not reach at an election are down, not restarting.
        self._saw_group_running = False
        buffer.fence = self._refuse  # until elected, nothing but the copier's checks

    def status(self) -> dict[str, Any]:
        """The group part of /v1/status (and the term header of pulls)."""
        group = self._group
        lease_ok = None
        role = self.role
        if group is not None and role == "leader":
            lease_ok = group.lease.valid(self._clock())
            role = role if lease_ok else "leader (paused)"  # never shown as leader unfenced
        leader = self.leader
        return {
            "role": role,
            "member_id": self.settings.member_id,
            "term": self._buffer.term_file.term,
            "leader": None if leader is None else {"member": leader.member_id, "url": leader.url},
            "lease_ok": lease_ok,
        }

    def back_to_source(self, local: Backfill) -> Backfill:
        """The pull API's back to source for this member: ``local`` (reading the source
        binlog) while it leads, else the leader's answer (drc.replicator.follower.ViaLeader)."""

        def backfill(after: SCN, oldest: SCN, max_records: int, max_bytes: int) -> list[Record]:
            reads = local if self.role == "leader" else self._via_leader
            return reads(after, oldest, max_records, max_bytes)

        return backfill

    def _leader_url(self) -> str | None:
        leader = self.leader
        return None if leader is None or leader.member_id == self._me else leader.url

    # -- the loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Until ``stop``; raises FencedError when deposed and GroupConfigError when this
        member must not join."""
        try:
            while not stop.is_set():
                group = ZkGroup(self.settings, self._clock)
                group.on_change = self._group_changed
                self._group = group
                try:
                    if not group.connect(stop):
                        return
                    group.join(self._server_ids())
                    group.campaign()
                    self._follow(group, stop)
                    if group.elected.is_set() and not stop.is_set():
                        self._lead(group, stop)
                finally:
                    self._buffer.fence = self._refuse
                    group.close()
                if not stop.is_set():
                    log.warning("ZooKeeper session lost; member %s joins again", self._me)
                    self.role = "joining"
        finally:
            self._client.close()

    @property
    def _me(self) -> str:
        return self.settings.member_id

    def _server_ids(self) -> frozenset[int] | None:
        try:
            return self._source_server_ids()
        except RetriableError as exc:
            log.warning("source not reachable to check its identity yet: %s", exc)
            return None

    @staticmethod
    def _refuse() -> None:
        raise FencedError("this member does not lead: only copied records may be appended")

    # -- follower ------------------------------------------------------------------------

    def _group_changed(self) -> None:
        """Elected, session ended or another leader (kazoo's thread): a copy waiting on the
        old leader, which may be silent (paused, hung, cut off), is hung up at once."""
        self._leader_moved.set()
        if self.role == "follower":
            self._copier.interrupt("the group's leader changed")

    def _follow(self, group: ZkGroup, stop: threading.Event) -> None:
        self.role = "follower"
        self._buffer.fence = lambda: None  # the copier checks each batch's term itself

        def moved() -> bool:
            return (
                stop.is_set()
                or group.elected.is_set()
                or group.lost.is_set()
                or self._leader_moved.is_set()
            )

        while not (stop.is_set() or group.elected.is_set() or group.lost.is_set()):
            # A change from here on (before the leader node is read) ends the copy below.
            self._leader_moved.clear()
            try:
                leader = group.leader()
            except Exception as exc:  # ZooKeeper unreachable: keep what we have, try again
                log.debug("cannot read the leader node: %s", exc)
                stop.wait(RETRY_S)
                continue
            self.leader = leader
            if leader is None or leader.member_id == self._me:
                stop.wait(RETRY_S)
                continue
            try:
                self._copier.copy_once(leader.url, FOLLOW_WAIT_MS, leader.term, moved)
                self._saw_group_running = True
            except (http.Transient, ProtocolError) as exc:
                log.debug("copy from leader %s: %s", leader.url, exc)
                stop.wait(RETRY_S)
            except (FencedError, BufferFullError) as exc:
                log.warning("not copying from %s: %s", leader.url, exc)
                stop.wait(RETRY_S)

    # -- leader --------------------------------------------------------------------------

    def _lead(self, group: ZkGroup, stop: threading.Event) -> None:
        term = group.take_office()
        self._buffer.term_file.raise_to(term)
        self._buffer.fence = lambda: self._fence(group, term)
        self.role = "leader"
        self.leader = LeaderInfo(self._me, self.settings.advertise_url, term)
        log.info("member %s leads the group with term %d", self._me, term)
        self._catch_up(group, stop)
        self._check_halt(group)
        server_ids = self._server_ids()
        if server_ids:
            group.check_source(server_ids)
            group.record_source(server_ids)
        try:
            while not stop.is_set():
                self._capture_while_safe(group, stop)
                if stop.is_set():
                    return
                self._pause_until_safe(group, term, stop)
        except SourceDivergedError as exc:
            self._halt(group, term, exc)
            raise

    def _pause_until_safe(self, group: ZkGroup, term: int, stop: threading.Event) -> None:
        """Capture stopped because the lease got short: wait until ZooKeeper confirms the
        session again, or stop for good (FencedError) when it is lost."""
        if group.lease.revoked is None:
            log.warning(
                "member %s (term %d) stopped capture: %s; it resumes when ZooKeeper "
                "confirms its session",
                self._me,
                term,
                group.lease.why_not(self._clock())
                or "ZooKeeper has not confirmed its session lately and the lease is ending",
            )
            self.role = "leader (paused)"
        while not (stop.is_set() or group.lease.revoked or self._lease_left(group) > 0):
            stop.wait(0.05)
        why = group.lease.revoked
        if why is not None:
            self.role = "deposed"
            self._buffer.fence = self._refuse
            message = (
                f"member {self._me} led term {term} but {why}; another member may lead "
                "now, so it stops and never appends again. Restart it to rejoin as a follower"
            )
            log.error(message)
            raise FencedError(message)
        if self._buffer.uncommitted:  # appended when the lease ran out: drop, read again
            self._buffer.reopen()
        self.role = "leader"

    def _check_halt(self, group: ZkGroup) -> None:
        """SourceDivergedError when an earlier leader refused the source at an SCN beyond
        this buffer (drc.replicator.group.halt_refusal)."""
        why = halt_refusal(group.halt(), self._buffer.last_scn, self.settings.path)
        if why is not None:
            self.role = "refused"
            message = f"member {self._me} will not read the source: {why}"
            log.error(message)
            raise SourceDivergedError(message)

    def _halt(self, group: ZkGroup, term: int, exc: SourceDivergedError) -> None:
        """Keep the refusal in ZooKeeper before giving up the lead, so that a member elected
        next refuses too even if its buffer is behind this one (a diverged server may still
        contain its older position)."""
        self.role = "refused"
        self._buffer.fence = self._refuse
        try:
            group.record_halt(Halt(self._me, term, self._buffer.last_scn, str(exc)))
        except Exception as zk_exc:  # ZooKeeper unreachable: the next leaders still check
            log.error("could not record the source refusal in ZooKeeper: %s", zk_exc)
        log.error(
            "member %s (term %d) refused the source and stops leading: %s", self._me, term, exc
        )

    def _fence(self, group: ZkGroup, term: int) -> None:
        why = group.lease.why_not(self._clock())
        if why is not None:
            raise FencedError(f"member {self._me} (term {term}) may not append: {why}")
        check_append(self._buffer.term_file.term, term)

    def _lease_left(self, group: ZkGroup) -> float:
        """Seconds of lease left, beyond the stop margin (<= 0: stop capture now)."""
        lease = group.lease
        margin = STOP_MARGIN * lease.fraction * lease.session_timeout_s
        return lease.until - self._clock() - margin

    def _capture_while_safe(self, group: ZkGroup, stop: threading.Event) -> None:
        """Run capture until ``stop`` or until the lease gets short; a watcher stops it
        while enough lease is left for its last commit."""
        capture_stop = threading.Event()

        def watch() -> None:
            while not (stop.is_set() or capture_stop.is_set()):
                if self._lease_left(group) <= 0:
                    break
                time.sleep(0.02)
            capture_stop.set()

        watcher = threading.Thread(target=watch, name="drc-lease-watch", daemon=True)
        watcher.start()
        try:
            self._replicator.run(capture_stop)
        except FencedError as exc:
            log.warning("capture refused by the fence: %s", exc)
        finally:
            capture_stop.set()
            watcher.join()

    def _catch_up(self, group: ZkGroup, stop: threading.Event) -> None:
        """From the other members (drc.replicator.catch_up); waiting for the known ones that
        do not answer only when this process never saw the group running (it restarted,
        perhaps with the whole group): after a leader's failure they are down."""
        wait_s = 0.0 if self._saw_group_running else self.settings.catch_up_wait_s
        self._saw_group_running = True
        catch_up(group, self._copier, self._buffer, self._clock, stop, wait_s)
