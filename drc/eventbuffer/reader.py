"""Reading the buffer: a committed View, seek by SCN, and batches of transactions.

A reader's position is ``(after, within)``: ``within == 0`` is after the whole transaction at
SCN ``after`` (a read returns the records with SCN > after), ``within == N > 0`` is inside it,
its first N stored records already taken: a read returns that transaction's record N (0-based,
in buffer order) and what follows.

Without ``split`` a batch holds whole transactions only: the fragments of one SCN are never
split across batches. Batches are bounded by ``max_records`` and ``max_bytes`` (payload bytes,
after decompression), except that the first transaction is always returned whole, however big.
With ``split`` the first transaction of a batch that does not fit ``max_bytes`` on its own is
cut after the records that fit (at least one): the batch then ends with a record flagged
``more``, and the reader continues with ``within`` set to the records of that transaction it
has taken. Later transactions are whole either way.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from drc.core.errors import CorruptRecordError, FatalError, ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer.format import (
    FLAG_MORE,
    HEADER_SIZE,
    KEY_BYTES,
    decode_frame,
    decode_payload,
)
from drc.eventbuffer.segment import Segment

# Record.segment of a record not read from a buffer (the source binlog's, drc.replicator.backfill):
# a position inside its transaction could not be read again, so a batch never ends inside it.
SOURCE_SEGMENT = -1


@dataclass(frozen=True, slots=True)
class Record:
    """One stored record as served: the payload is decompressed and CRC-checked."""

    scn: SCN
    payload: bytes
    timestamp_ms: int
    more: bool
    segment: int
    offset: int


@dataclass(frozen=True, slots=True)
class View:
    """What readers may see: the records of ``segments`` up to (``end_seq``, ``end_offset``).

    The end is always just after a record without MORE, so a view never shows part of a
    transaction. A View is immutable; the writer publishes a new one at each commit.
    """

    directory: Path
    epoch: str
    segments: tuple[Segment, ...]
    end_seq: int
    end_offset: int
    record_count: int
    size_bytes: int
    last_scn: SCN | None
    oldest_servable: SCN

    @property
    def first_scn(self) -> SCN | None:
        """SCN of the oldest visible record, or None if there is none."""
        for seg in self.segments:
            past_end = seg.seq == self.end_seq and self.end_offset <= HEADER_SIZE
            if seg.seq > self.end_seq or past_end:
                return None
            if seg.first_scn is not None:
                return SCN.from_bytes(seg.first_scn)
        return None


class PositionError(FatalError, ValueError):
    """A position inside a transaction, ``(after, within)``, that the buffer does not hold: no
    transaction at ``after``, or one of ``within`` records or fewer. Such a position did not
    come from this buffer (the pull API's 400). Here rather than in drc.core.errors, which the
    compiled modules' build digests (docs/compiled.md)."""


class SegmentGone(Exception):
    """A segment of the view was deleted by retention while it was being read."""


def read_batch(
    view: View,
    after: SCN,
    max_records: int,
    max_bytes: int,
    *,
    within: int = 0,
    split: bool = False,
) -> list[Record]:
    """The records after the position ``(after, within)`` within the limits (module docstring);
    with ``split`` the first transaction may be cut.

    Raises ScnTooOldError when records after ``after`` (with ``within``: of the transaction at
    ``after``) were deleted by retention, PositionError for a ``within`` the transaction at
    ``after`` does not have, CorruptRecordError (naming segment file and offset) for a record
    that fails its checks, and SegmentGone when retention deleted a segment during the read
    (the caller retries).
    """
    if max_records < 1 or max_bytes < 1:
        raise ValueError(f"max_records and max_bytes must be >= 1, got {max_records}, {max_bytes}")
    if within < 0:
        raise ValueError(f"within must be >= 0, got {within}")
    if deleted(after, within, view.oldest_servable):
        raise too_old(view.directory, after, view.oldest_servable)
    if not view.segments:
        if within:
            raise _not_held(view, after, within)
        return []
    key = after.to_bytes()[:KEY_BYTES]
    records = _records(view, key) if not within else _inside(view, after, key, within)
    try:
        return _batch(records, max_records, max_bytes, split)
    finally:
        records.close()


def _batch(
    records: Iterator[Record], max_records: int, max_bytes: int, split: bool
) -> list[Record]:
    batch: list[Record] = []
    group: list[Record] = []
    size = group_size = 0
    for record in records:
        if split and not batch and group and group_size + len(record.payload) > max_bytes:
            return group  # the first transaction does not fit on its own: cut it here
        group.append(record)
        group_size += len(record.payload)
        if record.more:
            continue
        if batch and (len(batch) + len(group) > max_records or size + group_size > max_bytes):
            break
        batch.extend(group)
        size += group_size
        group, group_size = [], 0
        if len(batch) >= max_records or size >= max_bytes:
            break
    return batch


def _inside(view: View, after: SCN, key: bytes, within: int) -> Generator[Record, None, None]:
    """The records from the transaction at ``after``'s record ``within`` on; PositionError
    when it has no such record."""
    if not any(key):  # SCN.ZERO: no transaction is there
        raise _not_held(view, after, within)
    # The records with a key above the one just below ``key``: the transaction's first on.
    below = (int.from_bytes(key, "big") - 1).to_bytes(KEY_BYTES, "big")
    records = _records(view, below, skip=(key, within))
    try:
        first = next(records, None)
        if first is None or first.scn != after:
            raise _not_held(view, after, within)
        yield first
        yield from records
    finally:
        records.close()


def _not_held(view: View, after: SCN, within: int) -> PositionError:
    return PositionError(
        f"EventBuffer {view.directory} holds no record {within} of a transaction at SCN "
        f"{after}: that position did not come from this buffer; continue from the last "
        "position it answered (or after a whole transaction, within=0)"
    )


def deleted(after: SCN, within: int, oldest: SCN) -> bool:
    """Whether retention deleted records a read at (``after``, ``within``) needs: inside a
    transaction at the oldest servable SCN, its first records went with an older segment."""
    return after < oldest or (within > 0 and after == oldest and oldest != SCN.ZERO)


def too_old(directory: Path, after: SCN, oldest: SCN) -> ScnTooOldError:
    return ScnTooOldError(
        f"cannot read after SCN {after} from EventBuffer {directory}: it holds records only "
        f"after SCN {oldest}, older ones were deleted by retention; resume this reader from "
        "the source binlog or a snapshot",
        oldest,
    )


def _records(
    view: View, key: bytes, skip: tuple[bytes, int] | None = None
) -> Generator[Record, None, None]:
    """Records from the seek position for ``key`` to the end of the view, in order; with
    ``skip`` (a key, n), the first n records, which must be of that key, are passed over
    without being decompressed (else an empty read: the caller raises PositionError)."""
    segments = view.segments
    last = view.end_seq - segments[0].seq
    # Every record before segment i is <= its prev_scn, so start in the last segment whose
    # prev_scn is <= key, at its last index entry <= key.
    i = max(bisect_right(segments, key, 0, last + 1, key=attrgetter("prev_key")) - 1, 0)
    offset = segments[i].index.floor(key, HEADER_SIZE)
    for k in range(i, last + 1):
        seg = segments[k]
        limit = view.end_offset if k == last else seg.end
        if offset < limit:
            skip = yield from segment_records(seg, offset, limit, key, skip)
            if skip is not None and skip[1] < 0:
                return  # a record of another key where one of the skipped key was due
        if k < last and seg.error is not None:
            raise CorruptRecordError(_corrupt_message(seg, seg.error_offset, seg.error), 0)
        offset = HEADER_SIZE


def segment_records(
    seg: Segment, offset: int, limit: int, key: bytes, skip: tuple[bytes, int] | None = None
) -> Generator[Record, None, tuple[bytes, int] | None]:
    """The records of ``seg`` from ``offset`` to ``limit`` whose SCN key is above ``key``,
    past the ``skip`` ones (see :func:`_records`); returns what is left to skip (None when
    nothing is; a count of -1 when a record of another key came first)."""
    try:
        data, base = seg.readable(offset, limit)
    except FileNotFoundError as exc:
        raise SegmentGone(str(seg.path)) from exc
    end = limit - base
    at = offset - base  # positions in ``data``; records keep their file offsets
    with memoryview(data) as buf:
        while at < end:
            try:
                frame = decode_frame(buf, at, end)
                if frame is None:
                    raise CorruptRecordError("end-of-data marker where records were indexed", 0)
                if frame.scn[:KEY_BYTES] <= key:
                    at = frame.next_offset
                    continue
                if skip is not None:
                    if frame.scn[:KEY_BYTES] != skip[0]:
                        return skip[0], -1
                    skip = (skip[0], skip[1] - 1) if skip[1] > 1 else None
                    at = frame.next_offset
                    continue
                payload = decode_payload(frame.flags, buf[frame.payload_start : frame.payload_end])
            except CorruptRecordError as exc:
                raise CorruptRecordError(
                    _corrupt_message(seg, base + at, str(exc)), base + at
                ) from exc
            yield Record(
                SCN.from_bytes(frame.scn),
                payload,
                frame.timestamp_ms,
                bool(frame.flags & FLAG_MORE),
                seg.seq,
                base + at,
            )
            at = frame.next_offset
    return skip


def _corrupt_message(seg: Segment, offset: int | None, reason: str) -> str:
    return (
        f"corrupt record in segment {seg.path} at offset {offset}: {reason}. It is not served; "
        f"run `drc buffer verify {seg.path.parent}` and rebuild this buffer from a peer"
    )
