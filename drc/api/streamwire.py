"""The frames of ``GET /v1/stream``: the pull's records, carried on one long-lived response.

Pure (no FastAPI, no I/O), like :mod:`drc.api.wire`, so the SDK reads them without the server.

A stream answers 200 with ``Content-Type:`` :data:`MEDIA_STREAM` and the pull's
``X-DRC-Epoch`` (and ``X-DRC-Term`` in a replicator group) headers, then a body of frames,
each ``kind (1 byte) | length (4 bytes, big-endian) | body (length bytes)``:

- :data:`BATCH` ``B``: ``meta length (2 bytes) | "next newest count" (ASCII) | records``, the
  records exactly as a records-form pull returns them (drc.core.codec records, whole
  transactions, in SCN order); ``next`` and ``newest`` mean what the pull's ``X-DRC-Next`` and
  ``X-DRC-Newest`` mean (``-``: the buffer is empty), ``count`` is the number of records. On a
  stream with ``split=1`` a batch may end inside a transaction: its meta is then
  ``"next newest count within"``, ``within`` (> 0) meaning what the pull's
  ``X-DRC-Next-Within`` means (the batch's records end with a fragment that is not the last).
- :data:`COMPRESSED` ``Z``: a batch frame's body LZ4-compressed (drc.api.wire.compress_body),
  sent only on a stream whose client asked for it (``X-DRC-Compression: lz4``, repeated on the
  answer) and only when it shrinks the frame.
- :data:`HEARTBEAT` ``H``: ``"next newest"``, sent when no batch went out for ``wait_ms``:
  ``next`` has moved past transactions the filter left out, ``newest`` is the replicator's last
  committed SCN (liveness and lag while nothing matches); ``"next newest within"`` while the
  stream's position is inside a transaction (a split stream filtering a large one out).
- :data:`END` ``E``: the JSON error body of the pull API (``{"error": code, "message": ...}``),
  last: the server is stopping, its group's term or this member's role changed, or reading
  failed (a reconnect from the last ``next`` gets the pull's own status for it).

A subscriber continues from the ``next`` (and ``within``) of the last frame it took, exactly as
from a pull's. A parser reads both forms of each meta; :attr:`Frame.within` is 0 for the short
one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from drc.api import wire
from drc.api.lazyrecords import LAZY_BYTES, LazyTransactions
from drc.core.codec import decode_transaction
from drc.core.errors import CorruptRecordError, MalformedScnError
from drc.core.events import Transaction
from drc.core.scn import SCN

PATH_STREAM = "/v1/stream"
MEDIA_STREAM = "application/x-drc-stream"

BATCH = b"B"
COMPRESSED = b"Z"
HEARTBEAT = b"H"
END = b"E"
_HEAD = struct.Struct(">cI")
_META = struct.Struct(">H")
HEAD_BYTES = _HEAD.size
# A frame longer than this is a broken stream, not a big batch (the server's max_bytes is at
# most a few tens of MB; the first transaction of a batch is sent whole, however big).
MAX_FRAME_BYTES = 1 << 30
_NONE = "-"

# Error codes of END frames (besides the pull API's own).
ERROR_STOPPING = "stopping"  # the server is shutting down
ERROR_TERM_CHANGED = "term_changed"  # the group's term or this member's role changed


class BrokenStream(ValueError):
    """Bytes that are not a stream of frames (corrupt, truncated inside a frame, unknown kind)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame, read: ``transactions`` empty for a heartbeat; ``end`` the END frame's body."""

    next: SCN
    newest: SCN | None
    # decoded as read for a large frame (drc.api.lazyrecords)
    transactions: Sequence[Transaction] = ()
    size: int = 0  # record bytes carried
    end: dict[str, Any] | None = None
    records: bytes = b""  # the records as sent, for copies (group followers)
    ends: tuple[int, ...] = ()  # where each record ends in ``records``
    within: int = 0  # > 0: ``next`` is inside a transaction, its first ``within`` records taken


def batch_frame(
    next_scn: SCN,
    newest: SCN | None,
    count: int,
    records: bytes,
    compress: bool = False,
    within: int = 0,
) -> bytes:
    """A batch frame; with ``compress``, a COMPRESSED one when that makes it smaller."""
    meta = _meta(next_scn, newest, count, within)
    body_len = _META.size + len(meta) + len(records)
    if compress:
        packed = wire.compress_body(b"".join((_META.pack(len(meta)), meta, records)))
        if packed is not None:
            return _HEAD.pack(COMPRESSED, len(packed)) + packed
    return b"".join((_HEAD.pack(BATCH, body_len), _META.pack(len(meta)), meta, records))


def batch_head(
    next_scn: SCN, newest: SCN | None, count: int, records_len: int, within: int = 0
) -> bytes:
    """An uncompressed batch frame up to its records, which follow it (the server sends them
    in pieces)."""
    meta = _meta(next_scn, newest, count, within)
    body_len = _META.size + len(meta) + records_len
    return b"".join((_HEAD.pack(BATCH, body_len), _META.pack(len(meta)), meta))


