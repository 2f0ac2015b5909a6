"""How many long polls may wait at once: per caller (bearer token) and in all.

A pull takes a slot only when it is about to wait (nothing to send yet and ``wait_ms`` not
-1); a pull that can answer at once never needs one, and ``wait_ms=-1`` pulls never wait.
Without a slot the answer is 429 (this token holds ``per_token`` waiting polls) or 503 (the
server holds ``total``), both with ``Retry-After`` and the usual JSON error body: the client
should pull again after a short back-off, if it must not fall behind with ``wait_ms=-1`` (the
SDK does both). The counts live on the event loop, but a lock keeps them safe to read from
anywhere (metrics).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from drc.api import wire
from drc.api.errors import ApiError


@dataclass(frozen=True, slots=True)
class LongPollLimits:
    """The operator's caps (``[api] max_long_polls``, ``max_long_polls_per_token``)."""

    total: int = 1000
    per_token: int = 200
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        if self.total < 1 or self.per_token < 1 or self.retry_after_s < 1:
            raise ValueError(f"long-poll limits must be >= 1, got {self}")


class LongPollGate:
    def __init__(self, limits: LongPollLimits | None = None) -> None:
        self.limits = limits or LongPollLimits()
        self._lock = threading.Lock()
        self._by_caller: Counter[str] = Counter()
        self._total = 0

    @contextmanager
    def slot(self, caller: str) -> Iterator[None]:
        """Hold a waiting slot for ``caller``; raises ApiError 429/503 if there is none."""
        self._take(caller)
        try:
            yield
        finally:
            with self._lock:
                self._total -= 1
                self._by_caller[caller] -= 1
                if not self._by_caller[caller]:
                    del self._by_caller[caller]

    @property
    def held(self) -> int:
        with self._lock:
            return self._total

    def _take(self, caller: str) -> None:
        limits = self.limits
        with self._lock:
            if self._total >= limits.total:
                raise self._refused(
                    503,
                    wire.ERROR_LONG_POLLS_FULL,
                    f"this server already holds {limits.total} waiting long polls "
                    "([api] max_long_polls)",
                )
            if self._by_caller[caller] >= limits.per_token:
                raise self._refused(
                    429,
                    wire.ERROR_TOO_MANY_LONG_POLLS,
                    f"this token already holds {limits.per_token} waiting long polls "
                    "([api] max_long_polls_per_token)",
                )
            self._total += 1
            self._by_caller[caller] += 1

    def _refused(self, status: int, code: str, why: str) -> ApiError:
        seconds = self.limits.retry_after_s
        return ApiError(
            status,
            f"{why}: pull again after {seconds}s, or now with wait_ms=-1 (never refused)",
            code=code,
            headers={"Retry-After": str(seconds)},
            retry_after_s=seconds,
        )
