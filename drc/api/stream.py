"""``GET /v1/stream``: the pull's records on one long-lived response, written as they commit.

A subscriber that keeps up pulls once per transaction, and each pull's HTTP exchange costs
more CPU than the transaction it carries; a stream pays it once. Frames are
:mod:`drc.api.streamwire`'s. The query is the pull's (:mod:`drc.api.pullquery`; its limits bound
each frame), with ``wait_ms`` the heartbeat period (default and at most the server's
``max_wait_ms``; -1 and 0 take the default :data:`HEARTBEAT_MS`).

With ``split=1`` the stream's position is (``next``, ``within``) like a split pull's: a batch
frame may end inside a transaction too big for a page, and its frames (and heartbeats while
the position is inside one) say ``within`` (:mod:`drc.api.streamwire`).

Like a pull, and with the pull's statuses before the first byte: the bearer token (401), a
long-poll slot held for the whole stream (429/503), the epoch (409), an SCN older than the
buffer (410), DRC-applied transactions without their rows (409). Later the stream reads after
the last ``next`` it sent, woken by the same commit signal as long polls
(:class:`drc.api.commits.CommitSignal`), and sends a batch frame as soon as a scan finds
matching transactions, or a heartbeat when none went out for ``wait_ms``, also while a scan
lasts longer than that (a large transaction: the reader's read timeout must not give it up).

It ends with an END frame when the server stops, when its replicator group's term or this
member's role changes (a deposed leader's stream stops: the subscriber reconnects, and asks
the group again), or when a read fails (the subscriber reconnects and gets the pull's status
for it); and at once when the client hangs up.

Back-pressure and memory (:mod:`drc.api.budget`): a frame's records are written in pieces of
:data:`drc.api.budget.CHUNK_BYTES`, and uvicorn's ``send`` waits while the connection's write
buffer is above its high-water mark (64 KiB) before each; the next page is read from the buffer
only once the last piece has drained from that buffer into the socket (an empty ``send``), and
only when the reader budget has room (else the stream waits, sending heartbeats). A page is at
most the budget's share of one stream (:meth:`ReaderBudget.stream_page_bytes`, and the client's
``max_bytes``) or one transaction; with ``split``, one stored record where that alone is more
(a page then ends inside its transaction). So a client that stopped reading holds one page,
charged to the budget until it is written, and about two pieces of transport buffer, however
far behind it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import ExitStack
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from drc.api import streamwire, wire
from drc.api.budget import CHUNK_BYTES, PULL_ADMIT_S, Charge
from drc.api.commits import CommitSignal
from drc.api.deps import ApiDeps, Deps, require_token
from drc.api.errors import ApiError
from drc.api.events import READ_FAILURES, memory_full, pull_failure, request_query
from drc.api.pull import STOP_CHECK_S, Pull, render_records
from drc.api.pullquery import Limits, PullQuery
from drc.core.errors import DrcError
from drc.core.scn import SCN

router = APIRouter(dependencies=[Depends(require_token)])
HEARTBEAT_MS = 1000
MIN_HEARTBEAT_MS = 50

SendBytes = Callable[[bytes], Awaitable[None]]
Writable = Callable[[], Awaitable[None]]


@router.get(streamwire.PATH_STREAM)
async def get_stream(request: Request, deps: Deps) -> Response:
    query = request_query(request, deps)
    held = ExitStack()
    held.enter_context(deps.long_polls.slot(request.state.caller))  # 429 / 503
    compress = wire.accepts_compression(request.headers.get(wire.HEADER_COMPRESSION))
    scanning: asyncio.Task[Scanned] | None = None
    try:
        if not await deps.budget.admit(PULL_ADMIT_S):
            raise memory_full(deps)
        stream = StreamLoop(deps, request.app.state.commits, query, compress=compress)
        held.callback(stream.charge.close)
        # The pull's statuses come before the first byte, but a first scan that reads a large
        # transaction would keep the reader waiting past its read timeout (drc.client.http):
        # one longer than a heartbeat period goes on in the 200's body, with heartbeats.
        ready = stream.begin_scan()
        first: Scanned | asyncio.Task[Scanned]
        if isinstance(ready, Scanned):
            first = ready
        else:
            scanning = asyncio.ensure_future(ready)
            await asyncio.wait({scanning}, timeout=stream.heartbeat_s)
            first = scanning.result() if scanning.done() else scanning
    except READ_FAILURES as exc:
        held.close()
        return pull_failure(deps, query, exc).response()
    except BaseException:
        if scanning is not None:
            scanning.cancel()
        held.close()
        raise
    headers = {wire.HEADER_EPOCH: stream.buffer.epoch}
    if stream.term is not None:
        headers[wire.HEADER_TERM] = str(stream.term)
    if compress:
        headers[wire.HEADER_COMPRESSION] = wire.COMPRESSION_LZ4
    return StreamResponse(stream, first, held, headers)


def heartbeat_s(query: PullQuery, server_max_ms: int) -> float:
    wait_ms = query.wait_ms if query.wait_ms > 0 else min(HEARTBEAT_MS, server_max_ms)
    return max(wait_ms, MIN_HEARTBEAT_MS) / 1000


class StreamLoop:
    """One stream's reading and waiting; :meth:`run` writes its frames through ``send``."""

    def __init__(
        self,
        deps: ApiDeps,
        commits: CommitSignal,
        query: PullQuery,
        clock: Callable[[], float] = time.monotonic,
        compress: bool = False,
    ) -> None:
        self.deps = deps
        self.compress = compress  # batch frames LZ4-compressed where that shrinks them
        self.commits = commits
        page = deps.budget.stream_page_bytes(query.limits.max_bytes)
        self.query = dataclasses.replace(query, limits=Limits(query.limits.max_events, page))
        self.heartbeat_s = heartbeat_s(query, deps.limits.max_wait_ms)
        self.next = query.after
        self.within = query.within  # > 0 (split streams): inside the transaction at ``next``
        self.newest: SCN | None = None
        self.buffer = deps.pull_buffer()
        self.charge = Charge(deps.budget)  # the page read and not yet written
        self._clock = clock
        self._epoch = query.epoch  # checked by the first scan only: the buffer stays the same
        self._group = _group_key(deps)
        self.term = None if self._group is None else self._group[0]
        self._shared = self.query.selection.rows is None  # else selections do not compare

    async def scan(self) -> Scanned:
        """Read what follows ``next`` and render it; raises the pull's read failures."""
        ready = self.begin_scan()
        return ready if isinstance(ready, Scanned) else await ready

    def begin_scan(self) -> Scanned | Coroutine[Any, Any, Scanned]:
        """The page after ``next``, if it is there at once (a few records read on the event
        loop, or a page another stream read: :mod:`drc.api.pagecache`), else the coroutine
        that reads it (in a worker thread, as pulls do, or waiting for another stream's read).
        Either way it is charged to the reader budget until :meth:`run` has written it."""
        pages = self.deps.pages
        key = None
        if self._epoch is None and self._shared:
            key = (
                self.next,
                self.within,
                self.buffer.last_scn,
                self.query.selection,
                self.query.limits,
                self.query.split,
            )
            page = pages.ready(key)
            if page is not None:
                return self._charged(page)
            if pages.reading(key):
                return self._charge_after(pages.get(key, self._read))
        state, inline = self._scan_inline()
        if inline is not None:
            if key is not None:
                pages.keep(key, inline)
            return self._charged(inline)
        reading = self._scan_in_thread(state)
        return self._charge_after(reading if key is None else pages.get(key, lambda: reading))

    def _charged(self, page: Scanned) -> Scanned:
        self.charge.add(page.size)
        return page

    async def _charge_after(self, reading: Awaitable[Scanned]) -> Scanned:
        return self._charged(await reading)

    async def _read(self) -> Scanned:
        """The page read by this stream (when the one sharing it failed)."""
        state, inline = self._scan_inline()
        return inline if inline is not None else await self._scan_in_thread(state)

    def _scan_inline(self) -> tuple[Pull, Scanned | None]:
        """The scan, if a few records made it (no await: on the event loop)."""
        query = dataclasses.replace(
            self.query, after=self.next, within=self.within, epoch=self._epoch
        )
        state = Pull(self.buffer, query)
        self._epoch = None
        if state.scan_inline():
            return state, Scanned.of(state)
        return state, None

    async def _scan_in_thread(self, state: Pull) -> Scanned:
        return await anyio.to_thread.run_sync(_scan, state, limiter=self.deps.long_poll_limiter)

    async def run(
        self, first: Scanned | asyncio.Task[Scanned], send: SendBytes, writable: Writable
    ) -> None:
        """Send frames from ``first`` (the first scan, or the task still making it) on, until
        the stream must end; ``writable`` returns once what was sent has left the transport's
        buffer."""
        metrics = self.deps.metrics
        budget = self.deps.budget
        try:
            scanned: Scanned | None = (
                first if isinstance(first, Scanned) else await self._beating(send, first)
            )
        except READ_FAILURES as exc:
            await send(_end(pull_failure(self.deps, self.query, exc)))
            return
        except DrcError as exc:  # the buffer closed under the first scan
            await send(streamwire.end_frame(wire.ERROR_UNAVAILABLE, str(exc), status=503))
            return
        del first  # held by ``scanned`` alone, so dropped once sent
        last_sent = self._clock()
        more = False
        while True:
            ending = self._ending()
            if ending is not None:
                await send(ending)
                return
            if scanned is not None:
                if scanned.count:
                    await self._send_batch(scanned, send)
                    last_sent = self._clock()
                self.next, self.within = scanned.next, scanned.within
                self.newest, more = scanned.newest, scanned.more
                scanned = None
            if self._clock() - last_sent >= self.heartbeat_s:
                await send(streamwire.heartbeat_frame(self.next, self.newest, self.within))
                last_sent = self._clock()
            try:
                if not more and not self.within:  # inside a transaction: its rest is there
                    due = last_sent + self.heartbeat_s - self._clock()
                    with metrics.waiting():
                        await self.commits.wait(self.next, max(min(due, STOP_CHECK_S), 0))
                await writable()  # read ahead no further than what the client took
                # uvicorn's send returns at once while the client keeps up, and a page shared
                # with other streams is there at once: without this a stream with a backlog
                # would write all of it before any other request got the event loop.
                await anyio.lowlevel.checkpoint()
                due = last_sent + self.heartbeat_s - self._clock()
                if not await budget.admit(max(min(due, STOP_CHECK_S), 0)):
                    more = True  # read as soon as there is room; a heartbeat when due
                    continue
                ready = self.begin_scan()
                if not isinstance(ready, Scanned):  # a long read (a large transaction?)
                    ready = await self._beating(send, ready, self.newest)  # heartbeats meanwhile
                scanned = ready
            except READ_FAILURES as exc:
                query = dataclasses.replace(self.query, after=self.next)
                failure = pull_failure(self.deps, query, exc)
                await send(_end(failure))
                return
            except DrcError as exc:  # the buffer closed under the stream
                await send(streamwire.end_frame(wire.ERROR_UNAVAILABLE, str(exc), status=503))
                return

    async def _send_batch(self, scanned: Scanned, send: SendBytes) -> None:
        """One batch frame in pieces (each waits for the transport to drain)."""
        if self.compress:
            data, head = scanned.compressed(), b""
            self.deps.metrics.compressed(scanned.size, len(data))
        else:  # the head, then the records as they are: no copy of the page
            data = scanned.records
            head = streamwire.batch_head(
                scanned.next, scanned.newest, scanned.count, len(data), scanned.within
            )
        await send(head + data[:CHUNK_BYTES])
        for start in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
            await anyio.lowlevel.checkpoint()  # one piece per stream per turn of the loop
            await send(data[start : start + CHUNK_BYTES])
        self.charge.sent(scanned.size)
        self.deps.metrics.served(scanned.count, scanned.size)

    async def _beating(
        self, send: SendBytes, scanning: Awaitable[Scanned], newest: SCN | None = None
    ) -> Scanned:
        """The scan ``scanning`` makes, with a heartbeat every ``heartbeat_s`` while it lasts.
        Reading a large transaction takes seconds (a million rows: about 2 s), and a reader
        gives a silent stream up after a few heartbeat periods (drc.client.http): it would ask
        again for the same transaction, and again, never getting it."""
        scanned: list[Scanned] = []
        failed: list[Exception] = []
        done = anyio.Event()
        next_scn, within = self.next, self.within

        async def scan() -> None:
            try:
                scanned.append(await scanning)
            except Exception as exc:  # raised below, in the stream's own task
                failed.append(exc)
            finally:
                done.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(scan)
            while not done.is_set():
                with anyio.move_on_after(self.heartbeat_s):
                    await done.wait()
                if not done.is_set():
                    await send(streamwire.heartbeat_frame(next_scn, newest, within))
        if failed:
            raise failed[0]
        return scanned[0]

    def _ending(self) -> bytes | None:
        if self.deps.stop.is_set():
            return streamwire.end_frame(
                streamwire.ERROR_STOPPING,
                "the server is stopping: continue from the last next, here later or elsewhere",
                status=503,
            )
        if self._group is not None:
            now = _group_key(self.deps)
            if now != self._group:
                return streamwire.end_frame(
                    streamwire.ERROR_TERM_CHANGED,
                    f"this member's group term and role changed from {self._group} to {now}: "
                    "continue from the last next, from the member the group names leader",
                    status=503,
                )
        return None


