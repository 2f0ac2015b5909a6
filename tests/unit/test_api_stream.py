"""GET /v1/stream's parts without a network: frames written and read back, the server's loop
(batches, heartbeats past filtered-out transactions, back-pressure, term change, stop) with a
recording ``send``, and the subscriber's bounded frame queue."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest

from drc.api import stream, streamwire, wire
from drc.api.budget import CHUNK_BYTES, ReaderBudget
from drc.api.commits import CommitSignal
from drc.api.deps import ApiDeps
from drc.api.pullquery import ServerLimits, parse_pull_query
from drc.api.stream import StreamLoop
from drc.client.stream import Ended, FrameQueue, read_frames
from drc.core.codec import encode_transaction
from drc.core.events import Op, RowChange
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from tests.support.api import ins, scn, store, txn

# -- frames --------------------------------------------------------------------------------------


def frames_of(*txns: Any) -> bytes:
    return b"".join(encode_transaction(t) for t in txns)


def test_frames_read_back_whatever_the_chunking() -> None:
    one, two = txn(1, ins("orders", 1)), txn(2, ins("items", 2), fragment=0, last=True)
    body = (
        streamwire.batch_frame(scn(2), scn(9), 2, frames_of(one, two))
        + streamwire.heartbeat_frame(scn(5), scn(9))
        + streamwire.heartbeat_frame(scn(5), None)
        + streamwire.end_frame(streamwire.ERROR_STOPPING, "bye", status=503)
    )
    for size in (1, 3, 7, len(body)):
        parser = streamwire.FrameParser()
        got = [f for i in range(0, len(body), size) for f in parser.feed(body[i : i + size])]
        assert parser.pending == 0
        batch, beat, empty, end = got
        assert batch.transactions == (one, two) and (batch.next, batch.newest) == (scn(2), scn(9))
        assert batch.size == len(frames_of(one, two))
        assert beat.transactions == () and (beat.next, beat.newest) == (scn(5), scn(9))
        assert empty.newest is None
        assert end.end == {"error": "stopping", "message": "bye", "status": 503}


@pytest.mark.parametrize(
    "bad",
    [
        b"X\x00\x00\x00\x00",  # unknown kind
        streamwire.batch_frame(scn(1), None, 2, frames_of(txn(1, ins("o", 1)))),  # count
        b"B\x7f\xff\xff\xff",  # longer than any batch
        b"H\x00\x00\x00\x03x:y",  # not SCNs
        b"E\x00\x00\x00\x02[]",  # an end frame that is no object
    ],
)
def test_broken_frames_are_refused(bad: bytes) -> None:
    with pytest.raises(streamwire.BrokenStream):
        streamwire.FrameParser().feed(bad)


# -- the subscriber's queue ----------------------------------------------------------------------


def frame(n: int, size: int = 100) -> streamwire.Frame:
    return streamwire.Frame(scn(n), scn(n), (txn(n, ins("orders", n)),), size)


def test_the_queue_takes_what_has_arrived_up_to_the_limits() -> None:
    queue = FrameQueue(limit_bytes=10_000)
    for n in range(1, 6):
        assert queue.put(frame(n))
    assert [f.next for f in queue.take(2, 1 << 20, 0)] == [scn(1), scn(2)]
    assert [f.next for f in queue.take(10, 250, 0)] == [scn(3), scn(4)]
    assert [f.next for f in queue.take(10, 1, 0)] == [scn(5)]  # the first frame always
    assert queue.take(10, 1 << 20, 0.01) == [] and queue.held_bytes == 0


def test_the_queue_raises_the_end_only_once_drained() -> None:
    queue = FrameQueue(limit_bytes=10_000)
    queue.put(frame(1))
    queue.end(Ended("stopping: bye"))
    assert [f.next for f in queue.take(10, 1 << 20, 0)] == [scn(1)]
    with pytest.raises(Ended, match="bye"):
        queue.take(10, 1 << 20, 0)


def test_a_full_queue_holds_the_reader_until_the_subscriber_takes() -> None:
    queue = FrameQueue(limit_bytes=250)
    chunks = (streamwire.batch_frame(scn(n), scn(9), 1, frames_of(txn(n))) for n in range(1, 9))
    reader = threading.Thread(target=read_frames, args=(chunks, queue), daemon=True)
    reader.start()
    size = len(frames_of(txn(1)))
    deadline = time.monotonic() + 5
    while queue.held_bytes < 250 - size and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)
    held = queue.held_bytes
    assert held <= 250 and reader.is_alive()  # waiting: it read no further than the bound
    taken = []
    while len(taken) < 8:
        taken += [f.next for f in queue.take(1, 1 << 20, 1)]
    assert taken == [scn(n) for n in range(1, 9)]
    with pytest.raises(Ended, match="without an end frame"):
        queue.take(1, 1 << 20, 1)


def test_closing_the_queue_releases_a_waiting_reader() -> None:
    queue = FrameQueue(limit_bytes=1)
    queue.put(frame(1))
    result: list[bool] = []
    putter = threading.Thread(target=lambda: result.append(queue.put(frame(2))))
    putter.start()
    time.sleep(0.05)
    queue.close()
    putter.join(5)
    assert result == [False]


# -- the server's loop ---------------------------------------------------------------------------


def make_loop(buffer: EventBuffer, deps: ApiDeps | None = None, **params: str) -> StreamLoop:
    deps = deps or ApiDeps(buffer=buffer, limits=ServerLimits(max_wait_ms=5000))
    query = parse_pull_query(list({"after": "0:0:0:0", **params}.items()), deps.limits)
    return StreamLoop(deps, CommitSignal(buffer, deps.stop), query)


class Recorder:
    """A ``send`` that parses what it is given; ``gate`` (if set) must be open to return."""

    def __init__(self, stop_after: int = 10**9) -> None:
        self.parser = streamwire.FrameParser()
        self.frames: list[streamwire.Frame] = []
        self.stop_after = stop_after
        self.gate: asyncio.Event | None = None

    async def __call__(self, data: bytes) -> None:
        self.frames += self.parser.feed(data)
        if self.gate is not None:
            await self.gate.wait()
        if len(self.frames) >= self.stop_after:
            raise asyncio.CancelledError()  # the client hung up

    async def writable(self) -> None:
        """What was sent has left the transport: not while the client reads nothing."""
        if self.gate is not None:
            await self.gate.wait()

    def scns(self) -> list[SCN]:
        return [t.scn for f in self.frames for t in f.transactions]


async def run(loop: StreamLoop, send: Recorder, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await loop.run(await loop.scan(), send, send.writable)
    except (TimeoutError, asyncio.CancelledError):
        pass


def test_batches_as_they_commit_and_heartbeats_past_filtered_out_ones(
    buffer: EventBuffer,
) -> None:
    store(buffer, txn(1, ins("orders", 1)))
    loop = make_loop(buffer, tables="shop.orders", wait_ms="100")
    send = Recorder()

    async def main() -> None:
        async def write() -> None:
            await asyncio.sleep(0.05)
            store(buffer, txn(2, ins("orders", 2)), txn(3, ins("items", 3)))
            await asyncio.sleep(0.05)
            store(buffer, txn(4, ins("items", 4)))

        await asyncio.gather(run(loop, send, 0.6), write())

    asyncio.run(main())
    assert send.scns() == [scn(1), scn(2)]
    beats = [f for f in send.frames if not f.transactions]
    assert beats and beats[-1].next == scn(4) and beats[-1].newest == scn(4)
    nexts = [f.next for f in send.frames]
    assert nexts == sorted(nexts)


def test_a_scan_outlasting_the_heartbeat_period_sends_heartbeats_meanwhile(
    buffer: EventBuffer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a large transaction takes seconds; silence that long makes a reader give the
    stream up (its read timeout) and ask for the same transaction again, for ever."""
    store(buffer, txn(1, ins("orders", 1)))
    loop = make_loop(buffer, wait_ms="100")
    send = Recorder()
    quick = stream._scan

    def slow(state: Any) -> Any:
        time.sleep(0.6)  # six heartbeat periods
        return quick(state)

    async def main() -> None:
        first = await loop.scan()
        monkeypatch.setattr(stream, "_scan", slow)
        # more than a scan on the event loop reads (drc.api.pull.INLINE_RECORDS): a thread's
        store(buffer, *(txn(n, ins("orders", n)) for n in range(2, 100)))
        try:
            async with asyncio.timeout(1.0):
                await loop.run(first, send, send.writable)
        except TimeoutError:
            pass

    asyncio.run(main())
    shown = [f.transactions[0].scn if f.transactions else None for f in send.frames]
    assert scn(1) in shown and scn(2) in shown
    between = shown[shown.index(scn(1)) + 1 : shown.index(scn(2))]
    assert len(between) >= 2 and set(between) == {None}, shown
    assert all(f.next == scn(1) for f in send.frames[1 : 1 + len(between)])


