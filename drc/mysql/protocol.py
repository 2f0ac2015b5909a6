"""The MySQL client protocol, as much of it as DRC pipelines: COM_QUERY out, replies in.

pymysql runs one statement at a time (send, then read its reply); it has no public way to send
several commands before reading. This module does that on the connection's socket, between
pymysql's own exchanges (never during one: a pipeline is sent and all its replies read before
pymysql is used again, so neither reader finds the other's bytes in its buffer).

Packets (MariaDB docs, "0 - Packet")::

    +--------------------+-----------+----------------------------------+
    | length (3 bytes LE)| seq (1)   | payload (length bytes)           |
    +--------------------+-----------+----------------------------------+

A payload of 2^24 - 1 bytes or more goes out in packets of 0xFFFFFF bytes, the last one shorter
(empty if need be). ``seq`` counts the packets of one exchange: the command starts at 0, its
reply goes on from where the command stopped (1 after a command of one packet).

    command    0x03 (COM_QUERY), the statement's text
    OK         0x00, affected rows (lenenc), insert id (lenenc), status (2), warnings (2), ...
    ERR        0xff, code (2), ``#`` and SQLSTATE (5), message
    result     column count (lenenc); a column definition per column; EOF; a row per packet
               (text protocol: each value a lenenc string, 0xfb for NULL); EOF, or ERR
    EOF        0xfe, warnings (2), status (2): a payload shorter than 9 bytes

Length-encoded integers: below 0xfb one byte; 0xfc + 2 bytes, 0xfd + 3, 0xfe + 8 (LE).

Values in rows are converted as pymysql converts them (its ``decoders`` by column type, text in
the connection's encoding, binary columns left as bytes), so a pipelined SELECT reads exactly
what a cursor would. The connection's handshake greeting tells whether the server offers TLS
(:func:`greeting_capabilities`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

COM_QUERY = 0x03
MAX_PAYLOAD = 0xFFFFFF
_OK, _EOF, _ERR, _NULL = 0x00, 0xFE, 0xFF, 0xFB

# Column types (pymysql.constants.FIELD_TYPE) whose values are text, or bytes when the column's
# character set is binary (63); every other type is ASCII digits and signs.
JSON = 245
TEXT_TYPES = frozenset({16, 252, 251, 250, 254, 249, 253, 15, 255})
BINARY_CHARSET = 63
CLIENT_SSL = 0x800  # capability flag: the server offers TLS


class WireError(ConnectionError):
    """The connection is out of step or gone (a reply missing, cut short or out of sequence):
    nothing more can be read from it, so it is dropped."""


class ServerError(Exception):
    """An ERR reply: ``args`` are (code, message), as the driver's errors carry them."""


class Reply(NamedTuple):
    """A statement's reply: affected rows (the number of rows for a SELECT), the result's
    column names and rows (empty without a result set) and the server status flags. (A named
    tuple: one is made per statement, and it is the quickest immutable value to make.)"""

    affected_rows: int
    rows: tuple[tuple[Any, ...], ...] = ()
    names: tuple[str, ...] = ()
    status: int = 0


# ---------------------------------------------------------------------------- framing (pure)


def command(text: str, encoding: str = "utf-8") -> tuple[bytes, int]:
    """The packets of one COM_QUERY, and how many there are (the reply's first seq)."""
    data = text.encode(encoding)
    if len(data) + 1 < MAX_PAYLOAD:
        return (len(data) + 1).to_bytes(3, "little") + b"\x00\x03" + data, 1
    payload = bytes((COM_QUERY,)) + data
    packets = []
    for seq, start in enumerate(range(0, len(payload) + 1, MAX_PAYLOAD)):
        piece = payload[start : start + MAX_PAYLOAD]
        packets.append(len(piece).to_bytes(3, "little") + bytes((seq % 256,)) + piece)
    return b"".join(packets), len(packets)


def lenenc_int(data: bytes, pos: int) -> tuple[int, int]:
    """A length-encoded integer at ``pos``, and the position after it."""
    first = data[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}.get(first)
    if width is None:
        raise WireError(f"0x{first:02x} does not start a length-encoded integer")
    end = pos + 1 + width
    return int.from_bytes(data[pos + 1 : end], "little"), end


def lenenc_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """A length-encoded string at ``pos`` (None for NULL), and the position after it."""
    if data[pos] == _NULL:
        return None, pos + 1
    size, pos = lenenc_int(data, pos)
    return data[pos : pos + size], pos + size


def ok(payload: bytes) -> Reply:
    """An OK packet's affected rows and status."""
    if payload[1] < 0xFB and payload[2] < 0xFB:  # both counts in one byte: most writes
        return Reply(payload[1], (), (), payload[3] | payload[4] << 8)
    affected, pos = lenenc_int(payload, 1)
    _insert_id, pos = lenenc_int(payload, pos)
    return Reply(affected, status=int.from_bytes(payload[pos : pos + 2], "little"))


def error(payload: bytes) -> ServerError:
    """An ERR packet as the exception it reports (the caller decides whether to raise it)."""
    code = int.from_bytes(payload[1:3], "little")
    message = payload[9:] if payload[3:4] == b"#" else payload[3:]
    return ServerError(code, message.decode("utf-8", "replace"))


def is_eof(payload: bytes) -> bool:
    return payload[0] == _EOF and len(payload) < 9


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_code: int
    charset: int


def column(payload: bytes, encoding: str) -> Column:
    """A column definition: catalog, schema, table, original table, name, original name, then
    the fixed fields (charset 2, length 4, type 1, flags 2, decimals 1)."""
    pos = 0
    name = b""
    for i in range(6):
        value, pos = lenenc_bytes(payload, pos)
        if i == 4:
            name = value or b""
    _fixed, pos = lenenc_int(payload, pos)
    charset = int.from_bytes(payload[pos : pos + 2], "little")
    return Column(name.decode(encoding), payload[pos + 6], charset)


