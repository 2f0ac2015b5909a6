"""Capture waiting out a full EventBuffer filesystem instead of stopping.

A write the filesystem has no room for raises BufferFullError and leaves the buffer's writer
usable, its bytes pending (drc.eventbuffer.writer). Capture then pauses where it is: the error
goes to the log (once, then every minute) and to the capture stats' ``last_error`` (status,
metrics), the same call is made again every few seconds, and capture continues by itself once
space is freed. The binlog reader meanwhile waits on the hand-off queue; if the source drops
the idle dump connection, capture reconnects after the wait as after any interruption.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from drc.core.errors import BufferFullError
from drc.core.retry import Stopped

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_S = 2.0  # how soon freed space is used
LOG_EVERY_S = 60.0


class RoomWait:
    """Makes buffer calls, waiting while the buffer's filesystem is full. ``stats``: the
    capture's (its ``last_error`` and ``disk_full_waits``)."""

    def __init__(self, stats: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._stats = stats
        self._clock = clock
        self._stop = threading.Event()

    def watch(self, stop: threading.Event) -> None:
        """The capture's stop event: a wait ends with Stopped once it is set."""
        self._stop = stop

    def call(self, step: Callable[[], T]) -> T:
        since: float | None = None
        logged = 0.0
        while True:
            try:
                result = step()
            except BufferFullError as exc:
                now = self._clock()
                if since is None:
                    since = now
                self._stats.disk_full_waits += 1
                self._stats.last_error = f"capture paused: {exc}"
                if now - logged >= LOG_EVERY_S:
                    logged = now
                    log.error("capture paused for %.0fs: %s", now - since, exc)
                if self._stop.wait(RETRY_S):
                    raise Stopped() from exc
                continue
            if since is not None:
                self._stats.last_error = None
                log.warning("capture resumed: the EventBuffer had room again after %.1fs",
                            self._clock() - since)  # fmt: skip
            return result