def test_a_slow_client_holds_the_stream_to_one_frame(buffer: EventBuffer) -> None:
    store(buffer, *(txn(n, ins("orders", n)) for n in range(1, 201)))
    loop = make_loop(buffer, max_events="10")
    reads: list[int] = []
    read_after = buffer.read_after

    def counting(after: SCN, max_records: int, max_bytes: int, **position: Any) -> Any:
        found = read_after(after, max_records=max_records, max_bytes=max_bytes, **position)
        reads.append(len(found))
        return found

    loop.buffer = type("Counted", (), {})()
    loop.buffer.epoch, loop.buffer.read_after = buffer.epoch, counting  # type: ignore[attr-defined]
    loop.buffer.last_scn = buffer.last_scn  # type: ignore[attr-defined]
    send = Recorder()

    async def main() -> None:
        send.gate = asyncio.Event()  # the client reads nothing
        task = asyncio.create_task(run(loop, send, 5))
        await asyncio.sleep(0.3)
        assert len(send.frames) == 1 and sum(reads) == 10  # one frame read, nothing more
        send.gate.set()
        await asyncio.sleep(0.3)
        task.cancel()

    asyncio.run(main())
    assert send.scns()[:200] == [scn(n) for n in range(1, 201)]


def test_the_stream_ends_on_a_term_change_and_on_stop(buffer: EventBuffer) -> None:
    store(buffer, txn(1, ins("orders", 1)))
    state = {"term": 3, "role": "leader"}
    deps = ApiDeps(buffer=buffer, group=lambda: dict(state))
    loop = make_loop(buffer, deps, wait_ms="50")
    assert loop.term == 3
    send = Recorder()

    async def main() -> None:
        async def depose() -> None:
            await asyncio.sleep(0.1)
            state["role"] = "leader (paused)"  # a lease that lapses is no change
            await asyncio.sleep(0.1)
            state.update(role="deposed")

        await asyncio.gather(run(loop, send, 2), depose())

    asyncio.run(main())
    end = send.frames[-1].end
    assert end is not None and end["error"] == streamwire.ERROR_TERM_CHANGED
    assert send.scns() == [scn(1)]

    stopped = make_loop(buffer)
    stopped.deps.stop.set()
    send = Recorder()
    asyncio.run(run(stopped, send, 2))
    assert [f.end["error"] for f in send.frames if f.end] == [streamwire.ERROR_STOPPING]


