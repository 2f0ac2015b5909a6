"""The subscriber's side of ``GET /v1/stream`` (drc.api.stream): pages read off one response.

:class:`StreamSource` keeps at most one stream open, at the position the subscriber asks for.
A reader thread parses its frames (:class:`drc.api.streamwire.FrameParser`) into a
:class:`FrameQueue`; :meth:`StreamSource.page` waits for the first frame and takes whatever
else has arrived (up to ``max_events`` transactions and ``max_bytes`` record bytes), so a
subscriber that keeps up gets a page per commit and one that is behind gets full pages, as
apply's grouping wants. A page is what a pull after the same SCN would have answered: the
records of whole transactions and the ``next`` / ``newest`` of the last frame taken; a
heartbeat alone makes an empty page (``next`` past filtered-out transactions).

Any other position (a rollback, a first call, a change of URL) closes the stream and opens one
there. A stream that ends (END frame: the server stops, its group's term changed; or a broken
connection, a read timeout of several heartbeats, a malformed frame) raises
:class:`drc.client.http.Transient` from :meth:`page`; the fetcher then reconnects from the last
``next`` taken, here or at the next URL, with its usual backoff. Nothing read but not taken is
used: the new stream sends it again. A stream asked for split pages (``split=1``) may cut a
large transaction into frames, each saying where inside it the stream stands (``within``):
such a frame is always a page of its own, and a new stream starts at that place.

Back-pressure: the queue holds at most ``limit_bytes`` of record bytes (and one frame more
when empty); the reader stops reading the socket until the subscriber takes, so TCP's window
and then the server's send wait, and neither side's memory grows with the lag.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from drc.api import lazyrecords, pullquery, streamwire
from drc.api.streamwire import Frame
from drc.client import http
from drc.core.scn import SCN

log = logging.getLogger("drc.client")

TAKE_SLICE_S = 0.2  # a blocked page() checks for cancellation this often
QUEUE_BYTES = 16 << 20  # at least; the subscriber's max_bytes x 2 when larger
EAGER_BYTES = 1 << 20  # frames arriving while the queue holds less are decoded at once


class Ended(Exception):
    """The stream ended: an END frame (``body`` its JSON), or a failure reading it."""

    def __init__(self, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.body = body


class FrameQueue:
    """Frames between the reader thread and the subscriber, bounded by record bytes."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._frames: collections.deque[Frame] = collections.deque()
        self._bytes = 0
        self._ended: Ended | None = None
        self._closed = False
        self._full = False  # the reader waits for room
        self._cond = threading.Condition()

    @property
    def held_bytes(self) -> int:
        with self._cond:
            return self._bytes

    def put(self, frame: Frame) -> bool:
        """Queue ``frame``, waiting while the queue is full; False once closed."""
        with self._cond:
            while self._frames and self._bytes + frame.size > self.limit_bytes:
                if self._closed:
                    return False
                self._full = True
                self._cond.wait()
            if self._closed:
                return False
            self._frames.append(frame)
            self._bytes += frame.size
            self._cond.notify()  # the subscriber, if it waits (one thread each side)
            return True

    def end(self, ended: Ended) -> None:
        """No more frames will come; ``page`` raises ``ended`` once the queue is drained."""
        with self._cond:
            if self._ended is None:
                self._ended = ended
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._frames.clear()
            self._bytes = 0
            self._cond.notify_all()

    def take(self, max_events: int, max_bytes: int, timeout_s: float | None) -> list[Frame]:
        """Wait up to ``timeout_s`` for a frame, then take every frame there, up to
        ``max_events`` transactions and ``max_bytes`` (the first frame always). [] on timeout;
        raises the Ended given to :meth:`end` when nothing is left before it."""
        with self._cond:
            if not self._frames and self._ended is None:
                self._cond.wait(timeout_s)
            frames = self._frames
            if not frames:
                if self._ended is not None:
                    raise self._ended
                return []
            taken: list[Frame] = []
            events = size = 0
            while frames:
                frame = frames[0]
                count = _transactions(frame)
                if taken and (events + count > max_events or size + frame.size > max_bytes):
                    break
                if taken and frame.within:
                    break  # a cut page (split) is a page of its own, as a pull answers it
                taken.append(frames.popleft())
                events += count
                size += frame.size
                self._bytes -= frame.size
                if frame.within:
                    break
            if self._full:  # the reader waits for room
                self._full = False
                self._cond.notify_all()
            return taken


def _transactions(frame: Frame) -> int:
    return sum(1 for head in lazyrecords.heads(frame.transactions) if head.last_fragment)


def read_frames(chunks: Iterator[bytes], queue: FrameQueue) -> None:
    """The reader thread's work: frames from ``chunks`` into ``queue`` until the stream ends
    or the queue is closed; always ends the queue with why it stopped."""
    # Frames queued behind others are kept as bytes until taken: a consumer that is behind
    # (a backlog, a large transaction in pages) holds the queue's bytes, not ~10x in objects.
    parser = streamwire.FrameParser(lambda: queue.held_bytes >= EAGER_BYTES)
    try:
        for chunk in chunks:
            for frame in parser.feed(chunk):
                if frame.end is not None:
                    body = frame.end
                    queue.end(Ended(f"{body.get('error')}: {body.get('message')}", body))
                    return
                if not queue.put(frame):
                    return
        queue.end(Ended("the server closed the stream without an end frame"))
    except streamwire.BrokenStream as exc:
        queue.end(Ended(f"malformed stream: {exc}"))
    except Exception as exc:  # network errors, timeouts: the fetcher reconnects
        queue.end(Ended(f"{type(exc).__name__}: {exc}"))