@dataclasses.dataclass(slots=True)
class Scanned:
    """One page read and rendered: what its frame says and its records (the read's
    decoded state is dropped, so a waiting stream holds the rendered bytes alone)."""

    next: SCN
    newest: SCN | None
    count: int
    more: bool  # the scan stopped before the buffer's end: read on at once
    records: bytes
    within: int = 0  # > 0: ``next`` is inside a transaction (split streams)
    _packed: bytes | None = None  # the compressed frame, once a stream asked for it

    @property
    def size(self) -> int:
        return len(self.records)

    def compressed(self) -> bytes:
        """The batch frame, LZ4-compressed where that shrinks it; built once for all the
        streams sharing this page."""
        if self._packed is None:
            self._packed = streamwire.batch_frame(
                self.next, self.newest, self.count, self.records, True, self.within
            )
        return self._packed

    @classmethod
    def of(cls, state: Pull) -> Scanned:
        batch = state.batch()
        records = render_records(batch)
        return cls(batch.next, batch.newest, len(batch.items), state.more, records, batch.within)


def _scan(state: Pull) -> Scanned:
    state.scan()
    return Scanned.of(state)


def _group_key(deps: ApiDeps) -> tuple[int, str] | None:
    """The group's term and this member's role (a paused leader is still the leader)."""
    if deps.group is None:
        return None
    state = deps.group()
    return int(state["term"]), str(state["role"]).removesuffix(" (paused)")