def test_a_position_the_buffer_no_longer_holds_ends_with_the_pulls_410(
    buffer: EventBuffer,
) -> None:
    store(buffer, txn(1, ins("orders", 1)))
    loop = make_loop(buffer, wait_ms="50")
    send = Recorder()

    async def main() -> None:
        scanned = await loop.scan()

        def too_old(after: SCN, max_records: int, max_bytes: int, **_position: Any) -> Any:
            from drc.core.errors import ScnTooOldError

            raise ScnTooOldError("gone", scn(1))

        buffer.read_after = too_old  # type: ignore[method-assign]
        store(buffer, txn(2, ins("orders", 2)))  # retention "deleted" what follows scn(1)
        async with asyncio.timeout(2):
            await loop.run(scanned, send, send.writable)

    asyncio.run(main())
    end = send.frames[-1].end
    assert end is not None and end["status"] == 410 and end["error"] == wire.ERROR_SCN_TOO_OLD


def test_a_stream_reads_only_when_the_reader_budget_has_room(buffer: EventBuffer) -> None:
    store(buffer, txn(1, ins("orders", 1)))
    budget = ReaderBudget(limit_bytes=1000, streams=10)
    deps = ApiDeps(buffer=buffer, limits=ServerLimits(max_wait_ms=5000), budget=budget)
    loop = make_loop(buffer, deps, wait_ms="50")
    send = Recorder()

    async def main() -> None:
        scanned = await loop.scan()
        assert budget.snapshot()["held"] == len(scanned.records)  # charged until written
        budget.charge(1000)  # other readers hold it all
        store(buffer, txn(2, ins("orders", 2)))
        task = asyncio.create_task(loop.run(scanned, send, send.writable))
        await asyncio.sleep(0.3)
        assert send.scns() == [scn(1)]  # written, but nothing read since: no room
        assert budget.snapshot()["waiting"] == 1
        assert any(not f.transactions for f in send.frames)  # heartbeats meanwhile
        budget.release(1000)
        await asyncio.sleep(0.3)
        task.cancel()

    asyncio.run(main())
    assert send.scns() == [scn(1), scn(2)]
    assert budget.snapshot()["held"] == 0 and budget.snapshot()["waiting"] == 0


