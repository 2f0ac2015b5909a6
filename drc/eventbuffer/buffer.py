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

import threading
import time
from collections.abc import Callable, Iterable
from os import PathLike
from pathlib import Path

from drc.core.errors import BufferStateError, RetriableError
from drc.core.scn import SCN
from drc.eventbuffer.reader import Record, SegmentGone, View, deleted, too_old
from drc.eventbuffer.retention import KEEP_ALL, Retention
from drc.eventbuffer.segment import Segment
from drc.eventbuffer.views import Published, Rescanned, Views
from drc.eventbuffer.writer import Writer, WriterOptions, check_options, check_record

DEFAULT_SEGMENT_BYTES = 64 << 20
DEFAULT_INDEX_EVERY = 4096
_READ_RETRIES = 5

AppendItem = tuple[SCN, bytes, int] | tuple[SCN, bytes, int, bool]


class EventBuffer:
    """A buffer directory, open for writing (:meth:`open`) or reading (:meth:`open_read_only`).

    Writer methods (append, append_many, commit, enforce_retention) are serialised by a lock;
    read_after and wait_for_commit may be called from any number of threads meanwhile.
    """

    def __init__(
        self, views: Views, writer: Writer | None = None, retention: Retention = KEEP_ALL
    ) -> None:
        self._directory = views.view.directory
        self._views = views
        self._writer = writer
        self._retention = retention
        self._write_lock = threading.Lock()

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
        options = WriterOptions(segment_bytes, fsync, compress, index_every_bytes)
        writer = Writer.open(Path(directory), base_scn, options)
        retention = Retention(retain_bytes, retain_seconds, clock)
        buffer = cls(Published(writer.view()), writer, retention)
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
        return cls(Rescanned.open(Path(directory), index_every_bytes))

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
        published = self._published()
        with self._write_lock:
            writer.commit(check)
            published.publish(writer.view())
        published.tell()
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
                self._published().publish(writer.view())
                writer.unlink(gone)
        return [seg.seq for seg in gone]

    # -- reading -------------------------------------------------------------------------

    def read_after(
        self,
        after: SCN,
        max_records: int = 1000,
        max_bytes: int = 4 << 20,
        *,
        within: int = 0,
        split: bool = False,
    ) -> list[Record]:
        """The committed records after the position ``(after, within)`` (``within`` > 0: inside
        the transaction at ``after``, its first ``within`` records taken): whole transactions,
        bounded by ``max_records`` and ``max_bytes`` except that the first is always returned
        whole; with ``split`` the first is cut after the records that fit ``max_bytes``
        (drc.eventbuffer.reader).

        Raises ScnTooOldError if retention deleted records after ``after``, PositionError for
        a ``within`` the transaction at ``after`` does not have, and CorruptRecordError (naming
        segment file and offset) for a record failing its checks.
        """
        if not isinstance(after, SCN):
            raise TypeError(f"after must be an SCN, got {type(after).__name__}")
        for _ in range(_READ_RETRIES):
            try:
                return self._views.read(after, max_records, max_bytes, within, split)
            except SegmentGone:
                continue  # retention deleted a segment mid-read: look again with a fresh view
        oldest = self._views.current().oldest_servable
        if deleted(after, within, oldest):
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
        return self._views.wait_past(after, time.monotonic() + timeout_s)

    def on_commit(self, listener: Callable[[], None]) -> bool:
        """Call ``listener()`` in the committing thread after each commit (and on close), once
        its records are visible: an in-process reader learns of them without a thread of its
        own waiting. False on a read-only buffer (another process commits): poll instead.
        The listener must be quick and must not raise."""
        return self._views.listen(listener)

    def refresh(self) -> View:
        """Read-only: look at the directory again (new commits, deleted segments); the view."""
        return self._views.fresh()

    def view(self) -> View:
        """What readers may see now (a read-only buffer looks at the directory again first)."""
        return self._views.fresh()

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
        return self._views.view.epoch

    @property
    def first_scn(self) -> SCN | None:
        """SCN of the oldest committed record still stored, None when there is none."""
        return self._views.current().first_scn

    @property
    def last_scn(self) -> SCN | None:
        """SCN of the newest committed transaction, None when there is none."""
        return self._views.current().last_scn

    @property
    def resume_scn(self) -> SCN | None:
        """Where the buffer's history ends, so capture continues after it: the last SCN, or
        when no record is stored the oldest servable SCN (a repair or a cut tail may leave
        only an empty segment). None only for a new buffer, whose start is not fixed yet."""
        view = self._views.current()
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
        return self._views.current().oldest_servable

    @property
    def record_count(self) -> int:
        """Committed records stored (fragments count one each)."""
        return self._views.current().record_count

    @property
    def size_bytes(self) -> int:
        """Bytes of segment data on disk (headers and records, appended ones included)."""
        return self._views.current().size_bytes

    def segments(self) -> tuple[Segment, ...]:
        """The segments of the current view, oldest first (for inspection)."""
        return self._views.current().segments

    def close(self) -> None:
        """Release the directory; appends not committed are dropped. Idempotent."""
        with self._write_lock:
            if self._views.closed:
                return
            self._views.closed = True  # first: a close that fails half-way is not redone
            if self._writer is not None:
                self._writer.close()
            self._views.release()
        self._views.tell()

    def __enter__(self) -> EventBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"EventBuffer({str(self._directory)!r}, {mode}, epoch={self.epoch})"

    # -- helpers -------------------------------------------------------------------------

    def _require_writer(self) -> Writer:
        self._views.check_open()
        writer = self._writer
        if writer is None:
            raise BufferStateError(f"EventBuffer {self._directory} is open read-only")
        if writer.failed is not None:
            raise writer.stopped()
        return writer

    def _published(self) -> Published:
        assert isinstance(self._views, Published)  # a writer's buffer publishes its commits
        return self._views
