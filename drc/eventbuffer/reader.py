"""Reading the buffer: a committed View, seek by SCN, and batches of whole transactions.

A batch holds whole transactions only: the fragments of one SCN are never split across
batches. The resume position of a reader is an SCN, and fragments share their transaction's
SCN, so a batch that ended between two fragments could not be resumed without skipping the
rest (``read_after(scn)`` returns records *after* scn). Batches are bounded by ``max_records``
and ``max_bytes`` (payload bytes, after decompression), except that the first transaction is
always returned whole, however big.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from drc.core.errors import CorruptRecordError, ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer.format import (
    FLAG_MORE,
    HEADER_SIZE,
    KEY_BYTES,
    decode_frame,
    decode_payload,
)
from drc.eventbuffer.segment import Segment


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


class SegmentGone(Exception):
    """A segment of the view was deleted by retention while it was being read."""


def read_batch(view: View, after: SCN, max_records: int, max_bytes: int) -> list[Record]:
    """The first whole transactions with SCN > ``after``, within the limits (module docstring).

    Raises ScnTooOldError when records after ``after`` were deleted by retention,
    CorruptRecordError (naming segment file and offset) for a record that fails its checks,
    and SegmentGone when retention deleted a segment during the read (the caller retries).
    """
    if max_records < 1 or max_bytes < 1:
        raise ValueError(f"max_records and max_bytes must be >= 1, got {max_records}, {max_bytes}")
    if after < view.oldest_servable:
        raise too_old(view.directory, after, view.oldest_servable)
    if not view.segments:
        return []
    key = after.to_bytes()[:KEY_BYTES]
    batch: list[Record] = []
    group: list[Record] = []
    size = group_size = 0
    records = _records(view, key)
    try:
        for record in records:
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
    finally:
        records.close()
    return batch


def too_old(directory: Path, after: SCN, oldest: SCN) -> ScnTooOldError:
    return ScnTooOldError(
        f"cannot read after SCN {after} from EventBuffer {directory}: it holds records only "
        f"after SCN {oldest}, older ones were deleted by retention; resume this reader from "
        "the source binlog or a snapshot",
        oldest,
    )


def _records(view: View, key: bytes) -> Generator[Record, None, None]:
    """Records from the seek position for ``key`` to the end of the view, in order."""
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
            yield from segment_records(seg, offset, limit, key)
        if k < last and seg.error is not None:
            raise CorruptRecordError(_corrupt_message(seg, seg.error_offset, seg.error), 0)
        offset = HEADER_SIZE


def segment_records(seg: Segment, offset: int, limit: int, key: bytes) -> Iterator[Record]:
    """The records of ``seg`` from ``offset`` to ``limit`` whose SCN key is above ``key``."""
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


def _corrupt_message(seg: Segment, offset: int | None, reason: str) -> str:
    return (
        f"corrupt record in segment {seg.path} at offset {offset}: {reason}. It is not served; "
        f"run `drc buffer verify {seg.path.parent}` and rebuild this buffer from a peer"
    )
