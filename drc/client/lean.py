"""Keep-alive connections for the one request a subscriber repeats: ``GET /v1/events``
(and a connection of its own for each ``GET /v1/stream``, read as it arrives).

A subscriber that keeps up pulls once per transaction or two, and httpx's request machinery
(URL and header models, its transport layers) cost more CPU per pull than the server's answer.
Here each pull is one ``http.client`` exchange on a kept-alive connection, and the answer is
handed back as an ``httpx.Response``, so everything that reads it (:mod:`drc.client.http`'s
status classification, records and JSON pages) is the same code as before.

Used only where httpx would have gone straight to the network: not with a custom transport
(tests), nor with proxy settings in the environment, which httpx honours and this does not.
TLS uses the client's own ``verify`` (an SSLContext, a CA file, or a bool), so HTTPS to a
private CA or with a client certificate behaves as with httpx. A failure is raised as httpx's
ConnectError / ReadTimeout / ReadError with the original exception as its cause, which
:func:`drc.client.http.failure` classifies (a refused certificate stays a TLS error). A kept
connection the server has closed meanwhile is reopened once, transparently.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import httpx

_IDLE_PER_HOST = 4
_CHUNK_BYTES = 256 << 10


class LeanPool:
    """Idle connections by (scheme, host, port); safe to use from several threads."""

    def __init__(self, verify: Any, headers: dict[str, str]) -> None:
        self._verify = verify
        self._context: ssl.SSLContext | None = None
        self._headers = headers
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._busy: set[http.client.HTTPConnection] = set()  # exchanges under way
        self._aborts = 0  # abort() calls so far: an exchange it hung up is not tried again

    @staticmethod
    def usable(transport: Any) -> bool:
        """Whether a client made with this transport would go straight to the network."""
        return transport is None and not urllib.request.getproxies()

    def get(self, url: str, params: dict[str, str], accept: str, timeout: httpx.Timeout) -> Any:
        key, target, headers = self._request(url, params, accept)
        aborts = self._aborts
        for attempt in (0, 1):
            conn, reused = self._take(key, timeout)
            self._under_way(conn, True)
            try:
                conn.request("GET", target, headers=headers)
                answer = conn.getresponse()
                body = answer.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                retry = reused and attempt == 0 and aborts == self._aborts
                if retry and _closed_meanwhile(exc):
                    continue  # the server closed the idle connection: once more on a new one
                raise _as_httpx(exc, url) from exc
            finally:
                self._under_way(conn, False)
            if answer.will_close:
                conn.close()
            else:
                self._give(key, conn)
            return httpx.Response(answer.status, headers=answer.getheaders(), content=body)
        raise AssertionError("unreachable")

    def open(
        self, url: str, params: dict[str, str], accept: str, timeout: httpx.Timeout
    ) -> tuple[httpx.Response, Iterator[bytes], Callable[[], None]]:
        """A GET whose body is read as it arrives (a stream), on a connection of its own:
        the answer's status and headers (and its whole body unless 2xx), the body's chunks,
        and what closes the connection."""
        key, target, headers = self._request(url, params, accept)
        conn = self._connect(key, timeout)
        self._under_way(conn, True)
        try:
            conn.request("GET", target, headers=headers)
            answer = conn.getresponse()
            body = b"" if 200 <= answer.status < 300 else answer.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self._under_way(conn, False)
            raise _as_httpx(exc, url) from exc
        response = httpx.Response(answer.status, headers=answer.getheaders(), content=body)

        def close() -> None:
            self._under_way(conn, False)
            _hang_up(conn)

        return response, _chunks(answer, url), close

    def abort(self) -> int:
        """Hang up every exchange under way (its reader gets a ReadError at once) and drop
        the idle connections: the caller learned that the server they go to is gone or no
        longer the one to ask (a group's leader changed). How many were under way."""
        with self._lock:
            self._aborts += 1
            busy = list(self._busy)
        for conn in busy:  # shutdown only: the reading thread closes what it reads
            _shut_down(conn)
        self.close()
        return len(busy)

    def _under_way(self, conn: http.client.HTTPConnection, busy: bool) -> None:
        with self._lock:
            if busy:
                self._busy.add(conn)
            else:
                self._busy.discard(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def _request(
        self, url: str, params: dict[str, str], accept: str
    ) -> tuple[tuple[str, str, int], str, dict[str, str]]:
        parts = urllib.parse.urlsplit(url)
        key = (parts.scheme, parts.hostname or "", parts.port or _default_port(parts.scheme))
        target = f"{parts.path or '/'}?{urllib.parse.urlencode(params)}"
        return key, target, {**self._headers, "Accept": accept}

    def _take(
        self, key: tuple[str, str, int], timeout: httpx.Timeout
    ) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            idle = self._idle.get(key)
            conn = idle.pop() if idle else None
        if conn is not None:
            if conn.sock is not None:
                conn.sock.settimeout(timeout.read)
            return conn, True
        return self._connect(key, timeout), False

    def _connect(
        self, key: tuple[str, str, int], timeout: httpx.Timeout
    ) -> http.client.HTTPConnection:
        read_s = timeout.read
        scheme, host, port = key
        connect_s = timeout.connect
        conn: http.client.HTTPConnection
        try:
            if scheme == "https":
                conn = http.client.HTTPSConnection(
                    host, port, timeout=connect_s, context=self._ssl_context()
                )
            else:
                conn = http.client.HTTPConnection(host, port, timeout=connect_s)
            conn.connect()
        except OSError as exc:
            raise httpx.ConnectError(f"{type(exc).__name__}: {exc}") from exc
        assert conn.sock is not None
        conn.sock.settimeout(read_s)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _give(self, key: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < _IDLE_PER_HOST:
                idle.append(conn)
                return
        conn.close()

    def _ssl_context(self) -> ssl.SSLContext:
        if self._context is None:
            verify = self._verify
            if isinstance(verify, ssl.SSLContext):
                self._context = verify
            elif verify is False:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                self._context = context
            elif isinstance(verify, str):
                self._context = ssl.create_default_context(cafile=verify)
            else:
                self._context = ssl.create_default_context()
        return self._context


def _chunks(answer: http.client.HTTPResponse, url: str) -> Iterator[bytes]:
    """A streamed body as it arrives (chunked transfer decoded by http.client)."""
    try:
        while data := answer.read1(_CHUNK_BYTES):
            yield data
    except (OSError, http.client.HTTPException) as exc:
        raise _as_httpx(exc, url) from exc


def _hang_up(conn: http.client.HTTPConnection) -> None:
    """Close a stream's connection now, even while its reader is blocked receiving on it
    (close alone leaves the socket open while the answer's file or a receive holds it), so
    the server sees the hang-up at once and frees the stream's long-poll slot."""
    _shut_down(conn)
    conn.close()


def _shut_down(conn: http.client.HTTPConnection) -> None:
    """Both directions of the connection's socket ended: a receive blocked on it returns."""
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _closed_meanwhile(exc: BaseException) -> bool:
    return isinstance(
        exc,
        http.client.RemoteDisconnected
        | BrokenPipeError
        | ConnectionResetError
        | http.client.BadStatusLine,
    )


def _as_httpx(exc: BaseException, url: str) -> httpx.TransportError:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, TimeoutError | socket.timeout):
        return httpx.ReadTimeout(text)
    if isinstance(exc, http.client.HTTPException):
        return httpx.RemoteProtocolError(text)
    return httpx.ReadError(text)
