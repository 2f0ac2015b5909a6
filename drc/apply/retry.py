"""When to retry a target transaction, and how long to wait. Pure: codes, delays, a loop.

    error (server code)                         what the channel does
    deadlock 1213, lock wait timeout 1205       roll back, re-apply the whole target transaction
                                                after a backoff; after ``retries`` attempts stop
                                                with RetriesExhaustedError (checkpoint unmoved)
    down 2002/2003/2006/2013/2055, 1053, 1927,  roll back (or drop the connection), wait, retry
    too many connections 1040                   without limit, logging every wait
    read-only 1290, 1836                        likewise: a demoted or frozen target waits
    table full 1114, disk full 1021             likewise: waits until space is freed
    anything else                               fatal: the channel stops (checkpoint unmoved)

Which code is which kind is drc.mysql.errors' (``classify``). The sleep and stop check are
injected, so tests drive the loop with a fake clock. Stopped (the channel was asked to stop
while waiting to retry; nothing was committed) is drc.core.retry's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from drc.core.retry import Backoff, GaveUp, Policy, Retrying, Stopped, retry
from drc.core.target_errors import (
    LockConflictError,
    RetriesExhaustedError,
    TargetFullError,
    TargetReadOnlyError,
    TargetUnavailableError,
)
from drc.mysql.errors import Kind

__all__ = ["Retried", "RetryPolicy", "Stopped", "call_with_retries"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    retries: int = 10  # lock conflicts per target transaction (ChannelConfig.retries)
    conflict_initial_s: float = 0.05
    conflict_max_s: float = 2.0
    wait_initial_s: float = 0.5  # target down or read-only
    wait_max_s: float = 2.0  # a target that is back is written again within this

    @property
    def conflicts(self) -> Policy:
        """Lock conflicts: ``retries`` retries, then give up."""
        backoff = Backoff(self.conflict_initial_s, self.conflict_max_s)
        return Policy(backoff, (LockConflictError,), attempts=self.retries + 1)

    @property
    def waits(self) -> Policy:
        """A target down or read-only: wait without limit."""
        return Policy(Backoff(self.wait_initial_s, self.wait_max_s), (TargetUnavailableError,))

    def conflict_delay(self, attempt: int) -> float:
        return self.conflicts.backoff.delay(attempt)

    def wait_delay(self, attempt: int) -> float:
        return self.waits.backoff.delay(attempt)


Note = Callable[[Kind, BaseException, float], None]
# Runs one attempt as the channel runs its target transactions (drc.apply.retrier).
Retried = Callable[[Callable[[], Any]], Any]


def call_with_retries(
    attempt: Callable[[], T],
    policy: RetryPolicy,
    *,
    recover: Callable[[BaseException], None],
    sleep: Callable[[float], None],
    stopped: Callable[[], bool],
    note: Note | None = None,
) -> T:
    """``attempt()`` until it succeeds; ``recover(exc)`` (roll back) after every failure.

    Raises RetriesExhaustedError after ``policy.retries`` lock conflicts in a row, Stopped if
    ``stopped()`` turns true while waiting, and any other error at once. The loop and its
    delays are drc.core.retry's, with one policy per row of the table above.
    """

    def recovering() -> T:
        try:
            return attempt()
        except (LockConflictError, TargetUnavailableError) as exc:
            recover(exc)
            raise

    def noted(retrying: Retrying) -> None:
        if note is not None:
            note(_kind(retrying.error), retrying.error, retrying.delay)

    conflicts, waits = policy.conflicts, policy.waits
    try:
        return retry(recovering, conflicts, waits, sleep=sleep, stopped=stopped, on_retry=noted)
    except GaveUp as exc:  # only lock conflicts have a limit
        code = getattr(exc.last, "code", None)
        raise RetriesExhaustedError(
            f"{exc.last}; still failing after {policy.retries} retries (channel retries). "
            "Look for long transactions or hot rows on the target, then restart the "
            "channel; nothing after the last checkpoint was applied",
            code,
        ) from exc.last


def _kind(error: BaseException) -> Kind:
    if isinstance(error, LockConflictError):
        return Kind.LOCK_CONFLICT
    if isinstance(error, TargetFullError):
        return Kind.FULL
    return Kind.READ_ONLY if isinstance(error, TargetReadOnlyError) else Kind.UNAVAILABLE
