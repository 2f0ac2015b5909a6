"""The on-disk format of the EventBuffer, version 1: the spec, and its pure encoders/decoders.

Directory layout
================

::

    DIR/
      buffer.json                   identity of the buffer, written once when it is created
      LOCK                          flock()ed by the one writer; holds the writer's pid
      00000000000000000007.seg      segment 7 (the oldest remaining one)
      00000000000000000008.seg      segment 8
      ...
      00000000000000000012.seg      segment 12: the active segment, the only one appended to

A writer makes the directory 0700 and creates every file 0600, whatever the umask (row data).
``discarded-<time>/`` subdirectories hold what ``drc buffer repair`` moved away.
Segments are named ``%020d.seg`` by their sequence number, so name order is number order and a
segment is found by binary search. Numbers are contiguous from the oldest remaining segment to
the active one: retention deletes whole segments, oldest first, never the active one.

buffer.json
===========

``{"format_version": 1, "epoch": "<uuid4 hex>", "created_at": "<ISO-8601 UTC>",
"base_scn": "<SCN text>"}``, written to a temporary file, fsynced, renamed into place, and the
directory fsynced. A new ``epoch`` is drawn whenever a buffer is created from scratch, so a
reader holding a position can tell a wiped-and-rebuilt buffer from the one it read. Every
segment header repeats the epoch; a segment of another epoch is refused. ``base_scn`` is the SCN
the history starts *after* (zero, unless a follower started its buffer mid-stream): it is the
``prev_scn`` of segment 0, so a read from before it is refused instead of silently skipping.

Segment header (64 bytes at offset 0; integers little-endian)
=============================================================

::

     0      8  magic            b"\\x89DRCSEG\\n"
     8      2  format_version   1
    10      2  header_size      64
    12      4  reserved         0
    16     16  epoch            the buffer's epoch (uuid4, 16 raw bytes)
    32      8  seq              this segment's number (equals the file name)
    40     20  prev_scn         the last SCN appended before this segment was started, in the
                                20-byte SCN encoding; base_scn for segment 0
    60      4  header_crc       CRC-32 (zlib) of bytes 0..60

``prev_scn`` of the oldest remaining segment is the *oldest servable* SCN: a reader that
resumes after it misses nothing, one that resumes after an older SCN would miss records that
retention deleted and gets ScnTooOldError.

Record frame (from offset 64, each frame at an 8-byte aligned offset)
=====================================================================

::

    +0   u32  crc        CRC-32 (zlib) of bytes +4 .. +8+length: the length field and the body
    +4   u32  length     body length in bytes, >= 29; 0 means "end of data"
    +8        body:
         20   scn        the transaction's SCN, 20-byte order-preserving encoding
          1   flags      bit 0 LZ4: payload is LZ4-compressed; bit 1 MORE: another fragment of
                         the same transaction (same SCN) follows; other bits must be 0
          8   timestamp  u64 commit time of the transaction, ms since the epoch (age retention)
          n   payload    opaque bytes (the caller's encoded transaction or fragment of it)
         pad             zero bytes up to the next multiple of 8

Why this way:

- The 8-byte alignment keeps the crc and length words inside one aligned 8-byte unit, which a
  crash never tears (etcd's wal does the same "so that the length field is never torn").
- The CRC covers the length as well as the body (etcd covers the body only): a damaged length
  is then caught with CRC-32's guarantees instead of by chance. This is why crc comes first.
- Padding must be zero and is checked, so every byte of a frame is validated: damage anywhere
  in a record is detected, and a verifier can say exactly which record a flipped byte hit.
- Data ends at end of file or at a zero length word (a preallocated or zero-extended tail).
  A file that holds non-zero bytes after that point is corrupt (a zeroed length).
- An LZ4 payload is the LZ4 *block* format prefixed with the uncompressed size as u32
  little-endian (python-lz4 ``lz4.block.compress(store_size=True)``). The writer stores a
  payload compressed only when that makes it smaller.

SCN order: records are in non-decreasing SCN order (compared on change_id, log_index, log_pos:
the first 16 bytes of the encoding, so raw bytes compare in SCN order). A repeat is allowed only
directly after a record with MORE, and must carry the exact same 20 bytes; after a MORE record
the next record must be such a repeat. So the fragments of one transaction are contiguous and a
transaction is complete once a record of its SCN without MORE is stored. The first record of a
segment follows ``prev_scn`` by the same rule (when the previous segment is gone, an equal SCN
is accepted: the tail fragments of a transaction whose head was deleted by retention).

A record bigger than a segment goes alone into its own, oversized, segment.

Recovery rule
=============

A writer opening the buffer keeps every record a reader may have been served, and cuts only
what a torn write can leave: the valid prefix of the tail is kept, damage to committed data
stops the writer instead of being cut away, and no recovery ever leaves a gap that is served.

1. A segment header failing its checks (magic, CRC, version) is *rebuilt*, not dropped: its
   fields are known without it (constants; the epoch from buffer.json; ``seq`` from the file
   name; ``prev_scn`` is base_scn for segment 0, and the last SCN of the segment before when
   that one is intact). For the oldest segment of a buffer retention has trimmed, the stored
   ``prev_scn`` is kept when the stored CRC matches the header rebuilt around it (the damage
   was elsewhere), else it becomes the SCN of the segment's first record: the servable start
   moves forward, so a reader at an older position gets ScnTooOldError (HTTP 410) rather than
   a gap. The rebuilt header is written back and logged at WARNING. When no rebuild is
   possible (that oldest segment holds no record) the writer stops with an error. A file
   shorter than a header is a creation torn by a crash (it never held a record): the last
   segment is deleted then, or rewritten when it is the only one (segment 0).
2. The last segment is cut at its first invalid frame (short, length, CRC, padding, flags, SCN
   order, non-zero bytes after an end-of-data marker) only when no valid frame follows it at
   any aligned offset: a torn write. Valid frames after the damage mean a flipped bit in
   committed data: the writer refuses to open (CorruptRecordError naming file, offset and the
   next step) and nothing is cut. ``drc buffer verify`` reports it (exit 1). A crash can leave
   valid frames after a hole only if the filesystem wrote back one unsynced write's pages out
   of order; refusing then too errs on the side of never dropping a committed record.
3. A trailing transaction whose last fragment is missing (the last record has MORE) is cut
   from its first fragment, following it back into earlier segments if it started there.
4. Segments left without records after the last record are deleted (never the oldest).

Each cut is made with ``ftruncate`` + fsync and logged at WARNING: file, offset, bytes.

The resume position of capture is the buffer's last SCN, or, when it holds no record, the
``prev_scn`` of its oldest segment (unless that is zero: a new buffer), so a buffer whose tail
was cut resumes where its history ends and the source binlog fills the cut in with the same
SCNs.

Explicit repair (``drc buffer repair``, with the writer stopped) discards damage for good:
the segments up to the last one damaged in committed data are moved to
``DIR/discarded-<time>/``. When that is the last segment, an empty segment is created first
whose ``prev_scn`` is the newest SCN seen in the damaged one (valid records after the damage
included). Either way the oldest servable SCN moves past every lost record: a reader at an
older position gets ScnTooOldError (410) and resyncs, never a 200 over a gap.

Only the last segment is cut for damage. A torn write can only be there, because a segment is
synced before the next one is created (``fsync="never"`` gives that up), so damage in an
earlier segment is corruption: it is not "repaired" away. Readers stop there with
CorruptRecordError naming the file and offset, ``drc buffer verify`` reports it, step 2 does not
follow a transaction back into it, and it never becomes the active segment again.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import lz4.block

from drc.core.errors import CorruptRecordError
from drc.core.scn import SCN, SCN_BYTES

FORMAT_VERSION = 1
MAGIC = b"\x89DRCSEG\n"
HEADER_SIZE = 64
ALIGN = 8
FLAG_LZ4 = 0x01
FLAG_MORE = 0x02
KNOWN_FLAGS = FLAG_LZ4 | FLAG_MORE
KEY_BYTES = 16  # the compared prefix of an encoded SCN (server_id, last, is not compared)
BODY_FIXED = SCN_BYTES + 1 + 8
FRAME_OVERHEAD = 8 + BODY_FIXED
MAX_BODY = 2**32 - 1
MIN_COMPRESS = 32  # shorter payloads never shrink enough to pay for the 4-byte size prefix

_HEADER = struct.Struct("<8sHHI16sQ20s")
_U32 = struct.Struct("<I")
_FRAME_WORDS = struct.Struct("<II")
_BODY_HEAD = struct.Struct("<I20sBQ")  # length, scn, flags, timestamp: the CRC'd prefix
_TIMESTAMP = struct.Struct("<Q")
_ZEROS = bytes(ALIGN)
_TS_OFFSET = 8 + SCN_BYTES + 1


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """The fixed header of one segment file."""

    epoch: bytes  # 16 raw bytes
    seq: int
    prev_scn: SCN


class Frame(NamedTuple):
    """One validated record frame, located in its buffer (payload not copied)."""

    offset: int
    scn: bytes  # the 20-byte SCN encoding
    flags: int
    timestamp_ms: int
    payload_start: int
    payload_end: int
    next_offset: int


def encode_header(header: SegmentHeader) -> bytes:
    """The 64-byte header, CRC included."""
    body = _HEADER.pack(
        MAGIC, FORMAT_VERSION, HEADER_SIZE, 0, header.epoch, header.seq, header.prev_scn.to_bytes()
    )
    return body + _U32.pack(zlib.crc32(body))


def decode_header(buf: bytes | memoryview) -> SegmentHeader:
    """Parse and check a segment header; CorruptRecordError (offset 0) names the problem."""
    if len(buf) < HEADER_SIZE:
        raise CorruptRecordError(f"segment header is short: {len(buf)} of {HEADER_SIZE} bytes", 0)
    body = bytes(buf[: _HEADER.size])
    (crc,) = _U32.unpack_from(buf, _HEADER.size)
    magic, version, size, _reserved, epoch, seq, prev = _HEADER.unpack(body)
    if magic != MAGIC:
        raise CorruptRecordError(f"not a DRC segment: magic {magic!r}", 0)
    if zlib.crc32(body) != crc:
        raise CorruptRecordError("segment header CRC mismatch", 0)
    if version != FORMAT_VERSION or size != HEADER_SIZE:
        raise CorruptRecordError(
            f"unsupported segment format version {version} (header size {size}); this DRC "
            f"reads version {FORMAT_VERSION}",
            0,
        )
    return SegmentHeader(epoch=epoch, seq=seq, prev_scn=SCN.from_bytes(prev))


def encode_payload(payload: bytes, compress: bool) -> tuple[bytes, int]:
    """(stored bytes, flags): LZ4-compressed only when asked and when that makes it smaller."""
    if compress and len(payload) >= MIN_COMPRESS:
        packed = lz4.block.compress(payload, store_size=True)
        if len(packed) < len(payload):
            return packed, FLAG_LZ4
    return payload, 0


def decode_payload(flags: int, stored: bytes | memoryview) -> bytes:
    """The caller's payload from the stored bytes of a CRC-checked frame."""
    if not flags & FLAG_LZ4:
        return bytes(stored)
    try:
        return lz4.block.decompress(stored)
    except (lz4.block.LZ4BlockError, ValueError, MemoryError) as exc:
        raise CorruptRecordError(f"LZ4 payload does not decompress: {exc}", 0) from exc


