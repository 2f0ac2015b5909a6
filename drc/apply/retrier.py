"""A channel's target transactions, run until they go through (the rules: drc.apply.retry).

After each failure the transaction is rolled back (the lease row's shared lock goes with it); a
lock conflict is retried, a target that is down or read-only and a catch-up holding the channel
are waited for (an interrupted catch-up run is finished first where the channel may: drc.apply
.handover). Each retry and wait is counted and shown (drc.apply.status).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from drc.apply.handover import CatchupHandover
from drc.apply.retry import RetryPolicy, call_with_retries
from drc.apply.status import ChannelStatus
from drc.apply.target import Target
from drc.core.target_errors import CatchupUnfinishedError, TargetUnavailableError
from drc.mysql.errors import Kind

log = logging.getLogger(__name__)

T = TypeVar("T")


class Retrier:
    """``retries``: lock conflicts per target transaction (ChannelConfig.retries); ``sleep``
    replaces the wait on the channel's stop flag (tests)."""

    def __init__(
        self,
        target: Target,
        handover: CatchupHandover,
        status: ChannelStatus,
        *,
        retries: int = 10,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.target = target
        self.handover = handover
        self.status = status
        self.policy = RetryPolicy(retries=retries)
        self._sleep = sleep

    def run(self, attempt: Callable[[], T], stop: threading.Event) -> T:
        """``attempt()`` until it succeeds; Stopped once ``stop`` is set while waiting."""

        def wait(seconds: float) -> None:
            stop.wait(seconds)  # wakes at once when the channel is stopped

        return call_with_retries(
            attempt,
            self.policy,
            recover=partial(self._recover, stop.is_set),
            sleep=self._sleep or wait,
            stopped=stop.is_set,
            note=self._note,
        )

    def _recover(self, stopping: Callable[[], bool], exc: BaseException) -> None:
        self.target.recover(exc)  # rolled back: the lease row's shared lock is gone too
        if isinstance(exc, TargetUnavailableError):  # a COMMIT may have landed unseen
            self.handover.unsure = True
        if isinstance(exc, CatchupUnfinishedError):
            self.handover.finish_interrupted(stopping, self.status.progress.target_waiting)

    def _note(self, kind: Kind, exc: BaseException, delay: float) -> None:
        if self.handover.finished_meanwhile(exc):
            return  # finished meanwhile (_recover): nothing was waited for
        stats = self.status.stats
        if kind is Kind.LOCK_CONFLICT:
            stats.retries += 1
        else:
            stats.waits += 1
            self.status.progress.target_waiting(str(exc))
        stats.last_error = str(exc)
        if self.handover.logged_lately(exc):  # a wait for a catch-up may last for hours
            return
        log.warning("channel %s: %s; retrying in %.2fs", self.status.name, exc, delay)
