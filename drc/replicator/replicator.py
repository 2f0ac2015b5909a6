"""The capture loop: source binlog -> transactions with SCNs -> EventBuffer (+ schema history).

    reader thread: BinlogStream.events() ──queue──> main: assembler -> codec -> buffer.append
                                                          └ group commit when the queue stays dry
                                                            or at max_txns / max_bytes / max_ms

Restart position: the buffer's ``resume_scn``: its last SCN, or the oldest servable SCN when
it stores no record (e.g. after ``drc buffer repair``), so a lost tail is never skipped. It is a
transaction boundary by construction (the SCN is the position after the commit event), so
after any crash or dropped connection reading resumes exactly after the last transaction the
buffer holds: no gap, no duplicate. On another server of the source's replication group (a
failover, drc.replicator.failover) it resumes by the GTID position stored with that SCN, with
change_id + 1 (both chosen by drc.replicator.session_start). Every record keeps the source's
GTID position (drc.core.gtid), markers too.
Transactions the capture filter empties are not stored, but before each group commit an empty
marker is appended for the newest one, so the restart position keeps up with a filtered-out
workload.

The metastore is written before the buffer commits; after a crash those transactions are read
again and their schema recorded again, which the metastore treats as a no-op.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drc.core.codec import encode_transaction
from drc.core.ddl import ddl_tables
from drc.core.events import SchemaChange, TableSchema, Transaction
from drc.core.heartbeat import source_time_ms
from drc.core.masking import Masker
from drc.core.retry import Backoff, Policy, Retrying, Stopped, retry
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import Committed, FragmentLimits, TransactionAssembler
from drc.replicator.room import RoomWait
from drc.replicator.session_start import SessionStart, session_start
from drc.replicator.source import BinlogStream, SourceSettings
from drc.replicator.source_events import Commit, Heartbeat, Statement, XaPrepare
from drc.replicator.spill import FileSpill

log = logging.getLogger(__name__)
_QUEUE_DEPTH = 1024
_MAX_EVENTS_PER_ITEM = 256  # a huge transaction still moves on in bounded pieces
# Row bytes (as in the binlog) decoded ahead of the capture loop, in the queue and in one item:
# their rows take 10-20x that in objects (a narrow row: 22 bytes in the binlog, ~400 decoded).
# Bounded by items alone, a million-row INSERT ... SELECT was decoded far ahead of capture
# (~150 MB of rows waiting; docs/reliability.md).
_QUEUE_BYTES = 1 << 20
_ITEM_BYTES = 128 << 10
_FLUSH_AFTER = (Commit, Statement, XaPrepare, Heartbeat)  # group ends, idle ticks: never held


@dataclass(frozen=True)
class CaptureOptions:
    capture: TableFilter = field(default_factory=TableFilter)
    start_from: str = "current"  # "current" | "earliest" | "FILE:POS", used only on an empty buffer
    fragments: FragmentLimits = field(default_factory=FragmentLimits)
    commit_max_txns: int = 2000
    commit_max_bytes: int = 16 << 20
    commit_max_ms: float = 50.0
    commit_linger_s: float = 0.002
    retry_initial_s: float = 0.2
    retry_max_s: float = 2.0  # a source that is back is read again within this
    spill_dir: Path | None = None
    omit_drc_rows: bool = False  # [replicator] drc_applied = "marker" (drc.replicator.assembler)
    mask: Masker | None = None  # [replicator] mask_columns, applied before storing


@dataclass
class CaptureStats:
    transactions: int = 0
    rows: int = 0
    bytes: int = 0
    commits: int = 0
    filtered_out: int = 0
    drc_applied_markers: int = 0  # DRC-originated transactions stored without their rows
    account_statements_dropped: int = 0  # CREATE USER, GRANT ...: never stored (secrets)
    reconnects: int = 0
    triggers_guarded: int = 0  # local triggers given DRC's guard (drc.apply.trigger_guard)
    triggers_unguarded: int = 0  # ... that could not be
    source_position: tuple[int, int] | None = None
    source_time_ms: int | None = None  # source time of the newest change stored (heartbeats too)
    last_error: str | None = None
    disk_full_waits: int = 0  # retries of a buffer write its full filesystem refused
    source_server: str | None = None  # host:port of the server read now
    change_id: int | None = None
    source_switches: int = 0  # sessions started on another server than the last SCN's


class Replicator:
    def __init__(
        self,
        source: SourceSettings | Sequence[SourceSettings],
        buffer: Any,
        metastore: Any,
        options: CaptureOptions = CaptureOptions(),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        local_ddl: Callable[[SchemaChange], None] | None = None,
    ) -> None:
        self._sources = (source,) if isinstance(source, SourceSettings) else tuple(source)
        if not self._sources:
            raise ValueError("Replicator needs at least one source server")
        # The newest session's start: the server capture reads now (drc.replicator.backfill).
        self.current: SessionStart | None = None
        self._local_ddl = local_ddl  # told of each stored DDL a local (not DRC) session ran
        self._buffer = buffer
        self._metastore = metastore
        self._options = options
        self._clock = clock
        self._sleep = sleep
        self._known_schemas: dict[tuple[str, str], TableSchema] = {}
        self.stats = CaptureStats()
        self._room = RoomWait(self.stats)

    @property
    def options(self) -> CaptureOptions:
        return self._options

    def set_local_ddl(self, hook: Callable[[SchemaChange], None]) -> None:
        """Call ``hook`` with each stored DDL statement a local (not DRC) session ran."""
        self._local_ddl = hook

    def run(self, stop: threading.Event) -> None:
        """Capture until ``stop`` is set; retriable failures reconnect with backoff (a session
        that ends without one starts the backoff over)."""
        policy = Policy(Backoff(self._options.retry_initial_s, self._options.retry_max_s))
        self._room.watch(stop)

        def reconnecting(retrying: Retrying) -> None:
            self.stats.reconnects += 1
            self.stats.last_error = str(retrying.error)
            log.warning(
                "capture interrupted, retrying in %.1fs: %s", retrying.delay, retrying.error
            )

        while not stop.is_set():
            try:
                retry(
                    lambda: self.run_session(stop),
                    policy,
                    sleep=stop.wait,
                    stopped=stop.is_set,
                    on_retry=reconnecting,
                )
            except Stopped:
                return

    def prepare(self) -> None:
        """On an empty buffer, fix and store the start position now, so that every write made
        after this call is captured even if capture itself starts a moment later."""
        if self._buffer.resume_scn is None:
            self._start()

    def _start(self) -> SessionStart:
        """The server and position to read next (drc.replicator.session_start)."""
        return session_start(self._sources, self._buffer, self._options.start_from, self._room)

    def run_session(self, stop: threading.Event) -> None:
        """One connection: from the buffer's restart position until ``stop`` or an error."""
        start = self._start()
        where = start.gtid and f"GTID {start.gtid}" or f"{start.log_file}:{start.log_pos}"
        log.info(
            "capturing %r (server_id %d) from %s (change_id %d)",
            start.settings,
            start.info.server_id,
            where,
            start.change_id,
        )
        assembler = TransactionAssembler(
            start.info.server_id,
            start.change_id,
            self._options.capture,
            self._options.fragments,
            spill_factory=lambda: FileSpill(self._options.spill_dir),
            gtid_position=start.position,
            omit_drc_rows=self._options.omit_drc_rows,
        )
        stream = BinlogStream(
            start.settings,
            start.log_file,
            start.log_pos,
            gtid=start.gtid,
            skip_marked_rows=self._options.omit_drc_rows,
        )
        self.current = start
        self.stats.source_server = f"{start.settings.host}:{start.settings.port}"
        self.stats.change_id = start.change_id
        self.stats.source_switches += start.gtid is not None
        session_stop = threading.Event()
        events = _Handoff(_QUEUE_DEPTH, _QUEUE_BYTES)
        reader = threading.Thread(
            target=_pump, args=(stream, session_stop, events), name="binlog-reader", daemon=True
        )
        reader.start()
        try:
            self._consume(stop, events, assembler)
        finally:
            session_stop.set()
            stream.close()
            reader.join(timeout=10)
            assembler.reset()

    def _consume(
        self, stop: threading.Event, events: _Handoff, assembler: TransactionAssembler
    ) -> None:
        batch = _Batch()
        while not stop.is_set():
            try:
                # With work pending, wait a moment for more before publishing: one fsync then
                # covers many transactions, at a bounded cost in latency.
                item = events.get(timeout=0.2 if batch.empty else self._options.commit_linger_s)
            except queue.Empty:
                self._commit(batch)  # the source had nothing more: publish
                continue
            if isinstance(item, BaseException):
                self._commit(batch)
                raise item
            for event in item:
                self._feed(event, assembler, batch)
        self._commit(batch)

    def _feed(self, event: Any, assembler: TransactionAssembler, batch: _Batch) -> None:
        if isinstance(event, Heartbeat):
            self.stats.source_position = (event.log_index, event.log_pos)
        dropped = assembler.account_statements_dropped  # the assembler is new per session
        try:
            committed = assembler.feed(event)
        except Exception:  # e.g. a two-phase XA: store the transactions before it first
            self._commit(batch)
            raise
        self.stats.account_statements_dropped += assembler.account_statements_dropped - dropped
        if committed is not None:
            self._append(committed, batch)
            if self._batch_full(batch):
                self._commit(batch)

    def _batch_full(self, batch: _Batch) -> bool:
        opts = self._options
        return (
            batch.transactions >= opts.commit_max_txns
            or batch.bytes >= opts.commit_max_bytes
            or (self._clock() - batch.started) * 1000 >= opts.commit_max_ms
        )

    def _append(self, committed: Committed, batch: _Batch) -> None:
        batch.note(self._clock())
        batch.newest = committed
        self.stats.source_position = (committed.scn.log_index, committed.scn.log_pos)
        if committed.empty:
            self.stats.filtered_out += 1
            return
        self._record_schemas(committed)
        for fragment in committed.fragments():
            if self._options.mask is not None:
                fragment = self._options.mask(fragment, committed.tables)
            self._write(fragment, batch)
        batch.stored = committed.scn
        self.stats.transactions += 1
        if self._local_ddl is not None and not committed.drc_originated:
            for change in committed.ddl:
                self._local_ddl(change)

    def _write(self, fragment: Transaction, batch: _Batch) -> None:
        payload, more = encode_transaction(fragment), not fragment.last_fragment
        self._room.call(
            lambda: self._buffer.append(fragment.scn, payload, fragment.timestamp * 1000, more)
        )
        batch.bytes += len(payload)
        source_ms = source_time_ms(fragment)
        if self.stats.source_time_ms is None or source_ms > self.stats.source_time_ms:
            self.stats.source_time_ms = source_ms
        self.stats.rows += len(fragment.changes)
        self.stats.drc_applied_markers += fragment.rows_omitted
        self.stats.bytes += len(payload)

    def _record_schemas(self, committed: Committed) -> None:
        for key, schema in committed.tables.items():
            if self._known_schemas.get(key) != schema:
                self._metastore.record_schema(committed.scn, schema)
                self._known_schemas[key] = schema
        for change in committed.ddl:
            named = ddl_tables(change)
            self._metastore.record_ddl(committed.scn, change, [(db, t) for db, t, _ in named])
            for db, table, _kind in named:
                self._known_schemas.pop((db, table), None)

    def _commit(self, batch: _Batch) -> None:
        if batch.newest is not None and batch.newest.scn != batch.stored:
            # Everything since the last stored transaction was filtered out: store a marker so
            # the restart position (the buffer's last SCN) and its GTID position keep up.
            newest = batch.newest
            scn, position = newest.scn, newest.gtid_position
            marker = Transaction(scn, scn.server_id, newest.gtid, 0, (), gtid_position=position)
            self._write(marker, batch)
            batch.stored = newest.scn
        if batch.transactions or batch.stored is not None:
            self._room.call(self._buffer.commit)
            self.stats.commits += 1
        batch.reset()


