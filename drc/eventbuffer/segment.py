"""One segment file: its header, the statistics and sparse index of its valid records, and a
read-only memory mapping shared by reader threads.

A Segment is mutated only by the one writer thread (appends) or by the thread that scans it
(open, read-only refresh). Readers use it through a :class:`~drc.eventbuffer.reader.View`,
which bounds what they may read, so they never look at bytes a writer is still adding.
"""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

from drc.core.errors import CorruptRecordError
from drc.eventbuffer.format import (
    FLAG_MORE,
    HEADER_SIZE,
    KEY_BYTES,
    SegmentHeader,
    decode_frame,
    decode_header,
    encode_header,
    is_zero,
    order_error,
)
from drc.eventbuffer.index import SparseIndex
from drc.eventbuffer.layout import open_private

TAIL_READ_BYTES = 1 << 18  # past the mapping, ranges up to this are read, not remapped


class Segment:
    """Header, valid-prefix statistics, sparse index and lazy mapping of one segment file.

    ``end`` is where the valid records end (the next append goes there). ``complete_end`` is
    the end of the last record without MORE (None if the segment has none), so a view that
    stops there never shows part of a transaction. ``error``/``error_offset`` describe the
    first invalid frame found by a scan; ``end == error_offset`` then.
    """

    def __init__(
        self, path: Path, header: SegmentHeader, index_every: int, start_more: bool | None
    ):
        self.path = path
        self.header = header
        self.seq = header.seq
        self.prev_key = header.prev_scn.to_bytes()[:KEY_BYTES]
        self.index_every = index_every
        self.start_more = start_more  # MORE flag of the record before this segment, if known
        self._mm: mmap.mmap | None = None
        self._map_lock = threading.Lock()
        self.rebuilt_from: str | None = None  # why the header was rebuilt (not yet written)
        self.reset()

    def reset(self) -> None:
        """Forget every record: the state of a segment that holds only its header."""
        self.index = SparseIndex(self.index_every)
        self.count = 0
        self.first_scn: bytes | None = None
        self.last_scn: bytes = self.header.prev_scn.to_bytes()
        self.last_more: bool | None = self.start_more
        self.end = HEADER_SIZE
        self.complete_end: int | None = None
        self.complete_count = 0
        self.complete_scn: bytes | None = None
        self.run_start: int | None = None  # first record of a trailing MORE run
        self.max_ts: int | None = None
        self.error: str | None = None
        self.error_offset: int | None = None

    def note(
        self, scn: bytes, flags: int, timestamp_ms: int, offset: int, next_offset: int
    ) -> None:
        """Account for one record at ``offset`` (appended or scanned, in file order)."""
        if not self.count:
            self.first_scn = scn
        self.index.note(scn[:KEY_BYTES], offset)
        self.count += 1
        self.last_scn = scn
        more = bool(flags & FLAG_MORE)
        if more:
            if self.run_start is None:
                self.run_start = offset
        else:
            self.run_start = None
            self.complete_end = next_offset
            self.complete_count = self.count
            self.complete_scn = scn
        self.last_more = more
        self.end = next_offset
        if self.max_ts is None or timestamp_ms > self.max_ts:
            self.max_ts = timestamp_ms

    def scan(self, buf: memoryview, limit: int) -> None:
        """Extend the statistics over the valid frames in ``buf[end:limit]``.

        Stops at end of data or at the first invalid frame (length, CRC, padding, flags or SCN
        order), which it records in ``error``/``error_offset``.
        """
        self.error = self.error_offset = None
        offset = self.end
        while True:
            try:
                frame = decode_frame(buf, offset, limit)
            except CorruptRecordError as exc:
                self._fail(exc.offset, str(exc))
                return
            if frame is None:
                if offset < limit and not is_zero(buf, offset, limit):
                    self._fail(offset, "end-of-data marker followed by non-zero bytes")
                return
            why = order_error(self.last_scn, self.last_more, frame.scn)
            if why is not None:
                self._fail(offset, why)
                return
            self.note(frame.scn, frame.flags, frame.timestamp_ms, offset, frame.next_offset)
            offset = frame.next_offset

    def rewind_to_complete(self) -> None:
        """Forget the records after the last complete one, to scan them again.

        A read-only reader does this before each refresh: a trailing run of MORE fragments it
        saw may since have been cut by a restarted writer's recovery and overwritten.
        """
        if self.complete_end is None:
            self.reset()
            return
        self.index.truncate(self.complete_end)
        self.count = self.complete_count
        self.last_scn = self.complete_scn or self.last_scn
        self.last_more = False
        self.end = self.complete_end
        self.run_start = None
        self.error = self.error_offset = None

    def _fail(self, offset: int, reason: str) -> None:
        self.error, self.error_offset = reason, offset

    def describe_error(self) -> str:
        return f"segment {self.path} offset {self.error_offset}: {self.error}"

    def mapping(self, upto: int) -> mmap.mmap:
        """A read-only mapping covering at least ``upto`` bytes (remapped as the file grows).

        A mapping replaced by a larger one is not closed: readers still using it keep it alive
        and it is unmapped when the last one lets go. FileNotFoundError means retention deleted
        the file.
        """
        mm = self._mm
        if mm is not None and len(mm) >= upto:
            return mm
        with self._map_lock:
            mm = self._mm
            if mm is None or len(mm) < upto:
                mm = map_file(self.path)
                if len(mm) < upto:
                    raise CorruptRecordError(
                        f"segment {self.path} is {len(mm)} bytes, shorter than the {upto} bytes "
                        "of records indexed in it",
                        len(mm),
                    )
                self._mm = mm
        return mm

    def readable(self, start: int, limit: int) -> tuple[mmap.mmap | bytes, int]:
        """Bytes covering ``start``..``limit`` and the file offset they begin at.

        The mapping when it already covers ``limit``; a short range past it (what a reader
        that keeps up asks for after each commit) read with one pread, since remapping the
        growing active segment on every commit cost ~10x more; a longer one by remapping.
        """
        mm = self._mm
        if (mm is not None and len(mm) >= limit) or limit - start > TAIL_READ_BYTES:
            return self.mapping(limit), 0
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, limit - start, start)
        finally:
            os.close(fd)
        if len(data) < limit - start:
            raise CorruptRecordError(
                f"segment {self.path} is {start + len(data)} bytes, shorter than the {limit} "
                "bytes of records indexed in it",
                start + len(data),
            )
        return data, start

    def release(self) -> None:
        """Drop this segment's mapping (it is unmapped once no reader uses it)."""
        self._mm = None

    def close(self) -> None:
        mm, self._mm = self._mm, None
        if mm is not None:
            close_quietly(mm)