class OpenStream:
    """One stream's response, its reader thread and queue; ``position`` is the ``next`` of
    the last page taken and its ``within`` (where a new stream would start)."""

    def __init__(
        self, url: str, after: SCN, opened: http.Opened, limit_bytes: int, within: int = 0
    ) -> None:
        self.url = url
        self.epoch = opened.epoch
        self.term = opened.term
        self.position = (after, within)
        self._opened = opened
        self.queue = FrameQueue(limit_bytes)
        self._thread = threading.Thread(
            target=read_frames, args=(opened.chunks, self.queue), name="drc-stream", daemon=True
        )
        self._thread.start()

    def frames(
        self, max_events: int, max_bytes: int, cancelled: Callable[[], bool]
    ) -> list[Frame] | None:
        """The next frames: waits for one, slice by slice; None once ``cancelled``; raises
        Transient when the stream ended."""
        while not cancelled():
            try:
                frames = self.take(max_events, max_bytes, TAKE_SLICE_S)
            except Ended as exc:
                raise http.Transient(f"the stream from {self.url} ended: {exc}") from exc
            if frames:
                return frames
        return None

    def take(self, max_events: int, max_bytes: int, timeout_s: float | None) -> list[Frame]:
        """The frames there, waiting up to ``timeout_s`` for one; raises Ended."""
        frames = self.queue.take(max_events, max_bytes, timeout_s)
        if frames:
            self.position = (frames[-1].next, frames[-1].within)
        return frames

    def page(self, frames: list[Frame]) -> http.Page:
        last = frames[-1]
        txns = lazyrecords.join([f.transactions for f in frames])
        return http.Page(self.epoch, last.next, last.newest, txns, last.within)

    def hang_up(self) -> None:
        self._opened.close()

    def close(self) -> None:
        self.queue.close()
        self._opened.close()


class StreamSource:
    """The open stream of a fetcher (at most one), and the URLs that have none (404)."""

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.unsupported: dict[str, float] = {}  # URL -> when to ask it for a stream again
        self._lock = threading.Lock()  # one page() at a time; a cancelled one leaves quickly
        self._open: OpenStream | None = None

    def page(
        self,
        url: str,
        after: SCN,
        open_stream: Callable[[], http.Opened],
        cancelled: Callable[[], bool],
        within: int = 0,
    ) -> http.Page | None:
        """The page after ``after`` (and ``within``) from ``url``'s stream, opened
        (``open_stream``, which asks for that position) unless the open one is there already;
        None if ``cancelled`` first. Raises what opening raises, and Transient when the stream
        ends."""
        got = self.frames(url, after, open_stream, cancelled, within)
        return None if got is None else got[0].page(got[1])

    def frames(
        self,
        url: str,
        after: SCN,
        open_stream: Callable[[], http.Opened],
        cancelled: Callable[[], bool],
        within: int = 0,
    ) -> tuple[OpenStream, list[Frame]] | None:
        """:meth:`page`'s frames as they came, with the stream that brought them."""
        with self._lock:
            stream = self._open
            if stream is None or stream.url != url or stream.position != (after, within):
                self._close()
                limit = max(QUEUE_BYTES, 2 * self.max_bytes)
                stream = self._open = OpenStream(url, after, open_stream(), limit, within)
            try:
                frames = stream.frames(self.max_events, self.max_bytes, cancelled)
            except http.Transient:
                self._close()
                raise
            return None if frames is None else (stream, frames)

    def ready(
        self, after: SCN, timeout_s: float | None, within: int = 0
    ) -> tuple[str, http.Page] | None:
        """The next page of the open stream, if it is at ``after``, in the calling thread:
        (url, page), waiting up to ``timeout_s`` (None: as long as it takes); TimeoutError if
        nothing came. None if there is no such stream, or it ended (:meth:`page` then reports
        that to the fetcher), or a fetch is using it."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            stream = self._open
            if stream is None or stream.position != (after, within):
                return None
            while True:
                try:
                    frames = stream.take(self.max_events, self.max_bytes, timeout_s)
                except Ended:
                    return None
                if frames:
                    return stream.url, stream.page(frames)
                if timeout_s is not None:
                    raise TimeoutError()
        finally:
            self._lock.release()

    def may_stream(self, url: str, now: float) -> bool:
        """False for a while after ``url`` answered that it has no stream (an older server,
        which an upgrade may replace: then it is streamed from again)."""
        until = self.unsupported.get(url)
        if until is None:
            return True
        if now < until:
            return False
        del self.unsupported[url]
        return True

    def interrupt(self, why: str) -> None:
        """End the open stream now, from any thread (its server is no longer the one to read:
        a group's leader changed): the page waiting on it raises Transient with ``why``."""
        stream = self._open  # no lock: a page() holds it while it waits
        if stream is not None:
            stream.queue.end(Ended(why))
            stream.hang_up()

    def streaming(self, after: SCN, within: int = 0) -> bool:
        """Whether a stream is open at ``after`` (no need to prefetch: it reads ahead)."""
        stream = self._open
        return stream is not None and stream.position == (after, within)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None


def stream_params(params: dict[str, str]) -> dict[str, str]:
    """A pull's parameters as the stream's: ``wait_ms`` is the heartbeat period."""
    out = dict(params)
    if int(out.get(pullquery.PARAM_WAIT_MS, "0")) <= 0:
        out.pop(pullquery.PARAM_WAIT_MS, None)  # the server's default period
    return out
