"""The replication connection's packets, read by DRC once python-mysql-replication set it up.

python-mysql-replication opens the connection (through its ``pymysql_wrapper`` argument, which
is :meth:`Tap.connect`), asks for checksums and heartbeats, sends COM_BINLOG_DUMP and reads the
first event. Every later packet is read here, from the buffered reader pymysql reads the
connection through, so no byte is read twice or skipped:

    packet    [payload length: 3 bytes LE][sequence number: 1 byte][payload]
              a payload of 0xFFFFFF bytes goes on in the next packet
    payload   0x00 + event header + event    an event (drc.replicator.binlog.events)
              0xFE, shorter than 9 bytes     end of the binlog (a non-blocking dump)
              0xFF + errno + message         an error: raised as pymysql raises it

The reader is the file object pymysql makes with ``sock.makefile("rb")``: :meth:`Tap.connect`
gives pymysql a socket (and, for TLS, an ``SSLContext.sslsocket_class``) whose ``makefile``
hands that object to the tap as well. Only public API is used, of pymysql, ssl and socket;
tests/unit/test_binlog_contract.py checks the behaviour relied on.

Errors are pymysql's: a lost connection is OperationalError 2013, as pymysql reports it.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import IO, Any

import pymysql
from pymysql.constants import CR

from drc.core.errors import SourceConfigError

_MAX_PAYLOAD = 0xFFFFFF
_taps: dict[int, Tap] = {}  # socket fd -> the tap of a stream connection being opened
_taps_lock = threading.Lock()


class _TapSocket(socket.socket):
    """A TCP socket whose buffered reader also goes to the tap opening it."""

    def makefile(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return _noted(self.fileno(), super().makefile(*args, **kwargs))


class _TapSSLSocket(ssl.SSLSocket):
    """The same, once pymysql has wrapped the socket in TLS (same fd: the plain socket is
    detached into this one)."""

    def makefile(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return _noted(self.fileno(), super().makefile(*args, **kwargs))


def _noted(fd: int, reader: Any) -> Any:
    with _taps_lock:
        tap = _taps.get(fd)
    if tap is not None:
        tap.reader = reader
    return reader


class Tap:
    """Opens python-mysql-replication's connections (pass :meth:`connect` as its
    ``pymysql_wrapper``) and keeps what DRC reads later: the stream connection's buffered
    reader and the control connection the library's event parsers ask about the server."""

    def __init__(self) -> None:
        self.reader: IO[bytes] | None = None
        self.control: Any = None

    def connect(self, **kwargs: Any) -> Any:
        """A pymysql connection, as ``pymysql.connect(**kwargs)`` makes it."""
        if kwargs.get("db") == "information_schema":  # the library's control connection
            self.control = pymysql.connect(**kwargs)
            return self.control
        conn = pymysql.connect(defer_connect=True, **kwargs)
        context = getattr(conn, "ctx", None)  # pymysql's SSLContext when it may use TLS
        if isinstance(context, ssl.SSLContext):
            context.sslsocket_class = _TapSSLSocket
        sock = _open_socket(conn.host, conn.port, conn.connect_timeout)
        fd = sock.fileno()
        with _taps_lock:
            _taps[fd] = self
        try:
            conn.connect(sock)
        finally:
            with _taps_lock:
                _taps.pop(fd, None)
        if self.reader is None:
            conn.close()
            raise SourceConfigError(
                "the installed PyMySQL does not read the replication connection through "
                "sock.makefile('rb'), which DRC relies on; install a PyMySQL version in the "
                "range pyproject.toml pins"
            )
        return conn

    def frames(self) -> Frames:
        """The packets still to come, once the library has read the first event."""
        if self.reader is None:
            raise SourceConfigError("the replication connection was not opened through the tap")
        return Frames(self.reader)


def _open_socket(host: str, port: int, timeout: float | None) -> _TapSocket:
    """A TCP connection as pymysql opens one (TCP_NODELAY, keepalive), as a :class:`_TapSocket`."""
    try:
        plain = socket.create_connection((host, port), timeout)
    except OSError as exc:
        error = pymysql.err.OperationalError(
            CR.CR_CONN_HOST_ERROR, f"Can't connect to MySQL server on {host!r} ({exc})"
        )
        error.original_exception = exc  # type: ignore[attr-defined]  # as pymysql sets it
        raise error from exc
    sock = _TapSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock


class Frames:
    """The MySQL packets of one replication connection, payload by payload."""

    def __init__(self, reader: IO[bytes]) -> None:
        self._reader = reader
        self._seq: int | None = None  # the next sequence number, once one packet was read

    def next(self) -> bytes | None:
        """The next event's payload (0x00 and the event), or None at the end of the binlog."""
        while True:
            payload = self._payload()
            first = payload[0] if payload else -1
            if first == 0xFF:
                pymysql.err.raise_mysql_exception(payload)
            if first == 0xFE and len(payload) < 9:
                return None
            if first == 0:
                return payload
            # anything else is no event: the library skipped such packets too

    def _payload(self) -> bytes:
        parts = []
        while True:
            header = self._read(4)
            length = header[0] | header[1] << 8 | header[2] << 16
            self._check_sequence(header[3])
            parts.append(self._read(length))
            if length < _MAX_PAYLOAD:
                return parts[0] if len(parts) == 1 else b"".join(parts)

    def _check_sequence(self, seq: int) -> None:
        if self._seq is not None and seq != self._seq:
            if seq == 0:  # MariaDB sends an error with sequence 0 when it shuts down
                raise pymysql.err.OperationalError(
                    CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
                )
            raise pymysql.err.InternalError(
                f"Packet sequence number wrong - got {seq} expected {self._seq}"
            )
        self._seq = (seq + 1) % 256

    def _read(self, size: int) -> bytes:
        try:
            data = self._reader.read(size)
        except OSError as exc:
            raise pymysql.err.OperationalError(
                CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
            ) from exc
        if len(data) < size:
            raise pymysql.err.OperationalError(
                CR.CR_SERVER_LOST, "Lost connection to MySQL server during query"
            )
        return data
