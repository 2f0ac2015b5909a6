"""The fault layer of the link tests (tests/support/faults.py) against an echo server on
loopback: what it delivers, what it loses, and what each side of a connection sees."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.faults import FaultyLink

SILENCE_S = 0.5  # how long a test listens to be sure a silent link says nothing


class Echo:
    """A server that sends back what it reads and keeps a copy; ``hang_up`` closes every
    connection it holds."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = int(self.listener.getsockname()[1])
        self.received = bytearray()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn = self.listener.accept()[0]
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(65536):
                self.received += data
                conn.sendall(data)
        except OSError:
            pass

    def hang_up(self) -> None:
        for conn in self.conns:
            conn.close()

    def close(self) -> None:
        self.hang_up()
        self.listener.close()


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    yield server
    server.close()


@pytest.fixture
def link(echo: Echo) -> Iterator[FaultyLink]:
    made = FaultyLink("127.0.0.1", echo.port)
    yield made
    made.close()


def _connect(link: FaultyLink) -> socket.socket:
    return socket.create_connection(("127.0.0.1", link.port), timeout=5)


def _read(sock: socket.socket, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        data = sock.recv(65536)
        if not data:
            break
        got += data
    return bytes(got)


def _silent(sock: socket.socket) -> bool:
    """Nothing arrives, and the connection is not closed, for SILENCE_S."""
    sock.settimeout(SILENCE_S)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(5)
    return False


def test_a_clean_link_forwards_both_ways(link: FaultyLink) -> None:
    with _connect(link) as sock:
        sock.sendall(b"x" * 100_000)
        assert _read(sock, 100_000) == b"x" * 100_000
    assert link.delivered == {"up": 100_000, "down": 100_000}


def test_jitter_delays_chunks_and_never_reorders_them(link: FaultyLink) -> None:
    link.shape(delay_s=0.05, jitter_s=0.05)
    with _connect(link) as sock:
        sent = b"".join(b"%05d" % n for n in range(200))
        for n in range(200):
            sock.sendall(b"%05d" % n)
        assert _read(sock, len(sent)) == sent


def test_a_delayed_chunk_is_not_there_before_its_delay(link: FaultyLink) -> None:
    link.shape(delay_s=1.0)
    with _connect(link) as sock:
        sock.sendall(b"late")
        assert _silent(sock)
        assert _read(sock, 4) == b"late"


def test_a_capped_link_sends_at_its_rate(link: FaultyLink) -> None:
    link.shape(rate_bps=200_000)  # 300 kB take 1.5 s each way
    with _connect(link) as sock:
        sock.sendall(b"y" * 300_000)
        early = bytearray()
        until = time.monotonic() + SILENCE_S
        while (left := until - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                early += sock.recv(65536)
            except TimeoutError:
                break
        assert len(early) < 300_000
        sock.settimeout(30)
        assert len(early) + len(_read(sock, 300_000 - len(early))) == 300_000


def test_a_cut_resets_connections_and_refuses_new_ones_until_restored(link: FaultyLink) -> None:
    sock = _connect(link)
    link.cut()
    try:
        assert sock.recv(1) == b""  # ended, by a reset or a close
    except ConnectionResetError:
        pass
    sock.close()
    with pytest.raises(ConnectionRefusedError):
        _connect(link)
    link.restore()
    with _connect(link) as again:
        again.sendall(b"back")
        assert _read(again, 4) == b"back"


def test_flaps_end_with_the_link_up(link: FaultyLink) -> None:
    link.flap(3, 0.05, 0.05)
    with _connect(link) as sock:
        sock.sendall(b"up")
        assert _read(sock, 2) == b"up"


def test_a_blackhole_accepts_bytes_and_delivers_nothing_either_way(
    link: FaultyLink, echo: Echo
) -> None:
    before = _connect(link)
    before.sendall(b"a")
    assert _read(before, 1) == b"a"
    link.blackhole()
    before.sendall(b"lost")
    assert _silent(before)
    with _connect(link) as during:  # accepted, never answered
        during.sendall(b"lost too")
        assert _silent(during)
    assert bytes(echo.received) == b"a"
    echo.hang_up()  # nor does the server's hang-up get through
    assert _silent(before)
    link.heal()
    assert _silent(before)  # a connection that lost bytes stays silent
    before.close()
    with _connect(link) as after:
        after.sendall(b"healed")
        assert _read(after, 6) == b"healed"


@pytest.mark.parametrize("direction", ["up", "down"])
def test_a_half_open_link_is_silent_one_way(link: FaultyLink, echo: Echo, direction: str) -> None:
    link.half_open("down" if direction == "down" else "up")  # (mypy: the Literal)
    with _connect(link) as sock:
        sock.sendall(b"ping")
        assert _silent(sock)
        # down: the server read the request, its answer is lost; up: it never read it
        assert bytes(echo.received) == (b"ping" if direction == "down" else b"")


def test_opened_connections_are_counted(link: FaultyLink) -> None:
    since = time.monotonic()
    for _ in range(3):
        _connect(link).close()
    deadline = time.monotonic() + 5
    while link.connections_since(since) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert link.connections_since(since) == 3