def close_quietly(mm: mmap.mmap) -> None:
    """Unmap now, unless a view of the mapping is still alive; then the GC unmaps it later."""
    try:
        mm.close()
    except BufferError:
        pass


def map_file(path: Path) -> mmap.mmap:
    """The whole file, mapped read-only. CorruptRecordError if it cannot hold a header."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < HEADER_SIZE:
            raise CorruptRecordError(
                f"segment {path} is {size} bytes, shorter than its {HEADER_SIZE}-byte header", 0
            )
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def load_segment(
    path: Path,
    seq: int,
    epoch: bytes,
    index_every: int,
    start_more: bool | None,
    header: SegmentHeader | None = None,
) -> Segment:
    """Read, check and scan one segment file (with ``header`` instead of the stored one, when
    recovery rebuilt it).

    Raises CorruptRecordError for an unreadable header (too short, magic, CRC, version), and
    ValueError for a valid header of another buffer (epoch) or another file name (seq): those
    are a misplaced file, not damage, and must never be "repaired" away.
    """
    mm = map_file(path)
    try:
        with memoryview(mm) as buf:
            if header is None:
                header = _read_header(buf, path, seq, epoch)
            segment = Segment(path, header, index_every, start_more)
            segment.scan(buf, len(buf))
    finally:
        close_quietly(mm)
    return segment


def _read_header(buf: memoryview, path: Path, seq: int, epoch: bytes) -> SegmentHeader:
    try:
        header = decode_header(buf[:HEADER_SIZE])
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"segment {path} offset 0: {exc}", 0) from exc
    if header.epoch != epoch:
        raise ValueError(
            f"segment {path} belongs to buffer epoch {header.epoch.hex()}, not "
            f"{epoch.hex()}: it was copied in from another buffer"
        )
    if header.seq != seq:
        raise ValueError(f"segment {path} has sequence number {header.seq} in its header")
    return header


def read_raw_header(path: Path) -> bytes:
    """The first HEADER_SIZE bytes of ``path`` (fewer if it is shorter)."""
    with open(path, "rb") as f:
        return f.read(HEADER_SIZE)


def write_header(path: Path, header: SegmentHeader, sync: bool) -> None:
    """Overwrite the header of an existing segment (recovery's rebuild)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, encode_header(header), 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def create_segment_file(path: Path, header: SegmentHeader, sync: bool) -> None:
    """Create a segment holding only its header (the caller fsyncs the directory)."""
    fd = open_private(path, os.O_WRONLY | os.O_EXCL)
    try:
        os.write(fd, encode_header(header))
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