class _Batch:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.transactions = 0
        self.bytes = 0
        self.started = 0.0
        self.newest: Committed | None = None
        self.stored: SCN | None = None

    @property
    def empty(self) -> bool:
        return self.transactions == 0

    def note(self, now: float) -> None:
        if self.transactions == 0:
            self.started = now
        self.transactions += 1


class _Handoff:
    """The reader's queue to the capture loop, bounded to ``depth`` items and ``max_bytes`` of
    row events. A SimpleQueue (its put and get are C code, where queue.Queue's go through a
    Python Condition: at one item per transaction that hand-off cost a tenth of capture); the
    reader waits for room only when the loop is that far behind, and is let go once it is
    half as far behind."""

    def __init__(self, depth: int, max_bytes: int) -> None:
        self._items: queue.SimpleQueue[tuple[Any, int]] = queue.SimpleQueue()
        self._depth = depth
        self._max_bytes = max_bytes
        self._bytes = 0  # of the items queued
        self._lock = threading.Lock()
        self._room = threading.Event()
        self._room.set()

    def _full(self, depth: int, max_bytes: int) -> bool:
        return self._items.qsize() >= depth or self._bytes >= max_bytes

    def put(self, item: Any, stop: threading.Event, size: int = 0) -> None:
        while self._full(self._depth, self._max_bytes) and not stop.is_set():
            self._room.clear()
            if self._full(self._depth, self._max_bytes):  # the loop may have drained it
                self._room.wait(0.2)
        with self._lock:
            self._bytes += size
        self._items.put((item, size))

    def get(self, timeout: float) -> Any:
        """The next item; queue.Empty after ``timeout`` seconds without one."""
        item, size = self._items.get(timeout=timeout)
        if size:
            with self._lock:
                self._bytes -= size
        if not self._room.is_set() and not self._full(self._depth // 2, self._max_bytes // 2):
            self._room.set()
        return item


def _pump(stream: BinlogStream, stop: threading.Event, events: _Handoff) -> None:
    """Reader thread: move source events, a transaction's worth per queue item (one hand-off
    instead of one per event), or the error that ended them, into the queue."""
    pending: list[Any] = []
    size = 0
    try:
        for event in stream.events(stop):
            pending.append(event)
            size += getattr(event, "size_bytes", 0)
            if (
                isinstance(event, _FLUSH_AFTER)
                or len(pending) >= _MAX_EVENTS_PER_ITEM
                or size >= _ITEM_BYTES
            ):
                events.put(pending, stop, size)
                pending, size = [], 0
    except Exception as exc:  # DrcError, or a library bug: stop capture loudly, not hang it
        if pending:
            events.put(pending, stop, size)
        events.put(exc, stop)
