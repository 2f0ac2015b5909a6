"""EventBuffer: an append-only, SCN-indexed, crash-safe store of opaque transaction payloads.

One writer per directory (an flock, across processes and within one), any number of reader
threads in the writer's process, and read-only opens from other processes::

    buf = EventBuffer.open(path, segment_bytes=64 << 20, fsync="batch", compress=True)
    buf.append(scn, payload, timestamp_ms)          # invisible to readers until...
    buf.commit()                                     # ...now: durable (per fsync) and visible
    records = buf.read_after(SCN.ZERO, max_records=1000, max_bytes=4 << 20)

Guarantees: readers see exactly the committed records, in append order, each CRC-checked,
never part of a transaction (see :mod:`drc.eventbuffer.reader` for batching), never a record
that fails its checks (CorruptRecordError names segment file and offset), and never a silent
gap (ScnTooOldError when retention deleted what a reader asks for). After a crash the writer
keeps every committed record and possibly some appended later, always a whole-transaction
prefix of what was appended. The format is specified in :mod:`drc.eventbuffer.format`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from os import PathLike
from pathlib import Path

from drc.core.errors import BufferStateError, RetriableError
from drc.core.scn import SCN
from drc.eventbuffer.layout import BufferMeta, DirectoryLock, make_private_dir, read_meta
from drc.eventbuffer.reader import Record, SegmentGone, View, read_batch, too_old
from drc.eventbuffer.recovery import (
    load_new_segments,
    load_segments,
    open_or_create,
    scanned_view,
)
from drc.eventbuffer.retention import KEEP_ALL, Retention
from drc.eventbuffer.segment import Segment
from drc.eventbuffer.writer import Writer, WriterOptions, check_options, check_record

log = logging.getLogger(__name__)
DEFAULT_SEGMENT_BYTES = 64 << 20
DEFAULT_INDEX_EVERY = 4096
READ_ONLY_POLL_S = 0.05
_READ_RETRIES = 5

AppendItem = tuple[SCN, bytes, int] | tuple[SCN, bytes, int, bool]


class EventBuffer:
    """A buffer directory, open for writing (:meth:`open`) or reading (:meth:`open_read_only`).

    Writer methods (append, append_many, commit, enforce_retention) are serialised by a lock;
    read_after and wait_for_commit may be called from any number of threads meanwhile.
    """

    def __init__(
        self,
        directory: Path,
        meta: BufferMeta,
        view: View,
        *,
        writer: Writer | None = None,
        lock: DirectoryLock | None = None,
        retention: Retention = KEEP_ALL,
        index_every: int = DEFAULT_INDEX_EVERY,
    ) -> None:
        self._directory = directory
        self._meta = meta
        self._view = view
        self._writer = writer
        self._lock = lock
        self._retention = retention
        self._index_every = index_every
        self._write_lock = threading.Lock()
        self._read_lock = threading.RLock()  # read-only: refresh and read one at a time
        self._cond = threading.Condition()
        self._closed = False
        self._listeners: list[Callable[[], None]] = []

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        fsync: str = "batch",
        compress: bool = False,
        retain_bytes: int | None = None,
        retain_seconds: float | None = None,
        clock: Callable[[], float] = time.time,
        base_scn: SCN = SCN.ZERO,
        index_every_bytes: int = DEFAULT_INDEX_EVERY,
    ) -> EventBuffer:
        """Open ``directory`` for writing, creating the buffer (a new epoch) if there is none.

        Recovers the tail first (see the format's recovery rule). ``base_scn``, used only when
        creating, is the SCN the buffer's history starts after. Raises BufferLockedError if
        another writer has the directory open.
        """
        check_options(segment_bytes, fsync, retain_bytes, retain_seconds, index_every_bytes)
        path = Path(directory)
        make_private_dir(path)
        lock = DirectoryLock(path)
        try:
            sync = fsync != "never"
            meta = open_or_create(path, base_scn, sync)
            segments = load_segments(path, meta, index_every_bytes, repair=True, sync=sync)
            view = scanned_view(path, meta, segments)
            options = WriterOptions(segment_bytes, fsync, compress, index_every_bytes)
            writer = Writer(path, meta, segments, view, options)
        except BaseException:
            lock.release()
            raise
        buffer = cls(
            path,
            meta,
            writer.view(),
            writer=writer,
            lock=lock,
            retention=Retention(retain_bytes, retain_seconds, clock),
            index_every=index_every_bytes,
        )
        try:
            buffer.enforce_retention()
        except BaseException:
            buffer.close()
            raise
        return buffer

    @classmethod
    def open_read_only(
        cls, directory: str | PathLike[str], *, index_every_bytes: int = DEFAULT_INDEX_EVERY
    ) -> EventBuffer:
        """Open a buffer another process may be writing, without a lock and without changes.

        The view ends at the last complete transaction before the first invalid or unfinished
        tail, and is refreshed on each read_after (and by :meth:`refresh`). Under
        ``fsync="always"``, or once a writer has flushed more than FLUSH_BYTES, it may show
        transactions the writer appended but has not committed yet. Reads are serialised.
        """
        path = Path(directory)
        meta = read_meta(path) if path.is_dir() else None
        if meta is None:
            raise BufferStateError(f"{path} is not an EventBuffer directory (no buffer.json)")
        segments = load_segments(path, meta, index_every_bytes, repair=False, sync=False)
        if not segments:
            raise BufferStateError(f"EventBuffer {path} has no readable segment")
        view = scanned_view(path, meta, segments)
        return cls(path, meta, view, index_every=index_every_bytes)

    # -- writing -------------------------------------------------------------------------

    def append(self, scn: SCN, payload: bytes, timestamp_ms: int, more: bool = False) -> None:
        """Append one record; invisible to readers until :meth:`commit`.

        ``more=True`` marks a fragment that another fragment of the same SCN follows. Raises
        OutOfOrderAppendError (nothing changed) unless ``scn`` follows the last append.
        """
        check_record(scn, payload, timestamp_ms)
        writer = self._require_writer()
        with self._write_lock:
            writer.append(scn, payload, timestamp_ms, more)

    def append_many(self, records: Iterable[AppendItem]) -> int:
        """Append ``(scn, payload, timestamp_ms[, more])`` items in order; returns how many.

        Stops at the first bad item, raising; the items before it stay appended.
        """
        writer = self._require_writer()
        count = 0
        with self._write_lock:
            for item in records:
                scn, payload, timestamp_ms = item[0], item[1], item[2]
                more = bool(item[3]) if len(item) > 3 else False
                check_record(scn, payload, timestamp_ms)
                writer.append(scn, payload, timestamp_ms, more)
                count += 1
        return count

    def commit(self, check: Callable[[], None] | None = None) -> None:
        """Make every complete transaction appended so far durable (per fsync) and visible.

        A trailing transaction whose last fragment is not appended yet is written but stays
        invisible. Wakes :meth:`wait_for_commit`, then applies retention. ``check`` (a
        fence) runs once the records are written, before they become visible; if it raises,
        the files are cut back to the last commit and the buffer must be reopened.
        """
        writer = self._require_writer()
        with self._write_lock:
            writer.commit(check)
            self._publish(writer.view())
        self._tell_listeners()
        self.enforce_retention()

    def enforce_retention(self) -> list[int]:
        """Delete the oldest sealed, committed segments beyond ``retain_bytes`` or older than
        ``retain_seconds`` (newest record, by the injected clock); their sequence numbers."""
        writer = self._require_writer()
        if self._retention.keeps_all:
            return []
        with self._write_lock:
            gone = writer.retention(self._retention)
            if gone:
                self._publish(writer.view())
                writer.unlink(gone)
        return [seg.seq for seg in gone]

    # -- reading -------------------------------------------------------------------------

    def read_after(
        self, after: SCN, max_records: int = 1000, max_bytes: int = 4 << 20
    ) -> list[Record]:
        """The committed records with SCN > ``after``: whole transactions, bounded by
        ``max_records`` and ``max_bytes`` except that the first is always returned whole.

        Raises ScnTooOldError if retention deleted records after ``after`` and
        CorruptRecordError (naming segment file and offset) for a record failing its checks.
        """
        if not isinstance(after, SCN):
            raise TypeError(f"after must be an SCN, got {type(after).__name__}")
        for _ in range(_READ_RETRIES):
            try:
                if self._writer is not None:
                    return read_batch(self._current(), after, max_records, max_bytes)
                with self._read_lock:
                    return read_batch(self.refresh(), after, max_records, max_bytes)
            except SegmentGone:
                continue  # retention deleted a segment mid-read: look again with a fresh view
        oldest = self._current().oldest_servable
        if after < oldest:
            raise too_old(self._directory, after, oldest)
        raise RetriableError(
            f"EventBuffer {self._directory}: retention kept deleting segments during the read "
            f"after SCN {after}; retry"
        )

    def wait_for_commit(self, after: SCN, timeout_s: float) -> bool:
        """Block until a record with SCN > ``after`` is committed, or ``timeout_s`` passes.

        True if there is one. A writer's commit wakes the waiters (no polling); a read-only
        buffer polls every READ_ONLY_POLL_S, since another process does the commits.
        """
        deadline = time.monotonic() + timeout_s
        if self._writer is None:
            return self._poll_for_commit(after, deadline)
        with self._cond:
            while True:
                last = self._view.last_scn
                if last is not None and last > after:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                self._cond.wait(remaining)

    def on_commit(self, listener: Callable[[], None]) -> bool:
        """Call ``listener()`` in the committing thread after each commit (and on close), once
        its records are visible: an in-process reader learns of them without a thread of its
        own waiting. False on a read-only buffer (another process commits): poll instead.
        The listener must be quick and must not raise."""
        if self._writer is None:
            return False
        self._listeners.append(listener)
        return True

    def _tell_listeners(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # a reader's bug must not fail the writer's commit
                log.exception("an EventBuffer commit listener failed")

    def _poll_for_commit(self, after: SCN, deadline: float) -> bool:
        while True:
            with self._read_lock:
                last = self.refresh().last_scn
            if last is not None and last > after:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closed:
                return False
            time.sleep(min(READ_ONLY_POLL_S, remaining))

    def refresh(self) -> View:
        """Read-only: look at the directory again (new commits, deleted segments); the view."""
        self._check_open()
        if self._writer is None:
            with self._read_lock:
                segments = load_new_segments(
                    self._directory, self._meta, list(self._view.segments), self._index_every
                )
                self._view = scanned_view(self._directory, self._meta, segments)
        return self._view

    def view(self) -> View:
        """What readers may see now (a read-only buffer looks at the directory again first)."""
        return self.refresh() if self._writer is None else self._current()

    # -- state -----------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def read_only(self) -> bool:
        return self._writer is None

    @property
    def epoch(self) -> str:
        """The buffer's identity (uuid4 hex); a new one whenever it is created from scratch."""
        return self._view.epoch

    @property
    def first_scn(self) -> SCN | None:
        """SCN of the oldest committed record still stored, None when there is none."""
        return self._current().first_scn

    @property
    def last_scn(self) -> SCN | None:
        """SCN of the newest committed transaction, None when there is none."""
        return self._current().last_scn

    @property
    def resume_scn(self) -> SCN | None:
        """Where the buffer's history ends, so capture continues after it: the last SCN, or
        when no record is stored the oldest servable SCN (a repair or a cut tail may leave
        only an empty segment). None only for a new buffer, whose start is not fixed yet."""
        view = self._current()
        if view.last_scn is not None:
            return view.last_scn
        return None if view.oldest_servable == SCN.ZERO else view.oldest_servable

    @property
    def uncommitted(self) -> bool:
        """Writer: records were appended since the last commit (close drops them)."""
        return self._require_writer().uncommitted

    @property
    def oldest_servable(self) -> SCN:
        """The oldest SCN a reader may read after (prev_scn of the oldest segment)."""
        return self._current().oldest_servable

    @property
    def record_count(self) -> int:
        """Committed records stored (fragments count one each)."""
        return self._current().record_count

    @property
    def size_bytes(self) -> int:
        """Bytes of segment data on disk (headers and records, appended ones included)."""
        return self._current().size_bytes

    def segments(self) -> tuple[Segment, ...]:
        """The segments of the current view, oldest first (for inspection)."""
        return self._current().segments

    def close(self) -> None:
        """Release the directory; appends not committed are dropped. Idempotent."""
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            if self._writer is not None:
                self._writer.close()
            if self._lock is not None:
                self._lock.release()
            with self._cond:
                self._cond.notify_all()
            for seg in self._view.segments:
                seg.close()
        self._tell_listeners()

    def __enter__(self) -> EventBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"EventBuffer({str(self._directory)!r}, {mode}, epoch={self._view.epoch})"

    # -- helpers -------------------------------------------------------------------------

    def _current(self) -> View:
        self._check_open()
        return self._view

    def _publish(self, view: View) -> None:
        with self._cond:
            self._view = view
            self._cond.notify_all()

    def _require_writer(self) -> Writer:
        self._check_open()
        if self._writer is None:
            raise BufferStateError(f"EventBuffer {self._directory} is open read-only")
        self._writer.check()
        return self._writer

    def _check_open(self) -> None:
        if self._closed:
            raise BufferStateError(f"EventBuffer {self._directory} is closed")
