"""The append side of an EventBuffer: the locked, recovered directory, the active segment,
commit, rotation and retention.

Appended frames collect in memory and reach the active segment's file at commit (one write,
then one fdatasync under ``fsync="batch"``), at rotation, or once ``FLUSH_BYTES`` are pending.
What readers see moves only at commit, and only to the end of the last record without MORE.

State is touched by one thread at a time (EventBuffer holds its write lock around every call).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from drc.core.errors import BufferFullError, BufferStateError, OutOfOrderAppendError
from drc.core.scn import SCN
from drc.eventbuffer.format import (
    FLAG_MORE,
    HEADER_SIZE,
    SegmentHeader,
    encode_frame,
    encode_payload,
    order_error,
)
from drc.eventbuffer.layout import (
    BufferMeta,
    DirectoryLock,
    fsync_dir,
    make_private_dir,
    segment_path,
)
from drc.eventbuffer.reader import View
from drc.eventbuffer.recovery import load_segments, open_or_create, scanned_view
from drc.eventbuffer.retention import Retention, SegmentAge
from drc.eventbuffer.segment import Segment, create_segment_file

log = logging.getLogger(__name__)

FLUSH_BYTES = 1 << 20
MIN_SEGMENT_BYTES = 2 * HEADER_SIZE
FSYNC_POLICIES = ("batch", "always", "never")
_sync_data = getattr(os, "fdatasync", os.fsync)
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WriterOptions:
    segment_bytes: int
    fsync: str
    compress: bool
    index_every: int


class Mark(NamedTuple):
    """A position just after a complete transaction, and the records up to it."""

    seq: int
    offset: int
    scn: SCN | None
    records: int


class ActiveFile:
    """The open active segment file and the frames not yet written to it."""

    def __init__(self, path: Path, pos: int) -> None:
        self.fd = os.open(path, os.O_WRONLY)
        self.pos = pos
        self.pending = bytearray()
        self.unsynced = False

    def write(self) -> None:
        """Write what is pending; on an error what did not reach the file stays pending, so
        the same call can be made again (after a full disk got room)."""
        data, self.pending = self.pending, bytearray()
        done = 0
        try:
            while done < len(data):
                done += os.pwrite(self.fd, data[done:] if done else data, self.pos + done)
        finally:
            if done < len(data):
                self.pending = bytearray(data[done:]) + self.pending
            self.pos += done
            self.unsynced = self.unsynced or bool(done)

    def sync(self) -> None:
        if self.unsynced:
            _sync_data(self.fd)
            self.unsynced = False

    def close(self) -> None:
        os.close(self.fd)


def _fail_stop(step: Callable[..., T]) -> Callable[..., T]:
    """A writer step after which an OSError stops the writer: its state may be half-applied,
    so it refuses every later step (:meth:`Writer.stopped`) until the buffer is reopened."""

    @functools.wraps(step)
    def run(writer: Writer, *args: Any) -> T:
        try:
            return step(writer, *args)
        except OSError as exc:
            writer.failed = exc
            raise BufferStateError(
                f"writing EventBuffer {writer.directory} failed: {exc}; fix the cause, then "
                "close and reopen it (recovery keeps every committed record)"
            ) from exc

    return run


class Writer:
    """Appends records to the newest segment of a recovered buffer, holding its lock."""

    def __init__(
        self,
        directory: Path,
        meta: BufferMeta,
        segments: Sequence[Segment],
        start: View,
        options: WriterOptions,
        lock: DirectoryLock,
    ) -> None:
        self.directory = directory
        self.lock = lock
        self.meta = meta
        self.options = options
        self.sync = options.fsync != "never"
        self.segments = tuple(segments)
        active = self.segments[-1]
        self.file = ActiveFile(active.path, active.end)
        self.last_scn = active.last_scn
        self.last_more = bool(active.last_more)
        self.size_bytes = sum(seg.end for seg in self.segments)
        self.records = sum(seg.count for seg in self.segments)
        self.complete = self.committed = Mark(
            start.end_seq, start.end_offset, start.last_scn, start.record_count
        )
        self.failed: BaseException | None = None

    @classmethod
    def open(cls, directory: Path, base_scn: SCN, options: WriterOptions) -> Writer:
        """Lock ``directory`` (BufferLockedError if another writer has it), create the buffer
        (a new epoch after ``base_scn``) if there is none, recover its tail (see the format's
        recovery rule) and start after it. The lock is released if that fails."""
        make_private_dir(directory)
        lock = DirectoryLock(directory)
        try:
            sync = options.fsync != "never"
            meta = open_or_create(directory, base_scn, sync)
            segments = load_segments(directory, meta, options.index_every, repair=True, sync=sync)
            start = scanned_view(directory, meta, segments)
            return cls(directory, meta, segments, start, options, lock)
        except BaseException:
            lock.release()
            raise

    def stopped(self) -> BufferStateError:
        """What every step raises once one failed (:attr:`failed`, set by :func:`_fail_stop`)."""
        return BufferStateError(
            f"EventBuffer {self.directory} stopped after a write failed ({self.failed}); "
            "close and reopen it: recovery keeps every committed record"
        )

    @property
    def uncommitted(self) -> bool:
        """Records were appended since the last commit."""
        return self.records != self.committed.records

    @_fail_stop
    def append(self, scn: SCN, payload: bytes, timestamp_ms: int, more: bool) -> None:
        """Add one record (not yet visible); OutOfOrderAppendError leaves nothing changed."""
        scn_bytes = scn.to_bytes()
        why = order_error(self.last_scn, self.last_more, scn_bytes)
        if why is not None:
            raise OutOfOrderAppendError(f"cannot append to EventBuffer {self.directory}: {why}")
        stored, flags = encode_payload(payload, self.options.compress)
        if more:
            flags |= FLAG_MORE
        frame = encode_frame(scn_bytes, flags, timestamp_ms, stored)
        seg = self.segments[-1]
        if seg.count and seg.end + len(frame) > self.options.segment_bytes:
            seg = self._rotate()
        offset = seg.end
        self.file.pending += frame
        seg.note(scn_bytes, flags, timestamp_ms, offset, offset + len(frame))
        self.size_bytes += len(frame)
        self.records += 1
        self.last_scn, self.last_more = scn_bytes, more
        if not more:
            self.complete = Mark(seg.seq, seg.end, scn, self.records)
        if self.options.fsync == "always" or len(self.file.pending) >= FLUSH_BYTES:
            try:
                self._flush()
            except BufferFullError:
                return  # the record is appended, its bytes pending: commit says the disk is full
            if self.options.fsync == "always":
                self.file.sync()

    @_fail_stop
    def commit(self, check: Callable[[], None] | None = None) -> Mark:
        """Write and (per policy) sync what was appended; the new end visible to readers.

        ``check`` runs after the write, before the end moves: if it raises, every byte
        written since the last commit is cut from the files again (:meth:`discard`), so a
        writer whose right to write ran out while it wrote (a leader paused mid-commit)
        leaves the files as they were. The writer must then be reopened. On a full
        filesystem BufferFullError: nothing changed but what reached the file, call again."""
        self._flush()
        if self.sync:
            self.file.sync()
        if check is not None:
            try:
                check()
            except BaseException:
                self.discard()
                raise
        self.committed = self.complete
        return self.committed

    def _flush(self) -> None:
        """Write what is pending; a full filesystem raises BufferFullError, the bytes kept
        pending and the writer usable (not an OSError: :func:`_fail_stop` lets it through)."""
        try:
            self.file.write()
        except OSError as exc:
            if exc.errno not in _NO_ROOM:
                raise
            raise BufferFullError(
                f"EventBuffer {self.directory}: no space left on its filesystem "
                f"({len(self.file.pending)} bytes wait to be written); free space there (or "
                "lower [replicator.buffer] retain_gb and restart): capture continues by itself"
            ) from exc

    def discard(self) -> None:
        """Cut the segment files back to the last commit: segments begun since are deleted,
        the committed one truncated at its end. The in-memory state is stale afterwards."""
        end = self.committed
        self.file.pending = bytearray()
        for seg in self.segments:
            if seg.seq > end.seq:
                os.unlink(seg.path)
        os.truncate(segment_path(self.directory, end.seq), end.offset)
        if self.sync:
            fsync_dir(self.directory)

    def _rotate(self) -> Segment:
        """Seal the active segment (written and synced) and start the next one."""
        old = self.segments[-1]
        self._flush()  # BufferFullError here leaves the append undone: it can be made again
        if self.sync:
            self.file.sync()
        self.file.close()
        header = SegmentHeader(self.meta.epoch_bytes, old.seq + 1, SCN.from_bytes(self.last_scn))
        path = segment_path(self.directory, header.seq)
        create_segment_file(path, header, self.sync)
        if self.sync:
            fsync_dir(self.directory)
        seg = Segment(path, header, self.options.index_every, self.last_more)
        self.file = ActiveFile(path, HEADER_SIZE)
        self.segments = (*self.segments, seg)
        self.size_bytes += HEADER_SIZE
        return seg

    def retention(self, retention: Retention) -> tuple[Segment, ...]:
        """Drop the oldest committed, sealed segments retention no longer keeps from the state.

        The caller publishes the new view, then deletes the files with :meth:`unlink`: in that
        order a reader taking a fresh view never meets a deleted file.
        """
        deletable = self.segments[: self.committed.seq - self.segments[0].seq]
        ages = (SegmentAge(seg.end, seg.max_ts) for seg in deletable)
        k = retention.segments_to_delete(ages, self.size_bytes)
        gone = self.segments[:k]
        removed = sum(seg.count for seg in gone)
        self.segments = self.segments[k:]
        self.size_bytes -= sum(seg.end for seg in gone)
        self.records -= removed
        self.complete = self.complete._replace(records=self.complete.records - removed)
        self.committed = self.committed._replace(records=self.committed.records - removed)
        return gone

    @_fail_stop
    def unlink(self, gone: tuple[Segment, ...]) -> None:
        """Delete the files of segments :meth:`retention` dropped, oldest first."""
        for seg in gone:
            log.info(
                "EventBuffer retention: deleted %s (%d records, %d bytes, prev_scn %s)",
                seg.path,
                seg.count,
                seg.end,
                seg.header.prev_scn,
            )
            os.unlink(seg.path)
            seg.release()
        if gone and self.sync:
            fsync_dir(self.directory)

    def view(self) -> View:
        """What readers may see now: everything up to the last commit."""
        end = self.committed
        return View(
            directory=self.directory,
            epoch=self.meta.epoch,
            segments=self.segments,
            end_seq=end.seq,
            end_offset=end.offset,
            record_count=end.records,
            size_bytes=self.size_bytes,
            last_scn=end.scn,
            oldest_servable=self.segments[0].header.prev_scn,
        )

    def close(self) -> None:
        """Close the active file and release the directory. Appends not committed are not
        written."""
        self.file.pending = bytearray()
        self.file.close()
        self.lock.release()


def check_options(
    segment_bytes: int,
    fsync: str,
    retain_bytes: int | None,
    retain_seconds: float | None,
    index_every: int,
) -> None:
    """ValueError naming the first bad EventBuffer.open option."""
    if segment_bytes < MIN_SEGMENT_BYTES:
        raise ValueError(f"segment_bytes must be at least {MIN_SEGMENT_BYTES}, got {segment_bytes}")
    if fsync not in FSYNC_POLICIES:
        raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
    if retain_bytes is not None and retain_bytes < 0:
        raise ValueError(f"retain_bytes must be >= 0 or None, got {retain_bytes}")
    if retain_seconds is not None and retain_seconds < 0:
        raise ValueError(f"retain_seconds must be >= 0 or None, got {retain_seconds}")
    if index_every < 1:
        raise ValueError(f"index_every_bytes must be >= 1, got {index_every}")


def check_record(scn: SCN, payload: bytes, timestamp_ms: int) -> None:
    """TypeError/ValueError for arguments append cannot store as they are."""
    if not isinstance(scn, SCN):
        raise TypeError(f"scn must be an SCN, got {type(scn).__name__}")
    if not isinstance(payload, bytes | bytearray):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    if type(timestamp_ms) is not int or not 0 <= timestamp_ms < 2**64:
        raise ValueError(f"timestamp_ms must be an int in 0..2**64-1, got {timestamp_ms!r}")