def encode_frame(scn: bytes, flags: int, timestamp_ms: int, stored: bytes) -> bytes:
    """One framed record, padded to 8 bytes. ``scn`` is the 20-byte encoding."""
    length = BODY_FIXED + len(stored)
    if length > MAX_BODY:
        raise ValueError(f"record payload of {len(stored)} bytes exceeds the 4 GiB frame limit")
    head = _BODY_HEAD.pack(length, scn, flags, timestamp_ms)
    crc = zlib.crc32(stored, zlib.crc32(head))
    return b"".join((_U32.pack(crc), head, stored, _ZEROS[: -(8 + length) % ALIGN]))


def frame_size(stored_len: int) -> int:
    """Bytes a record with ``stored_len`` payload bytes takes on disk, padding included."""
    size = FRAME_OVERHEAD + stored_len
    return size + -size % ALIGN


def decode_frame(buf: memoryview, offset: int, limit: int) -> Frame | None:
    """Check and locate the frame at ``offset``; None at the end of data.

    ``limit`` is where the readable bytes end. Raises CorruptRecordError(reason, offset) for a
    short frame, a bad length, CRC, padding or flags. SCN order is the caller's check
    (:func:`order_error`), since it depends on the record before.
    """
    if offset + 8 > limit:
        if offset == limit:
            return None
        raise CorruptRecordError(f"torn frame: only {limit - offset} bytes left", offset)
    crc, length = _FRAME_WORDS.unpack_from(buf, offset)
    if length == 0:
        return None
    if length < BODY_FIXED:
        raise CorruptRecordError(f"frame length {length} is below the minimum {BODY_FIXED}", offset)
    end = offset + 8 + length
    next_offset = end + -end % ALIGN
    if next_offset > limit:
        raise CorruptRecordError(
            f"frame length {length} runs past the end of data ({limit - offset} bytes left)", offset
        )
    if zlib.crc32(buf[offset + 4 : end]) != crc:
        raise CorruptRecordError("record CRC mismatch", offset)
    if next_offset != end and buf[end:next_offset] != _ZEROS[: next_offset - end]:
        raise CorruptRecordError("non-zero padding after the record", offset)
    flags = buf[offset + 8 + SCN_BYTES]
    if flags & ~KNOWN_FLAGS:
        raise CorruptRecordError(f"unknown flag bits {flags:#04x}", offset)
    (timestamp_ms,) = _TIMESTAMP.unpack_from(buf, offset + _TS_OFFSET)
    scn = bytes(buf[offset + 8 : offset + 8 + SCN_BYTES])
    return Frame(offset, scn, flags, timestamp_ms, offset + FRAME_OVERHEAD, end, next_offset)


