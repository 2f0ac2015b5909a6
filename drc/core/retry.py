"""Retry and backoff: the one policy every retry loop of DRC follows. Pure: the sleep, clock and
random draw are injected, so tests drive it with a fake clock.

The policy::

    a call fails  -> its error is matched against the policies in the order given; the first
                     that matches applies (default: the RetriableError tree of drc.core.errors,
                     or any exception types or predicate); no match: the error propagates at once
    each policy counts the failures it matched (n = 1, 2, ...); a success ends the loop, so the
    next loop starts from n = 1 again
    delay(n)      =  min(initial_s * factor ** (n - 1), max_s)          exponential, capped
    with jitter j    a random part up to j of it is taken off: delay(n) * (1 - j * random())
    give up       -> raise GaveUp (from the last error) when the policy's ``attempts`` failures
                     have happened, or when the next wait would end more than ``deadline_s``
                     after the loop began; both are optional (None: retry without limit)
    otherwise     -> report the retry to ``on_retry`` (what failed, the n-th time, the delay),
                     then wait; ``stopped()`` is asked before and after the wait: True raises
                     Stopped (nothing more is tried)

Loops that are not one call retried (the subscriber's round-robin over URLs, which waits only
after a whole round failed) use the same schedule through :class:`Backoff` and its
:class:`Delays` (``next()`` after a failure, ``reset()`` after a success).
"""

from __future__ import annotations

import math
import random as _random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from drc.core.errors import FatalError, RetriableError

T = TypeVar("T")
Draw = Callable[[], float]  # a uniform draw in [0, 1)
Matcher = tuple[type[BaseException], ...] | Callable[[BaseException], bool]


@dataclass(frozen=True, slots=True)
class Backoff:
    """How long to wait after the n-th failure: ``initial_s`` doubling (``factor``) up to
    ``max_s``; ``jitter`` (0..1) is the largest part of a delay a random draw takes off."""

    initial_s: float
    max_s: float
    factor: float = 2.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if min(self.initial_s, self.max_s) < 0 or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError(f"not a backoff: {self}")  # a max_s below initial_s caps it too

    def delay(self, failures: int, draw: Draw = _random.random) -> float:
        """The wait after the ``failures``-th failure in a row (the first: ``initial_s``)."""
        try:
            grown = self.initial_s * self.factor ** (failures - 1)
        except OverflowError:  # long past the cap: a target down for hours never overflows
            grown = math.inf
        capped = min(grown, self.max_s)
        return capped * (1 - self.jitter * draw()) if self.jitter else capped

    def delays(self, draw: Draw = _random.random) -> Delays:
        return Delays(self, draw)


class Delays:
    """A backoff's delays in turn, for a loop that counts its own failures."""

    def __init__(self, backoff: Backoff, draw: Draw = _random.random) -> None:
        self.backoff = backoff
        self.failures = 0
        self._draw = draw

    def next(self) -> float:
        """Count one more failure; the wait it calls for."""
        self.failures += 1
        return self.backoff.delay(self.failures, self._draw)

    def reset(self) -> None:
        """After a success: the next failure waits ``initial_s`` again."""
        self.failures = 0


@dataclass(frozen=True, slots=True)
class Policy:
    """Which errors are retried (exception types or a predicate), how long apart, and when to
    give up: after ``attempts`` failures it matched, or past ``deadline_s`` (None: never)."""

    backoff: Backoff
    retriable: Matcher = (RetriableError,)
    attempts: int | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")

    def matches(self, error: BaseException) -> bool:
        if isinstance(self.retriable, tuple):
            return isinstance(error, self.retriable)
        return self.retriable(error)


@dataclass(frozen=True, slots=True)
class Retrying:
    """What ``on_retry`` is told before each wait: the error, the how-many-th failure of its
    policy this is, and how long until the next call."""

    error: BaseException
    failures: int
    delay: float
    policy: Policy

    def __str__(self) -> str:
        return f"{describe(self.error)}; retry {self.failures} in {self.delay:.1f}s"


class Stopped(Exception):
    """``stopped()`` turned true while waiting to retry: nothing more was tried."""


class GaveUp(FatalError):
    """A retriable error kept failing until its policy's attempts or deadline ran out.
    ``last`` is that error (also the cause); callers usually translate it into their own
    error naming what failed and what to do."""

    def __init__(self, message: str, last: BaseException, failures: int) -> None:
        super().__init__(message)
        self.last = last
        self.failures = failures


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def retry(
    call: Callable[[], T],
    *policies: Policy,
    sleep: Callable[[float], object],
    on_retry: Callable[[Retrying], None],
    stopped: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.monotonic,
    draw: Draw = _random.random,
) -> T:
    """``call()`` until it succeeds, following the module's policy (see its docstring)."""
    began = clock()
    counts = [policy.backoff.delays(draw) for policy in policies]
    while True:
        try:
            return call()
        except Exception as exc:
            index = next((i for i, p in enumerate(policies) if p.matches(exc)), None)
            if index is None:
                raise
            failure: BaseException = exc
        policy, delays = policies[index], counts[index]
        delay = delays.next()
        _check_limits(policy, failure, delays.failures, clock() - began + delay)
        on_retry(Retrying(failure, delays.failures, delay, policy))
        if stopped():
            raise Stopped()
        sleep(delay)
        if stopped():
            raise Stopped()


def _check_limits(policy: Policy, error: BaseException, failures: int, waited_s: float) -> None:
    """GaveUp if ``error``, the ``failures``-th of ``policy``, is one too many, or if waiting
    would bring the loop to ``waited_s`` past its deadline."""
    if policy.attempts is not None and failures >= policy.attempts:
        why = f"after {failures} attempts"
    elif policy.deadline_s is not None and waited_s > policy.deadline_s:
        why = f"within {policy.deadline_s:g}s"
    else:
        return
    raise GaveUp(f"{describe(error)}; still failing {why}", error, failures) from error
