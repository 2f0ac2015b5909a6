"""One pull: read, filter, wait for commits, render. :class:`Pull` holds its state between
waits; :func:`pull` waits blocking in the calling thread, while the events handler reads in
worker threads and waits on the event loop (drc.api.commits), holding no thread meanwhile.

Waiting (``wait_ms``, see :mod:`drc.api.pullquery`):

- ``-1``: one pass over what is committed now.
- ``>0``: latency first: as soon as the batch holds one matching transaction it is returned;
  otherwise wait up to ``wait_ms`` for more commits.
- ``0``: throughput first (Canal's "wait until full"): wait until the batch holds
  ``max_events`` transactions or ``max_bytes``, at most the server's ``max_wait_ms``.

A blocking wait is :meth:`EventBuffer.wait_for_commit`, which the writer's commit wakes.
Waits are cut into slices of at most :data:`STOP_CHECK_S` so that a stopping server or a
client that went away (``stopped()``) ends the pull early.
One pass scans at most ``scan_records`` stored records, so a subscriber of a quiet table over a
long busy stretch gets an answer (an empty batch with ``next`` moved on) in bounded time.

Split pages (``split``, drc.api.batching): the position is (``next``, ``within``); each read
passes both to the buffer, which then cuts the first transaction at the read's byte bound, so
a large transaction costs at most a read's bytes at a time, sent or filtered out. A position
inside a transaction is never served from the source binlog (:class:`BackToSource`: 410).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Protocol

from drc.api import wire
from drc.api.batching import BatchBuilder, Item
from drc.api.pullquery import PullQuery
from drc.core.errors import ScnTooOldError
from drc.core.jsonwire import transaction_to_json
from drc.core.scn import SCN
from drc.eventbuffer.reader import Record

STOP_CHECK_S = 0.5
SCAN_RECORDS = 100_000  # per pull, across reads
READ_RECORDS = 1000  # per read_after while filtering
READ_BYTES = 4 << 20
# What a pull that is caught up may read on the event loop instead of a worker thread: the
# few records committed since it last scanned, at a subscriber that keeps up. Two thread
# hand-offs per pull cost more than such a read.
INLINE_RECORDS = 64
INLINE_BYTES = 256 << 10


class PullBuffer(Protocol):
    """What a pull needs of the EventBuffer."""

    @property
    def epoch(self) -> str: ...

    @property
    def last_scn(self) -> SCN | None: ...

    def read_after(
        self,
        after: SCN,
        max_records: int,
        max_bytes: int,
        *,
        within: int = 0,
        split: bool = False,
    ) -> list[Record]: ...

    def wait_for_commit(self, after: SCN, timeout_s: float) -> bool: ...


# Back to source (drc.replicator.backfill): records after ``after`` up to ``oldest``.
Backfill = Callable[[SCN, SCN, int, int], list[Record]]


class BackToSource:
    """A PullBuffer that serves reads older than the buffer from ``backfill`` (the source
    binlog) instead of answering ScnTooOldError; the backfill raises it when it cannot."""

    def __init__(self, buffer: PullBuffer, backfill: Backfill) -> None:
        self._buffer = buffer
        self._backfill = backfill

    @property
    def epoch(self) -> str:
        return self._buffer.epoch

    @property
    def last_scn(self) -> SCN | None:
        return self._buffer.last_scn

    def read_after(
        self,
        after: SCN,
        max_records: int,
        max_bytes: int,
        *,
        within: int = 0,
        split: bool = False,
    ) -> list[Record]:
        began = _began(self._buffer)
        if began is not None and SCN.ZERO < after < began:
            if within:  # came from a buffer, yet older than it: never re-served whole
                raise _inside_too_old(after, began)
            # Older than the buffer's beginning (a buffer started anew: after a purged binlog,
            # say): what came between is the source's to serve, or 410, never skipped.
            return self._backfill(after, began, max_records, max_bytes)
        try:
            return self._buffer.read_after(
                after, max_records=max_records, max_bytes=max_bytes, within=within, split=split
            )
        except ScnTooOldError as exc:
            if exc.oldest is None or within:
                raise
            return self._backfill(after, exc.oldest, max_records, max_bytes)

    def wait_for_commit(self, after: SCN, timeout_s: float) -> bool:
        return self._buffer.wait_for_commit(after, timeout_s)

    @property
    def buffered(self) -> PullBuffer:
        """The buffer alone, without going back to the source."""
        return self._buffer


def _inside_too_old(after: SCN, began: SCN) -> ScnTooOldError:
    return ScnTooOldError(
        f"a position inside the transaction at SCN {after} is older than this buffer, which "
        f"begins at SCN {began}: it cannot be served again from the source binlog part way; "
        "resume after a whole transaction or from a snapshot",
        began,
    )


def _began(buffer: PullBuffer) -> SCN | None:
    """The SCN of a buffer's first record while retention has deleted none (the buffer then
    holds nothing before it: capture started there, or a follower's first copy); None once it
    has (retention's own limit, ``oldest_servable``, then applies) or while it is empty."""
    if getattr(buffer, "oldest_servable", None) != SCN.ZERO:
        return None
    first = getattr(buffer, "first_scn", None)
    return first if isinstance(first, SCN) else None


class EpochMismatch(Exception):
    """The client read a different buffer (wiped and rebuilt, or another replicator's)."""

    def __init__(self, current: str) -> None:
        super().__init__(current)
        self.current = current


@dataclass(frozen=True, slots=True)
class Batch:
    epoch: str
    items: list[Item]
    next: SCN
    newest: SCN | None
    transactions: int
    within: int = 0  # > 0: ``next`` is inside a transaction, its first ``within`` records taken


class Pull:
    """The state of one pull between waits: :meth:`scan` (blocking, reads the buffer) and
    :meth:`finished` decide whether it may answer; the caller does the waiting, blocking
    (:func:`pull`) or asynchronously (:mod:`drc.api.events`)."""

    def __init__(
        self,
        buffer: PullBuffer,
        query: PullQuery,
        clock: Callable[[], float] = time.monotonic,
        scan_records: int = SCAN_RECORDS,
    ) -> None:
        """Raises EpochMismatch for an epoch that is not the buffer's."""
        self.epoch = buffer.epoch
        if query.epoch is not None and query.epoch != self.epoch:
            raise EpochMismatch(self.epoch)
        self.buffer = buffer
        self.query = query
        self.builder = BatchBuilder(
            query.selection, query.limits, query.after, query.within, query.split
        )
        self._clock = clock
        self._deadline = clock() + query.wait_s
        self._scan_records = scan_records
        self._caught_up = False

    def scan(self) -> None:
        """Read what is committed after ``next``; raises ScnTooOldError."""
        self._caught_up = bool(_scan(self.buffer, self.builder, self._scan_records))

    def scan_inline(self) -> bool:
        """Scan at most INLINE_RECORDS / INLINE_BYTES of the buffer alone (never the source
        binlog, never more than a few records: it runs on the event loop); False if that was
        not enough, or the position is older than the buffer: :meth:`scan` in a thread then."""
        buffer = getattr(self.buffer, "buffered", self.buffer)
        began = _began(buffer) if buffer is not self.buffer else None
        if began is not None and SCN.ZERO < self.builder.next < began:
            return False  # older than the buffer: the source's (BackToSource), in a thread
        try:
            done = _scan(buffer, self.builder, self._scan_records, INLINE_RECORDS, INLINE_BYTES)
        except ScnTooOldError:
            return False
        if done is None:
            return False
        self._caught_up = done
        return True

    @property
    def finished(self) -> bool:
        """True when the batch is the answer: full, out of scan budget, or waited enough."""
        builder = self.builder
        if builder.full or not self._caught_up or _answered(self.query, builder):
            return True
        return self.remaining_s <= 0

    @property
    def more(self) -> bool:
        """True when the last scan stopped before the buffer's end (batch full, or out of
        scan budget): more is committed already (a stream reads on at once)."""
        return self.builder.full or not self._caught_up

    @property
    def remaining_s(self) -> float:
        return self._deadline - self._clock()

    def batch(self) -> Batch:
        builder = self.builder
        return Batch(
            self.epoch,
            builder.items,
            builder.next,
            self.buffer.last_scn,
            builder.transactions,
            builder.within,
        )


def pull(
    buffer: PullBuffer,
    query: PullQuery,
    *,
    stopped: Callable[[], bool] = lambda: False,
    waiting: Callable[[], AbstractContextManager[object]] = nullcontext,
    clock: Callable[[], float] = time.monotonic,
    scan_records: int = SCAN_RECORDS,
) -> Batch:
    """Collect the batch for ``query``, waiting in this thread; raises EpochMismatch and
    ScnTooOldError."""
    state = Pull(buffer, query, clock, scan_records)
    while True:
        state.scan()
        if state.finished or stopped():
            break
        with waiting():
            buffer.wait_for_commit(state.builder.next, min(state.remaining_s, STOP_CHECK_S))
    return state.batch()


def _answered(query: PullQuery, builder: BatchBuilder) -> bool:
    return not query.waits or (query.wait_ms > 0 and builder.transactions > 0)


def _scan(
    buffer: PullBuffer,
    builder: BatchBuilder,
    scan_records: int,
    budget_records: int | None = None,
    budget_bytes: int = 0,
) -> bool | None:
    """Read until the batch is full or the buffer ends; False if the scan budget ran out,
    None if ``budget_records`` / ``budget_bytes`` did (more may be there)."""
    everything = builder.selection.passes_everything
    while not builder.full:
        if builder.examined >= scan_records:
            return False
        if everything:  # the stored records are the batch: read just what fits
            count, size = builder.room()
        else:
            count, size = min(READ_RECORDS, scan_records - builder.examined), READ_BYTES
        if budget_records is not None:
            if budget_records <= 0 or budget_bytes <= 0:
                return None
            count, size = min(count, budget_records), min(size, budget_bytes)
        last = buffer.last_scn
        if last is not None and builder.next >= last and not builder.within:
            return True  # at the end: a read would seek and find nothing (a commit wakes us)
        records = buffer.read_after(
            builder.next,
            max_records=count,
            max_bytes=size,
            within=builder.within,
            split=builder.split,
        )
        if not records:
            return True
        builder.add(records)
        if budget_records is not None:
            budget_records -= len(records)
            budget_bytes -= sum(len(r.payload) for r in records)
    return True


def render_records(batch: Batch) -> bytes:
    return b"".join(item.record() for item in batch.items)


def render_json(batch: Batch) -> bytes:
    body: dict[str, object] = {
        "epoch": batch.epoch,
        "next": str(batch.next),
        "newest": None if batch.newest is None else str(batch.newest),
        "transactions": [transaction_to_json(item.transaction()) for item in batch.items],
    }
    if batch.within:
        body["next_within"] = batch.within
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def batch_headers(batch: Batch) -> dict[str, str]:
    headers = {
        wire.HEADER_EPOCH: batch.epoch,
        wire.HEADER_NEXT: str(batch.next),
        wire.HEADER_NEWEST: "" if batch.newest is None else str(batch.newest),
        wire.HEADER_COUNT: str(len(batch.items)),
    }
    if batch.within:
        headers[wire.HEADER_NEXT_WITHIN] = str(batch.within)
    return headers