def _end(error: ApiError) -> bytes:
    return streamwire.end_frame(error.code, error.message, status=error.status, **error.extra)


async def _empty() -> Any:
    return
    yield  # an async generator that yields nothing: StreamingResponse's content


class StreamResponse(StreamingResponse):
    """The 200 answer of a stream: headers, then :meth:`StreamLoop.run`'s frames; the
    long-poll slot in ``held`` is given back when it ends."""

    def __init__(
        self,
        loop: StreamLoop,
        first: Scanned | asyncio.Task[Scanned],
        held: ExitStack,
        headers: dict[str, str],
    ) -> None:
        super().__init__(_empty(), headers=headers, media_type=streamwire.MEDIA_STREAM)
        self._loop = loop
        self._first: Scanned | asyncio.Task[Scanned] | None = first
        self._held = held

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_bytes(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        async def writable() -> None:  # uvicorn's send waits for the transport to drain
            await send({"type": "http.response.body", "body": b"", "more_body": True})

        with self._held:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_cancel_on_disconnect, receive, tasks.cancel_scope)
                await self._loop.run(self._take_first(), send_bytes, writable)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tasks.cancel_scope.cancel()

    def _take_first(self) -> Scanned | asyncio.Task[Scanned]:
        first, self._first = self._first, None
        assert first is not None
        return first


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """End the stream of a client that hung up: its slot is freed at once."""
    message: Message = await receive()
    while message["type"] != "http.disconnect":
        message = await receive()
    scope.cancel()