def heartbeat_frame(next_scn: SCN, newest: SCN | None, within: int = 0) -> bytes:
    meta = f"{next_scn} {_scn_text(newest)}{_within_text(within)}".encode("ascii")
    return _HEAD.pack(HEARTBEAT, len(meta)) + meta


def _meta(next_scn: SCN, newest: SCN | None, count: int, within: int) -> bytes:
    return f"{next_scn} {_scn_text(newest)} {count}{_within_text(within)}".encode("ascii")


def _within_text(within: int) -> str:
    return f" {within}" if within else ""


def _within(tokens: list[str], short: int) -> int:
    """The optional last token of a meta of ``short`` tokens or one more."""
    if len(tokens) == short:
        return 0
    if len(tokens) != short + 1 or not tokens[-1].isascii() or not tokens[-1].isdigit():
        raise BrokenStream(f"a frame meta of {len(tokens)} tokens: {' '.join(tokens)[:80]!r}")
    return int(tokens[-1])


def end_frame(code: str, message: str, **extra: Any) -> bytes:
    body = json.dumps({"error": code, "message": message, **extra}).encode()
    return _HEAD.pack(END, len(body)) + body


def _scn_text(scn: SCN | None) -> str:
    return _NONE if scn is None else str(scn)


def _scn(text: str) -> SCN | None:
    return None if text == _NONE else SCN.parse(text)


class FrameParser:
    """Frames out of the bytes of a stream body, fed in chunks of any size."""

    def __init__(self, lazy: Callable[[], bool] = lambda: False) -> None:
        """``lazy()`` True: the next frames' records are decoded as read, not when parsed
        (a reader whose consumer is behind holds them as bytes, ~10 times smaller)."""
        self._buf = bytearray()
        self._lazy = lazy

    @property
    def pending(self) -> int:
        """Bytes held that do not make a whole frame yet."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> list[Frame]:
        """The frames completed by ``chunk``; raises BrokenStream."""
        buf = self._buf
        buf += chunk
        frames: list[Frame] = []
        offset = 0
        while len(buf) - offset >= HEAD_BYTES:
            kind, length = _HEAD.unpack_from(buf, offset)
            if length > MAX_FRAME_BYTES:
                raise BrokenStream(f"a frame of {length} bytes is longer than any batch")
            start = offset + HEAD_BYTES
            if len(buf) - start < length:
                break
            lazy = self._lazy()
            frames.append(parse_frame(kind, memoryview(buf)[start : start + length], lazy))
            offset = start + length
        if offset:
            del buf[:offset]
        return frames


def parse_frame(kind: bytes, body: memoryview, lazy: bool = False) -> Frame:
    """One frame's body, its records decoded as read if ``lazy``, large or a cut page's;
    raises BrokenStream."""
    try:
        if kind == COMPRESSED:
            return parse_frame(BATCH, memoryview(wire.decompress_body(body)), lazy)
        if kind == BATCH:
            (meta_len,) = _META.unpack_from(body)
            start = _META.size + meta_len
            tokens = bytes(body[_META.size : start]).decode().split()
            within = _within(tokens, 3)
            next_text, newest_text, count_text = tokens[:3]
            records = bytes(body[start:])
            txns, ends = _split(records, lazy or within > 0)
            if len(txns) != int(count_text):
                raise BrokenStream(f"a batch frame says {count_text} records but holds {len(txns)}")
            return Frame(
                SCN.parse(next_text),
                _scn(newest_text),
                txns,
                len(records),
                None,
                records,
                ends,
                within,
            )
        if kind == HEARTBEAT:
            tokens = bytes(body).decode().split()
            within = _within(tokens, 2)
            return Frame(SCN.parse(tokens[0]), _scn(tokens[1]), within=within)
        if kind == END:
            data = json.loads(bytes(body))
            if not isinstance(data, dict):
                raise BrokenStream("an end frame that is not a JSON object")
            return Frame(SCN.ZERO, None, end=data)
    except (ValueError, struct.error, CorruptRecordError, MalformedScnError) as exc:
        if isinstance(exc, BrokenStream):
            raise
        raise BrokenStream(f"a malformed {kind!r} frame: {exc}") from exc
    raise BrokenStream(f"an unknown frame kind {kind!r}")


def _split(records: bytes, lazy: bool) -> tuple[Sequence[Transaction], tuple[int, ...]]:
    """The records' transactions (decoded when read if ``lazy`` or large: a large
    transaction's pages are held as bytes until the consumer takes them), and where each
    record ends."""
    if lazy or len(records) > LAZY_BYTES:
        return LazyTransactions.of(records)
    txns: list[Transaction] = []
    ends: list[int] = []
    offset = 0
    while offset < len(records):
        txn, offset = decode_transaction(records, offset)
        txns.append(txn)
        ends.append(offset)
    return tuple(txns), tuple(ends)