Converter = tuple[str | None, Callable[[Any], Any] | None]


def converters(
    columns: Sequence[Column], decoders: Mapping[int, Callable[[Any], Any]], encoding: str,
    through: Callable[[Any], Any] | None = None,
) -> list[Converter]:  # fmt: skip
    """Per column, the encoding its text is decoded with (None: bytes) and the decoder its value
    goes through (None: as decoded), chosen as pymysql chooses them."""
    out: list[Converter] = []
    for c in columns:
        if c.type_code == JSON:
            text: str | None = encoding
        elif c.type_code in TEXT_TYPES:
            text = None if c.charset == BINARY_CHARSET else encoding
        else:
            text = "ascii"
        decoder = decoders.get(c.type_code)
        out.append((text, None if decoder is through else decoder))
    return out


def row(payload: bytes, convert: Sequence[Converter]) -> tuple[Any, ...]:
    """One text-protocol row, each value decoded and converted."""
    values: list[Any] = []
    pos = 0
    for text, decoder in convert:
        if pos >= len(payload):
            break  # a short row: pymysql keeps what is there
        data, pos = lenenc_bytes(payload, pos)
        value: Any = data
        if data is not None:
            if text is not None:
                value = data.decode(text)
            if decoder is not None:
                value = decoder(value)
        values.append(value)
    return tuple(values)


def greeting_capabilities(data: bytes) -> int | None:
    """The capability flags (lower 16 bits) of a server's handshake greeting, from its first
    bytes: protocol version (1), server version (NUL-ended), thread id (4), scramble (8), filler
    (1), flags (2). None while ``data`` is too short; 0 for an ERR in place of the greeting."""
    if len(data) < 5:
        return None
    if data[4] == _ERR:
        return 0
    end = data.find(b"\x00", 5)
    flags = end + 1 + 4 + 8 + 1
    if end < 0 or len(data) < flags + 2:
        return None
    return int.from_bytes(data[flags : flags + 2], "little")


# ---------------------------------------------------------------------------- the wire


class Reader(Protocol):
    """A buffered reader on the socket (``socket.makefile("rb")``)."""

    def read(self, size: int, /) -> bytes | None: ...

    def close(self) -> None: ...


class Wire:
    """COM_QUERY commands sent back to back on a connection's socket (``sendall``), their
    replies read in order (``rfile``). ``decoders``, ``encoding`` and ``through`` are the
    connection's (pymysql's ``Connection.decoders``, ``encoding``, and ``converters.through``,
    which converts nothing)."""

    def __init__(
        self, sendall: Callable[[bytes], object], rfile: Reader,
        decoders: Mapping[int, Callable[[Any], Any]], encoding: str,
        through: Callable[[Any], Any] | None = None,
    ) -> None:  # fmt: skip
        self._sendall, self._reader = sendall, rfile
        self._decoders, self._encoding, self._through = decoders, encoding, through
        self._seqs: deque[int] = deque()  # the seq each unread reply starts at, oldest first

    @property
    def unread(self) -> int:
        return len(self._seqs)

    def send(self, texts: Sequence[str]) -> None:
        """Send every text as one COM_QUERY, in one write, replies left unread."""
        packets = []
        for text in texts:
            data, count = command(text)
            packets.append(data)
            self._seqs.append(count % 256)
        self._sendall(b"".join(packets))

    def receive(self) -> Reply | ServerError:
        """The oldest unread reply: a Reply, or the server's error for that statement (the
        connection stays usable). WireError (or the socket's OSError) when nothing more can
        be read."""
        if not self._seqs:
            raise WireError("no reply is expected: nothing was sent")
        seq = self._seqs.popleft()
        payload, seq = self._packet(seq)
        first = payload[0]
        if first == _OK:
            return ok(payload)
        if first == _ERR:
            return error(payload)
        if first == _NULL:
            raise WireError("the server asked for a local file (LOAD DATA LOCAL), never sent")
        return self._result_set(payload, seq)

    def _result_set(self, head: bytes, seq: int) -> Reply | ServerError:
        count, _ = lenenc_int(head, 0)
        columns = []
        for _ in range(count):
            payload, seq = self._packet(seq)
            columns.append(column(payload, self._encoding))
        payload, seq = self._packet(seq)
        if not is_eof(payload):
            raise WireError("a result's column definitions were not followed by EOF")
        convert = converters(columns, self._decoders, self._encoding, self._through)
        rows: list[tuple[Any, ...]] = []
        while True:
            payload, seq = self._packet(seq)
            if payload[0] == _ERR:
                return error(payload)
            if is_eof(payload):
                status = int.from_bytes(payload[3:5], "little")
                names = tuple(c.name for c in columns)
                return Reply(len(rows), tuple(rows), names, status)
            rows.append(row(payload, convert))

    def _packet(self, seq: int) -> tuple[bytes, int]:
        """The next packet's payload (joined with its continuations), and the next seq."""
        pieces = []
        while True:
            header = self._read(4)
            if header[3] != seq:
                raise WireError(f"packet out of sequence: got {header[3]}, expected {seq}")
            seq = (seq + 1) % 256
            size = header[0] | header[1] << 8 | header[2] << 16
            pieces.append(self._read(size))
            if size < MAX_PAYLOAD:
                break
        payload = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if not payload:
            raise WireError("an empty reply")
        return payload, seq

    def _read(self, size: int) -> bytes:
        data = self._reader.read(size)
        if data is None or len(data) < size:
            raise WireError("lost connection to the server during query")
        return data

    def close(self) -> None:
        self._seqs.clear()
        self._reader.close()
