"""Fakes for time-dependent logic: a monotonic clock a test sets or moves by sleeping, and a
call scripted to fail a given number of times."""

from __future__ import annotations


class FakeClock:
    """A fake monotonic clock: ``now`` is what a test sets, and only a sleep moves it; the sleeps
    are recorded."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Script:
    """A call that raises the given errors in turn, then returns "done"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"
