"""A faulty network link for tests: a TCP forwarder (asyncio, in a thread of its own) that a
test puts between a reader and the server it reads (an apply channel and the other
datacenter's pull API, a group follower and its leader) and then degrades.

Faults, each switched on and off while connections are open:

- ``shape(delay_s, jitter_s, rate_bps)``: every chunk arrives ``delay_s`` + up to ``jitter_s``
  late (in order, as TCP would deliver it), at most ``rate_bps`` bytes a second per direction;
- ``cut()`` / ``restore()``: open connections are reset and new ones refused (a link or a
  server down), until restored; ``flap(times, down_s, up_s)`` does both in turn;
- ``blackhole()``: connections are accepted and stay open, bytes are read and never delivered,
  either way (a router dropping packets, a stateful firewall that forgot the flows);
- ``half_open(direction)``: one direction is silent (``"down"``: the server's answers are
  lost, ``"up"``: the requests), the other still flows.

``heal()`` ends a blackhole or half-open link for new connections. A connection that lost
bytes stays silent the way it lost them (its peers' views of the stream no longer agree; a
real link either retransmits them, which looks like a long delay, or the flow's state is gone):
only a reader that gives it up and connects again gets through, which is what the tests want
to see. ``opened`` holds the monotonic time of every accepted connection, so a test can tell
when a reader gave up a silent connection; ``delivered`` counts the bytes sent on each way.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

Direction = Literal["up", "down"]  # up: reader to server, down: server to reader
CHUNK = 16384
QUEUED_CHUNKS = 64  # per direction: a slow link pushes back on the sender like TCP would
CALL_TIMEOUT_S = 10.0


@dataclass
class _Shape:
    delay_s: float = 0.0
    jitter_s: float = 0.0
    rate_bps: float | None = None


@dataclass(eq=False)
class _Conn:
    writers: list[asyncio.StreamWriter]
    silent: set[Direction] = field(default_factory=set)
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def abort(self) -> None:
        self.closed.set()
        for writer in self.writers:
            writer.transport.abort()


class FaultyLink:
    """Forwards ``listen``:``port`` (a free port) to ``host``:``upstream_port``; ``url`` is
    what a reader is given instead of the server's. ``close()`` when done."""

    def __init__(self, host: str, upstream_port: int, listen: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self.listen = listen
        self.port = _free_port()
        self.opened: list[float] = []
        self.delivered: dict[Direction, int] = {"up": 0, "down": 0}  # bytes, all connections
        self._shape = _Shape()
        self._silent: set[Direction] = set()  # of connections opened from now on
        self._conns: set[_Conn] = set()
        self._cuts = 0  # a connection accepted before a cut is reset by it
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Future[None] | None = None
        self._random = random.Random(27)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.restore()

    @property
    def url(self) -> str:
        return f"http://{self.listen}:{self.port}"

    # -- faults (called from the test's thread) ------------------------------------------------

    def shape(
        self, delay_s: float = 0.0, jitter_s: float = 0.0, rate_bps: float | None = None
    ) -> None:
        """Delay, jitter and a bandwidth cap for every chunk sent from now on (all zero/None:
        a clean link again)."""
        self._shape = _Shape(delay_s, jitter_s, rate_bps)

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until :meth:`restore`."""
        self._call(self._cut())

    def restore(self) -> None:
        """Accept connections again (after :meth:`cut`); no-op while accepting."""
        self._call(self._listen())

    def flap(self, times: int, down_s: float, up_s: float) -> None:
        """Cut and restore the link ``times`` times: down ``down_s``, then up ``up_s``."""
        for _ in range(times):
            self.cut()
            time.sleep(down_s)
            self.restore()
            time.sleep(up_s)

    def blackhole(self) -> None:
        """From now on nothing gets through either way, on open and new connections alike;
        connections are accepted and never closed by the link."""
        self._fall_silent({"up", "down"})

    def half_open(self, direction: Direction) -> None:
        """From now on ``direction`` is silent on open and new connections; the other flows."""
        self._fall_silent({direction})

    def heal(self) -> None:
        """New connections get through again (open ones that lost bytes stay silent)."""
        self._silent = set()

    def close(self) -> None:
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT_S)
        self._loop.close()

    def connections_since(self, since: float) -> int:
        """How many connections were accepted after monotonic time ``since``."""
        return sum(at > since for at in list(self.opened))

    def _fall_silent(self, directions: set[Direction]) -> None:
        self._silent = set(directions)

        async def mark() -> None:  # on the loop: no pump is between reading and deciding
            for conn in self._conns:
                conn.silent |= directions

        self._call(mark())

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT_S)

    # -- the event loop's side -----------------------------------------------------------------

    async def _listen(self) -> None:
        # A socket of its own rather than asyncio.start_server: a server closed while a
        # connection is half accepted leaks that connection (open, never served).
        if self._listener is None:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.listen, self.port))
            listener.listen(64)
            listener.setblocking(False)
            self._listener = listener
            self._accepting = asyncio.ensure_future(self._accept(listener, self._cuts))

    async def _accept(self, listener: socket.socket, cuts: int) -> None:
        loop = asyncio.get_running_loop()
        while True:
            client, _ = await loop.sock_accept(listener)
            if cuts != self._cuts:  # accepted just before a cut
                client.close()
                return
            asyncio.ensure_future(self._serve(cuts, client))

    async def _cut(self) -> None:
        listener, self._listener = self._listener, None
        self._cuts += 1
        if self._accepting is not None:
            self._accepting.cancel()
            self._accepting = None
        if listener is not None:
            listener.close()  # connections still in its backlog are reset
        for conn in list(self._conns):
            conn.abort()
        self._conns.clear()

    async def _shutdown(self) -> None:
        await self._cut()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:  # pumps still sleeping out a delay
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, cuts: int, client: socket.socket) -> None:
        """A connection accepted by the listener opened after ``cuts`` cuts."""
        self.opened.append(time.monotonic())
        reader, writer = await asyncio.open_connection(sock=client)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()  # the server is down: so is the link
            return
        if cuts != self._cuts:  # cut while connecting upstream
            writer.transport.abort()
            up_writer.transport.abort()
            return
        conn = _Conn([writer, up_writer], set(self._silent))
        self._conns.add(conn)
        try:
            await asyncio.gather(
                self._pump(conn, "up", reader, up_writer),
                self._pump(conn, "down", up_reader, writer),
            )
        finally:
            self._conns.discard(conn)
            conn.abort()

    async def _pump(
        self,
        conn: _Conn,
        direction: Direction,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Read one direction and hand its chunks to a sender that delivers them in order,
        each when its delay has passed and the bandwidth allows; ends (and so ends the
        connection) when either side closes."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(QUEUED_CHUNKS)
        sender = asyncio.ensure_future(self._send(conn, direction, queue, writer))
        due_last = 0.0
        try:
            while not conn.closed.is_set():
                data = await reader.read(CHUNK)
                if not data:
                    break
                if direction in conn.silent:
                    continue  # accepted, never delivered
                shape = self._shape
                late = shape.delay_s + self._random.uniform(0, shape.jitter_s)
                due_last = max(due_last, time.monotonic() + late)  # jitter never reorders
                await queue.put((due_last, data))
            if direction in conn.silent:  # nor is a hang-up delivered: the peer keeps waiting
                await conn.closed.wait()
        except OSError:
            pass
        finally:
            await queue.put(None)
            await asyncio.gather(sender, return_exceptions=True)
            conn.abort()

    async def _send(
        self,
        conn: _Conn,
        direction: Direction,
        queue: asyncio.Queue[tuple[float, bytes] | None],
        writer: asyncio.StreamWriter,
    ) -> None:
        free_at = 0.0  # when the capped link has sent what it was given
        failed = False
        while (item := await queue.get()) is not None:
            if failed:
                continue  # drained, so the reading side never blocks on a full queue
            due, data = item
            rate = self._shape.rate_bps
            if rate:
                free_at = max(free_at, time.monotonic()) + len(data) / rate
                due = max(due, free_at)
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                # Counted first: a reader may see the bytes before this coroutine runs again.
                self.delivered[direction] += len(data)
                writer.write(data)
                await writer.drain()
            except OSError:
                failed = True
                conn.abort()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
