"""One memory budget for what the API holds for its readers (``[api] reader_memory_mb``).

A pull or a stream charges the record bytes it read from the buffer (rendered for sending) and
releases them as they are handed to the connection's transport, which holds at most its
high-water mark (64 KiB) plus one :data:`CHUNK_BYTES` write more, because every write waits for
it to drain first (uvicorn's flow control). So :attr:`ReaderBudget.held` is what readers hold
beyond that fixed per-connection cost.

Before reading, a reader is admitted (:meth:`ReaderBudget.admit`): at once while the budget
has room, else it waits for releases. A stream waits as long as it takes (it holds nothing
meanwhile and sends heartbeats); a pull waits at most :data:`PULL_ADMIT_S` and is then shed with
503 ``reader_memory_full`` and ``Retry-After``. A read, once admitted, is charged whatever it
read (a page, or one transaction however big), so the budget may be passed by the pages being
read at that moment; it is never passed by pages waiting to be sent.

A stream reads one page at a time, of at most :meth:`ReaderBudget.stream_page_bytes` (the
budget's share of one of ``max_long_polls`` streams): a stream whose client stopped reading
holds that page, and stalled streams up to ``max_long_polls`` together hold no more than the
budget, so they never make other readers wait.

A page that several streams share (:mod:`drc.api.pagecache`) is charged to each of them: the
budget counts high there, never low.

The counts live on the event loop; a lock keeps them safe to read from anywhere (metrics).
"""

from __future__ import annotations

import math
import threading

import anyio

# One transport write. Small, so that one turn of the event loop (a piece for each of hundreds
# of streams) stays short and a pull is not kept waiting: with 250 busy streams, 16 KiB pieces
# answered a pull in 0.3-0.8 s where 64 KiB ones took 0.4-3 s (tests/integration/test_fan_out.py).
CHUNK_BYTES = 16 << 10
MIN_STREAM_PAGE_BYTES = 64 << 10
PULL_ADMIT_S = 2.0  # how long a pull waits for room before it is shed
RETRY_AFTER_S = 1


class ReaderBudget:
    """Bytes held for readers against one limit, and the readers waiting for room."""

    def __init__(self, limit_bytes: int = 512 << 20, streams: int = 1000) -> None:
        if limit_bytes < 1 or streams < 1:
            raise ValueError(f"reader budget must be >= 1 byte and 1 stream, got {limit_bytes}")
        self.limit = limit_bytes
        self.streams = streams
        self._lock = threading.Lock()
        self._held = 0
        self._peak = 0
        self._waiting = 0
        self._shed = 0
        self._room: anyio.Event | None = None  # set when room frees up, for waiters

    def stream_page_bytes(self, max_bytes: int) -> int:
        """The most a stream reads ahead (one page), at most the client's ``max_bytes``."""
        share = max(self.limit // self.streams, MIN_STREAM_PAGE_BYTES)
        return max(1, min(max_bytes, share))

    @property
    def has_room(self) -> bool:
        return self._held < self.limit

    def charge(self, size: int) -> None:
        """Count ``size`` bytes read for a reader (always: the read happened)."""
        with self._lock:
            self._held += size
            self._peak = max(self._peak, self._held)

    def release(self, size: int) -> None:
        """``size`` bytes charged before were sent (or dropped)."""
        with self._lock:
            self._held -= size
            if self._held < 0:
                raise ValueError(f"released {size} bytes more than were charged")
            room = self._room if self._held < self.limit else None
            if room is not None:
                self._room = None
        if room is not None:
            room.set()

    def shed(self) -> None:
        with self._lock:
            self._shed += 1

    async def admit(self, timeout_s: float = math.inf) -> bool:
        """Wait until the budget has room, at most ``timeout_s``; False if it had none."""
        if self.has_room:
            return True
        with self._lock:
            self._waiting += 1
        try:
            with anyio.move_on_after(timeout_s):
                while not self.has_room:
                    if self._room is None:
                        self._room = anyio.Event()
                    await self._room.wait()
            return self.has_room
        finally:
            with self._lock:
                self._waiting -= 1

    def snapshot(self) -> dict[str, int]:
        """Bytes held now and at most so far, readers waiting now, readers shed so far."""
        with self._lock:
            return {
                "held": self._held,
                "peak": self._peak,
                "limit": self.limit,
                "waiting": self._waiting,
                "shed": self._shed,
            }


class Charge:
    """What one reader holds of the budget now; :meth:`close` gives back the rest."""

    __slots__ = ("budget", "size")

    def __init__(self, budget: ReaderBudget) -> None:
        self.budget = budget
        self.size = 0

    def add(self, size: int) -> None:
        self.budget.charge(size)
        self.size += size

    def sent(self, size: int) -> None:
        size = min(size, self.size)
        self.size -= size
        self.budget.release(size)

    def close(self) -> None:
        self.sent(self.size)

    def __enter__(self) -> Charge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
