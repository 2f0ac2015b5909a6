"""The driver at the boundary: connection settings, connections, and the driver's errors.

The one module of DRC (with the binlog reader, drc.replicator.source, and the sandbox) that
imports pymysql. Two kinds of connection::

    connect(settings, ...)   a pymysql connection (DB-API: cursor, commit, close): the lease,
                             the heartbeat, verify's and the snapshot origin's sessions
    open_link(...)           a Link: the same, plus the Wire (drc.mysql.protocol) on its socket,
                             which pipelines statements; drc.mysql.session.Session uses it

Every connection speaks utf8mb4 and uses TLS as its ``tls`` settings say (drc.tls.MysqlTls).
For a Link, DRC makes the socket and hands it to pymysql (``Connection.connect(sock)``), so
the Wire and pymysql share it. With TLS the socket pymysql ends up on is the one its context's
``wrap_socket`` returned: pymysql is given a context (:class:`_Keeping`) that wraps with the
configured one and keeps that socket. In the "preferred" mode pymysql decides for itself when
it makes the socket; here the server's greeting, peeked at before pymysql reads it, says
whether it offers TLS, and the same choice is made (TLS unverified if offered, else plaintext).

Errors: :data:`DRIVER_ERRORS` are what a driver call may raise; :func:`translated` turns them
into drc.mysql.errors' tree. The driver's own classes are named here for the few callers that
handle one themselves (a missing table, a heartbeat that only counts failures).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pymysql
import pymysql.cursors
from pymysql import converters
from pymysql.constants import CLIENT

from drc.core.errors import DrcError
from drc.mysql import protocol
from drc.mysql.errors import translate
from drc.tls import MysqlTls

FOUND_ROWS = CLIENT.FOUND_ROWS  # affected rows = matched rows
DriverError = pymysql.MySQLError
OperationalError = pymysql.err.OperationalError
ProgrammingError = pymysql.err.ProgrammingError  # e.g. no such table (1146)
DRIVER_ERRORS = (pymysql.MySQLError, OSError, EOFError)
_CR_CONN_HOST_ERROR = 2003
_GREETING_POLL_S = 0.001


@dataclass(frozen=True)
class TargetSettings:
    """How to reach a server (the target, an origin, a source for the heartbeat)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    connect_timeout_s: float = 10.0
    tls: MysqlTls = MysqlTls(section="target")

    def __repr__(self) -> str:  # never print the password
        return f"TargetSettings({self.user}@{self.host}:{self.port})"


def connect(settings: Any, *, timeout_s: float | None = None, **options: Any) -> Any:
    """A pymysql connection to ``settings``' server (anything with host, port, user, password,
    connect_timeout_s and tls), autocommit unless ``options`` say otherwise."""
    options.setdefault("autocommit", True)
    return pymysql.connect(
        host=settings.host, port=settings.port, user=settings.user, password=settings.password,
        charset="utf8mb4",
        connect_timeout=settings.connect_timeout_s if timeout_s is None else timeout_s,
        **settings.tls.pymysql_options(), **options,
    )  # fmt: skip


def streaming_cursor(conn: Any) -> Any:
    """A cursor that reads its rows from the server as they are iterated (a big result)."""
    return conn.cursor(pymysql.cursors.SSCursor)


@contextmanager
def translated(what: str) -> Iterator[None]:
    """Driver errors raised inside become drc.mysql.errors' (DRC's own pass through)."""
    try:
        yield
    except DrcError:
        raise
    except DRIVER_ERRORS as exc:
        raise translate(exc, what) from exc


class Link:
    """A pymysql connection (one statement at a time: cursor, commit, rollback, escape) and
    the Wire on its socket (pipelines: send, receive)."""

    def __init__(self, conn: Any, wire: protocol.Wire) -> None:
        self.conn, self.wire = conn, wire
        self.cursor = conn.cursor
        self.commit = conn.commit
        self.rollback = conn.rollback
        self.escape: Callable[[Any], str] = conn.escape
        self.send: Callable[[Sequence[str]], None] = wire.send
        self.receive: Callable[[], protocol.Reply | protocol.ServerError] = wire.receive

    @property
    def open(self) -> bool:
        return bool(self.conn.open)

    def close(self) -> None:
        """Close the connection; the Wire's reader too, which holds the socket open."""
        try:
            self.wire.close()
        finally:
            self.conn.close()


def open_link(
    *, host: str, port: int, connect_timeout: float, tls: MysqlTls, **options: Any
) -> Link:
    """A Link to ``host``:``port``; ``options`` are pymysql's (user, password, charset, ...).
    The TLS files are read first: a ConfigError, before any network I/O."""
    chosen = tls.pymysql_options()
    sock = _socket(host, port, connect_timeout)
    try:
        if tls.mode == "preferred":
            chosen = {"ssl": tls.context()} if _offers_tls(sock, host, connect_timeout) else {}
            chosen = chosen or {"ssl_disabled": True}
        keeping = _Keeping(chosen["ssl"]) if "ssl" in chosen else None
        if keeping is not None:
            chosen = {"ssl": keeping}
        conn = pymysql.connect(
            host=host, port=port, connect_timeout=connect_timeout, defer_connect=True,
            **chosen, **options,
        )  # fmt: skip
        conn.connect(sock)
    except BaseException:
        sock.close()
        raise
    used = keeping.kept if keeping is not None and keeping.kept is not None else sock
    wire = protocol.Wire(
        used.sendall, used.makefile("rb"), conn.decoders, conn.encoding, converters.through
    )
    return Link(conn, wire)


class _Keeping(ssl.SSLContext):
    """The TLS context pymysql is given for a Link: pymysql only calls its ``wrap_socket``,
    which wraps with the configured context and keeps the socket it returns."""

    def __new__(cls, configured: ssl.SSLContext) -> _Keeping:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)

    def __init__(self, configured: ssl.SSLContext) -> None:
        self.configured = configured
        self.kept: ssl.SSLSocket | None = None

    def wrap_socket(self, sock: socket.socket, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # type: ignore[override]
        self.kept = self.configured.wrap_socket(sock, *args, **kwargs)
        return self.kept


def _socket(host: str, port: int, timeout_s: float) -> socket.socket:
    """A TCP connection set up as pymysql sets up its own (no delay, keepalive); failing, the
    error pymysql itself raises (2003)."""
    try:
        sock = socket.create_connection((host, port), timeout_s)
    except OSError as exc:
        raise _cannot_connect(host, exc) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock


def _offers_tls(sock: socket.socket, host: str, timeout_s: float) -> bool:
    """Whether the server's greeting, peeked at (left for pymysql to read), offers TLS."""
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            data = sock.recv(512, socket.MSG_PEEK)
            flags = protocol.greeting_capabilities(data) if data else 0
            if flags is not None:
                return bool(flags & protocol.CLIENT_SSL)
            if time.monotonic() > deadline:
                raise TimeoutError("no complete greeting from the server")
            time.sleep(_GREETING_POLL_S)  # the rest of the greeting is on its way
    except OSError as exc:
        raise _cannot_connect(host, exc) from exc


def _cannot_connect(host: str, exc: OSError) -> OperationalError:
    failed = OperationalError(
        _CR_CONN_HOST_ERROR, f"Can't connect to MySQL server on {host!r} ({exc})"
    )
    failed.original_exception = exc  # type: ignore[attr-defined]  # as pymysql's carry it
    return failed
