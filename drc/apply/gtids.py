"""Which source GTIDs an apply channel has passed: what a read-your-writes wait asks
(``GET /v1/wait``, drc.apply.gtid_wait).

A channel *passes* a source transaction once the target transaction holding it committed, or
once it had nothing to write here (filtered out, a heartbeat). Every captured transaction
carries the source's GTID position after it (drc.core.gtid: ``gtid``, and ``gtid_position``
when the source has several domains), and within a MariaDB domain sequence numbers only grow;
so the position of the newest transaction passed covers every earlier GTID of each domain, also
those of transactions the channel never received (tables it does not replicate, DRC-originated
ones the pull API leaves out). Only the newest taken position is kept, and parsed once per
commit, not per transaction.

    taken(gtid, gtid_position)   the channel took a transaction (its thread)
    applied()                    what it took is on the target: the newest taken position
                                 counts; the listeners are told (in the channel's thread)
    passed(gtid)                 from any thread

After a restart the channel knows nothing until it passes its first transaction after its
checkpoint (the checkpoint row keeps an SCN, not GTIDs); that transaction's position covers
everything the checkpoint covers, so a wait for an older GTID is answered then, at the latest
a heartbeat interval after the remote answers. The same holds after a bulk catch-up or
snapshot moved the checkpoint. A rewind keeps what was passed: those transactions were applied
once already.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from drc.core.errors import DrcError
from drc.core.gtid import Gtid, GtidPosition, covers, merged, stored_position

log = logging.getLogger(__name__)

REMEMBER = 1024  # commits per domain whose time is kept, to say when a GTID was applied


@dataclass(frozen=True, slots=True)
class Passed:
    """``gtid`` is passed: the channel's position in its domain is ``position``; ``at`` is the
    wall-clock time of the commit that passed it, None when that was before what is remembered
    (the first commit after a start, or more than :data:`REMEMBER` commits ago)."""

    gtid: Gtid
    position: Gtid
    at: float | None


class AppliedGtids:
    """Written by the channel's thread, read by any (each method holds the lock briefly)."""

    def __init__(
        self, wall_clock: Callable[[], float] = time.time, remember: int = REMEMBER
    ) -> None:
        self._lock = threading.Lock()
        self._wall_clock = wall_clock
        self._remember = remember
        self._taken: tuple[str | None, str | None] | None = None
        self._position: dict[int, Gtid] = {}
        self._marks: dict[int, deque[tuple[int, float]]] = {}  # domain -> (seq_no, at), rising
        self._listeners: list[Callable[[], None]] = []

    def taken(self, gtid: str | None, gtid_position: str | None) -> None:
        if gtid is None and gtid_position is None:
            return  # a record written before DRC kept GTIDs: says nothing
        with self._lock:
            self._taken = (gtid, gtid_position)

    def applied(self) -> None:
        """Everything taken so far is on the target: its position counts; tell the listeners."""
        with self._lock:
            taken, self._taken = self._taken, None
            if taken is not None:
                self._advance(taken)
            listeners = list(self._listeners)
        if taken is None:
            return
        for listener in listeners:
            try:
                listener()
            except Exception:  # a listener must never stop the channel
                log.exception("a GTID listener failed")

    def _advance(self, taken: tuple[str | None, str | None]) -> None:
        try:
            newer = stored_position(*taken)
        except DrcError as exc:  # not expected from captured records: tell, do not stop apply
            log.warning("a transaction's GTID position is not readable: %s", exc)
            return
        if not newer:
            return
        now = self._wall_clock()
        before = self._position
        self._position = merged(before, newer)
        for domain, gtid in self._position.items():
            if domain in before and before[domain].seq_no >= gtid.seq_no:
                continue
            marks = self._marks.setdefault(domain, deque(maxlen=self._remember))
            marks.append((gtid.seq_no, now))

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (no arguments, in the channel's thread) after each commit that
        moved the position; it must be quick and never block."""
        with self._lock:
            self._listeners.append(listener)

    def position(self) -> dict[int, Gtid]:
        """Per domain, the newest GTID passed ({} until the first commit after a start)."""
        with self._lock:
            return dict(self._position)

    def passed(self, gtid: Gtid) -> Passed | None:
        with self._lock:
            if not covers(self._position, gtid):
                return None
            marks = self._marks[gtid.domain]
            index = bisect.bisect_left(marks, gtid.seq_no, key=lambda mark: mark[0])
            at = None if index == 0 else marks[index][1]
            return Passed(gtid, self._position[gtid.domain], at)


def domains(position: GtidPosition) -> str:
    """The domains of a position, for messages: '1, 2' or 'none yet'."""
    return ", ".join(str(d) for d in sorted(position)) or "none yet"