def order_error(prev: bytes, prev_more: bool | None, scn: bytes) -> str | None:
    """Why ``scn`` may not follow ``prev`` (20-byte encodings), or None if it may.

    ``prev_more`` is whether the record before had MORE; None when unknown (the first record of
    the oldest remaining segment), which accepts both a repeat and a greater SCN.
    """
    if prev_more is None and scn == prev:
        return None
    if prev_more:
        if scn == prev:
            return None
        return (
            f"the transaction at SCN {SCN.from_bytes(prev)} is not finished (its last fragment "
            f"had MORE), so the next record must repeat that SCN, not {SCN.from_bytes(scn)}"
        )
    if scn[:KEY_BYTES] > prev[:KEY_BYTES]:
        return None
    return (
        f"SCN {SCN.from_bytes(scn)} does not follow SCN {SCN.from_bytes(prev)}: SCNs must "
        "strictly increase, repeating only for the next fragment of a transaction appended "
        "with more=True"
    )


def rebuild_header(
    raw: bytes | memoryview, epoch: bytes, seq: int, prev_scn: SCN | None
) -> SegmentHeader | None:
    """The header a damaged one held, or None when its ``prev_scn`` cannot be known.

    Every field but prev_scn is known without reading it: constants, the buffer's epoch, the
    file name's number. ``prev_scn`` is passed when it is known too (base_scn for segment 0,
    the last SCN of an intact segment before). Otherwise the stored one is trusted only if the
    stored CRC matches the header rebuilt around it, proving the damage was elsewhere.
    """
    if prev_scn is not None:
        return SegmentHeader(epoch, seq, prev_scn)
    if len(raw) < HEADER_SIZE:
        return None
    header = SegmentHeader(epoch, seq, SCN.from_bytes(bytes(raw[40:60])))
    return header if encode_header(header)[_HEADER.size :] == bytes(raw[60:64]) else None


