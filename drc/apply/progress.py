"""A channel's state and lag, for status, metrics and health. Pure: times are handed in.

States and what moves between them::

    starting ─checkpoint read─> connecting ─the remote answers─> running
    connecting, running ─a URL fails, or no answer for stale_after_s─> disconnected
    disconnected ─the remote answers─> running
    any ─the target is down or read-only─> waiting ─a target commit─> running
                                                   ─the checkpoint read─> connecting
    any ─a fatal error─> stopped (final; the error is kept)

Lag (drc.core.heartbeat): now - source time of the newest change the target has applied.
``taken`` notes a transaction's source time as the channel takes it into its open group;
``applied`` makes everything taken count once the group committed (or had nothing to write).
Lag is computed when asked, so it keeps growing while nothing arrives: a remote that is down,
a stopped channel, an apply that is behind. It is None until the first transaction or
heartbeat after a start.

The same two points move the source GTIDs the channel has passed (drc.apply.gtids: ``taken``
with the transaction's GTID position, ``applied`` after the commit), which read-your-writes
waits (GET /v1/wait) are answered from.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from drc.apply.gtids import AppliedGtids
from drc.core.heartbeat import lag_seconds

STARTING = "starting"
CONNECTING = "connecting"
RUNNING = "running"
DISCONNECTED = "disconnected"
WAITING = "waiting"  # for the target: down, read-only, refusing connections
STOPPED = "stopped"
STATES = (STARTING, CONNECTING, RUNNING, DISCONNECTED, WAITING, STOPPED)

STALE_AFTER_S = 10.0  # no answer at all for this long (beyond the long poll) is a lost remote


@dataclass(frozen=True, slots=True)
class Snapshot:
    state: str
    error: str | None
    applied_ms: int | None  # source time of the newest change applied
    lag_seconds: float | None


class ChannelProgress:
    """Written by the channel's thread, read by any (each method holds the lock briefly)."""

    def __init__(
        self, stale_after_s: float = STALE_AFTER_S, gtids: AppliedGtids | None = None
    ) -> None:
        self._lock = threading.Lock()
        self.gtids = gtids or AppliedGtids()  # the source GTIDs passed (read-your-writes waits)
        self._stale_after_s = stale_after_s
        self._state = STARTING
        self._error: str | None = None
        self._applied_ms: int | None = None
        self._taken_ms: int | None = None
        self._last_answer: float | None = None

    def _move(self, state: str, error: str | None = None) -> None:
        if self._state != STOPPED:
            self._state, self._error = state, error

    def started(self, now: float) -> None:
        """The checkpoint was read; the stream is asked for next."""
        with self._lock:
            self._last_answer = now
            self._move(CONNECTING)

    def answered(self, now: float) -> None:
        """The remote answered a pull (a batch, maybe empty)."""
        with self._lock:
            self._last_answer = now
            if self._state != WAITING:
                self._move(RUNNING)

    def unanswered(self, now: float, error: str | None) -> None:
        """No batch this time: ``error`` names what failed (None: merely no answer yet)."""
        with self._lock:
            if self._state == WAITING:
                return
            silent = self._last_answer is None or now - self._last_answer >= self._stale_after_s
            if error is not None or silent:
                self._move(DISCONNECTED, error or f"no answer for {self._stale_after_s:.0f}s")

    def target_waiting(self, error: str) -> None:
        with self._lock:
            self._move(WAITING, error)

    def target_ok(self) -> None:
        """A target transaction went through: no longer waiting for the target."""
        with self._lock:
            if self._state == WAITING:
                self._move(RUNNING)

    def stopped(self, error: str) -> None:
        with self._lock:
            self._move(STOPPED, error)

    def resumed(self, now: float) -> None:
        """An operator continued a stopped channel (drc channel resume/skip/rewind)."""
        with self._lock:
            self._state, self._error, self._last_answer = CONNECTING, None, now

    def taken(
        self, source_ms: int, gtid: str | None = None, gtid_position: str | None = None
    ) -> None:
        """A transaction taken into the open group: its source time and GTID position."""
        self.gtids.taken(gtid, gtid_position)
        with self._lock:
            if self._taken_ms is None or source_ms > self._taken_ms:
                self._taken_ms = source_ms

    def applied(self) -> None:
        """Everything taken so far is on the target (committed, or nothing to write)."""
        with self._lock:
            taken = self._taken_ms
            if taken is not None and (self._applied_ms is None or taken > self._applied_ms):
                self._applied_ms = taken
        self.gtids.applied()  # outside the lock: it tells waiters

    def snapshot(self, now_s: float) -> Snapshot:
        """State, error and lag as of wall-clock time ``now_s``."""
        with self._lock:
            applied = self._applied_ms
            return Snapshot(self._state, self._error, applied, lag_seconds(now_s, applied))