def test_a_stream_reads_one_page_of_the_budget_share_at_a_time(buffer: EventBuffer) -> None:
    store(buffer, *(txn(n, ins("orders", n)) for n in range(1, 101)))
    one = len(encode_transaction(txn(1, ins("orders", 1))))
    budget = ReaderBudget(limit_bytes=10 * 64 << 10, streams=10)  # a share of 64 KiB
    deps = ApiDeps(buffer=buffer, budget=budget)
    loop = make_loop(buffer, deps, max_bytes=str(10 * one))
    assert loop.query.limits.max_bytes == 10 * one  # the client's, below the share
    big = make_loop(buffer, deps, max_bytes=str(1 << 20))
    assert big.query.limits.max_bytes == 64 << 10


@pytest.mark.parametrize("compress", [False, True])
def test_streams_at_one_position_share_the_page_and_its_compressed_frame(
    buffer: EventBuffer, compress: bool
) -> None:
    big = os.urandom(2500).hex()  # a page of several pieces, even compressed
    rows = (RowChange("shop", "orders", Op.INSERT, None, {"id": n, "note": big}) for n in range(40))
    store(buffer, *(txn(n, row) for n, row in enumerate(rows, 1)))
    deps = ApiDeps(buffer=buffer)
    loops = [make_loop(buffer, deps) for _ in range(3)]
    for loop in loops:
        loop.compress = compress
    filtered = make_loop(buffer, deps, tables="shop.items")  # another selection: its own page
    sends = [Recorder() for _ in loops]

    async def main() -> None:
        pages = [await loop.scan() for loop in loops]
        assert pages[0] is pages[1] is pages[2] and deps.pages.reads == 1
        assert (await filtered.scan()) is not pages[0] and deps.pages.reads == 2
        assert pages[0].size > 2 * CHUNK_BYTES
        for loop, page, send in zip(loops, pages, sends, strict=True):
            await loop._send_batch(page, send)
        assert pages[0].compressed() is pages[1].compressed()

    asyncio.run(main())
    assert [s.scns() for s in sends] == [[scn(n) for n in range(1, 41)]] * 3
    assert deps.budget.snapshot()["held"] == 0


def test_a_first_scan_still_running_is_sent_after_heartbeats_and_its_failure_as_an_end(
    buffer: EventBuffer,
) -> None:
    """get_stream answers 200 when the first scan outlasts a heartbeat period (a large
    transaction would keep the reader waiting for the headers past its read timeout): the loop
    then beats until that scan is done, and ends with the pull's status if it failed."""
    store(buffer, txn(1, ins("orders", 1)))
    loop = make_loop(buffer, wait_ms="100")
    send = Recorder()

    async def slow(failure: Exception | None = None) -> Any:
        await asyncio.sleep(0.5)
        if failure is not None:
            raise failure
        return await loop.scan()

    async def main(failure: Exception | None = None) -> None:
        try:
            async with asyncio.timeout(1.0):
                await loop.run(asyncio.ensure_future(slow(failure)), send, send.writable)
        except TimeoutError:
            pass

    asyncio.run(main())
    shown = [f.transactions[0].scn if f.transactions else None for f in send.frames]
    first = shown.index(scn(1))
    assert first >= 2 and set(shown[:first]) == {None}, shown
    assert all(f.next == loop.query.after for f in send.frames[:first]), "none passed yet"

    from drc.core.errors import ScnTooOldError

    send = Recorder()
    asyncio.run(main(ScnTooOldError("gone", scn(1))))
    end = send.frames[-1].end
    assert end is not None and end["status"] == 410 and end["error"] == wire.ERROR_SCN_TOO_OLD
    assert len(send.frames) >= 3, "heartbeats before the end"