def frames_after(buf: memoryview, start: int, limit: int) -> Iterator[Frame]:
    """Valid frames after the invalid one at ``start``, found by trying every aligned offset.

    A torn write leaves none (only the unsynced end of the file is missing or garbage); a
    flipped bit in the middle of a segment leaves the records after it intact.
    """
    first = start + ALIGN
    end = limit - (limit - first) % ALIGN if limit > first else first
    # The length word of every aligned offset, so that only plausible ones are decoded.
    lengths = memoryview(bytes(buf[first:end])).cast("I")[1::2]
    skip_to = first
    for i, length in enumerate(lengths):
        offset = first + i * ALIGN
        if offset < skip_to or not BODY_FIXED <= length <= limit - offset - 8:
            continue
        if not _plausible(buf, offset, length):
            continue  # cheap checks first: a CRC over garbage of random length is not cheap
        try:
            frame = decode_frame(buf, offset, limit)
        except CorruptRecordError:
            continue
        if frame is not None:
            yield frame
            skip_to = frame.next_offset


def _plausible(buf: memoryview, offset: int, length: int) -> bool:
    """Known flags and zero padding: what any frame has, checked without reading its body."""
    if buf[offset + 8 + SCN_BYTES] & ~KNOWN_FLAGS:
        return False
    end = offset + 8 + length
    return is_zero(buf, end, end + -end % ALIGN)


def is_zero(buf: memoryview, start: int, end: int) -> bool:
    """True when ``buf[start:end]`` holds only zero bytes (an unwritten or zeroed tail)."""
    return bytes(buf[start:end]).count(0) == end - start
