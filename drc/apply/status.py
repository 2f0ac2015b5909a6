"""What a channel shows: its counters (drc.apply.stats), its state and lag (drc.apply.progress)
and its stops, for status, metrics, health and progress lines. Read from any thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from drc.apply.gtids import AppliedGtids
from drc.apply.progress import STALE_AFTER_S, STOPPED, ChannelProgress
from drc.apply.stats import ApplyStats
from drc.core.errors import DrcError
from drc.core.gtid import format_position

log = logging.getLogger(__name__)


class ChannelStatus:
    """``wait_ms``: the channel's long poll, which may rightly last that long unanswered."""

    def __init__(
        self, name: str, wait_ms: int = 0, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self.name = name
        self.stats = ApplyStats()
        self.progress = ChannelProgress(STALE_AFTER_S + wait_ms / 1000, AppliedGtids(wall_clock))
        self._wall_clock = wall_clock

    def report(self, origin: str, *, paused: bool) -> dict[str, Any]:
        """Counters, state and lag as of now."""
        now = self.progress.snapshot(self._wall_clock())
        state = "paused" if paused else now.state
        return {
            "name": self.name, "origin": origin, "state": state,
            "up": now.state != STOPPED, "error": now.error, "lag_seconds": now.lag_seconds,
            "applied_source_ms": now.applied_ms, **self.stats.as_dict(),
            # the source GTIDs passed (GET /v1/wait answers from them); None until the first
            "gtid_position": format_position(self.progress.gtids.position()) or None,
            # A channel continued after a stop no longer shows its error (last_stop keeps it).
            "last_error": self.stats.last_error if now.state == STOPPED else None,
        }  # fmt: skip

    def failed(self, exc: DrcError) -> None:
        """The channel stopped on ``exc`` (it may wait for an operator: drc.apply.actions)."""
        self.stats.last_error = str(exc)
        log.error("channel %s stopped: %s", self.name, exc)

    def stopped(self, exc: BaseException) -> None:
        """Stopped by ``exc``; ``last_stop`` keeps when and why once the channel continues."""
        now, error = self._wall_clock(), f"{type(exc).__name__}: {exc}"
        if self.progress.snapshot(now).state != STOPPED:  # stopped already: keep the first
            self.stats.last_stop = {"at": now, "error": error}
        self.progress.stopped(error)

    def ended(self, exc: BaseException) -> None:
        """The channel's run ends on ``exc``."""
        if isinstance(exc, DrcError):
            self.failed(exc)
        self.stopped(exc)
