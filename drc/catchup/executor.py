"""What runs on the Spark executors: copy segments, read them, and apply one partition.

Everything an executor needs travels in a :class:`Job` (pickled by Spark): the channel's config
(its filter chain and decisions are built here from it, by the same composition root as a
streaming channel: drc.apply.service.build_parts), the target's settings, the remote API and
its token, the lease owner. Nothing is shared through storage: each executor copies the
segments it reads straight from the remote replicator (drc.client.SegmentSource: resumed,
SHA-256 checked before a byte is used) into a local directory, where a later stage of the same
run on the same host finds them again.

Applying a partition (:func:`apply_partition`): its changes sorted into stream order, reduced
to the net change per key (drc.core.reduce), cut into batches of about ``batch_changes`` (only
between two transactions: a delete and its tombstone row stay together); each batch is one
target transaction::

    probe          the rows of tables with a conflict policy, read and locked (FOR UPDATE)
    lease          the channel's lease row, shared lock: still this run's, or stop
                   (drc.catchup.lease; a streaming channel may have taken over)
    done?          drc.catchup_done for (span, partition, batch): committed by an earlier run
                   of this catch-up, skip it (drc.catchup.journal)
    decide         drc.apply.engine, exactly as streaming decides
    write          the writes (pipelined, skip_replication session), conflict log, tombstones,
                   the batch's done row, COMMIT

Tables with a conflict policy are not reduced (neither per slice nor per partition): a key's
changes are decided one by one in SCN order, as streaming decides them, so a key that meets a
concurrent local write gets the same decisions and the same conflict log entries (one per
change, not one per key), and an insert later deleted in the range still meets the local row
it conflicts with. Known difference: a key-changing update is split by the router (its old and
new keys may go to two partitions), so the delete of its old key is dated like a delete
without a tombstone (drc.apply.conflict_rules.derived_delete_stamp) where streaming dates it
by the new row's timestamp.
"""

from __future__ import annotations

import fcntl
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drc.apply.conflicts import Observed
from drc.apply.engine import ApplyEngine, KnownTables
from drc.apply.plan import Effects, TargetTable
from drc.apply.retry import RetryPolicy, call_with_retries
from drc.apply.service import build_parts
from drc.apply.sink import TargetSession, TargetSettings
from drc.apply.stages import Chain
from drc.catchup import journal, lease
from drc.catchup.routing import Position, route, transactions
from drc.client import SegmentInfo, SegmentSource
from drc.config import ChannelConfig, ConflictsConfig
from drc.core.codec import decode_transaction, encode_transaction, peek_tables
from drc.core.events import Op, RowChange, Transaction
from drc.core.markers import is_tombstone_table
from drc.core.reduce import Change, Span, reduce_changes
from drc.core.scn import SCN
from drc.eventbuffer.export import read_segment_file
from drc.eventbuffer.reader import Record

BATCH_CHANGES = 2000


@dataclass(frozen=True)
class Job:
    """One catch-up run, as every executor needs it."""

    channel: ChannelConfig
    target: TargetSettings
    conflicts: ConflictsConfig | None
    datacenter: str
    owner: str  # the lease owner (drc.catchup.lease.new_owner)
    url: str  # the remote replicator's API
    epoch: str  # of the listing: a rebuilt buffer is refused, never mixed in
    token: str | None = field(default=None, repr=False)
    partitions: int = 8
    batch_changes: int = BATCH_CHANGES

    @property
    def cache(self) -> Path:
        """Where this host keeps the run's segment copies."""
        safe = "".join(c if c.isalnum() else "-" for c in self.owner)[-60:]
        return Path(tempfile.gettempdir()) / f"drc-catchup-{safe}"

    def chain(self) -> Chain:
        return Chain(self.parts().filters)

    def parts(self) -> Any:
        return build_parts(
            self.channel, self.target, conflicts=self.conflicts, datacenter=self.datacenter
        )

    def source(self) -> SegmentSource:
        return segment_source(self.channel, self.url, self.token)


def segment_source(channel: ChannelConfig, url: str, token: str | None) -> SegmentSource:
    """The remote's segments with the channel's token and TLS keys (files the executor reads)."""
    c = channel
    return SegmentSource(
        url, token=token, verify=c.tls_verify, ca=c.tls_ca, cert=c.tls_cert, key=c.tls_key
    )


@dataclass
class SegmentScan:
    """What pass 1 found in one segment."""

    name: str
    size: int
    seconds: float
    records: int = 0
    ddl: list[tuple[SCN, SCN]] = field(default_factory=list)  # (DDL's SCN, the SCN before it)
    tables: set[tuple[str, str]] = field(default_factory=set)  # source names, DRC's left out


Slice = tuple[SegmentInfo, int, int]  # a segment, and which share of its records: k of n


def copy(job: Job, info: SegmentInfo, source: SegmentSource) -> Path:
    """The verified local copy of a segment, downloaded once per host and run (the tasks
    reading other shares of it on this host wait for that one download)."""
    job.cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = job.cache / info.name
    with open(job.cache / (info.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.exists() and final.stat().st_size == info.size:
            return final  # renamed into place only after its checksum matched
        return source.download(info, job.cache, job.epoch)


def _records(
    job: Job, piece: Slice, source: SegmentSource, after: SCN
) -> Iterator[tuple[Record, bool]]:
    """The records of a segment copy after ``after``, each with whether it is this slice's:
    slice k of n is the k-th of n runs of consecutive records of the segment, so a slice is a
    contiguous part of the stream."""
    info, k, n = piece
    path = copy(job, info, source)
    low, high = info.records * k // n, info.records * (k + 1) // n
    for index, record in enumerate(read_segment_file(path, job.epoch, info.seq)):
        if index >= high:
            return
        if record.scn > after:
            yield record, index >= low


def scan(job: Job, infos: Iterable[SegmentInfo], after: SCN, to: SCN) -> Iterator[SegmentScan]:
    """Pass 1: copy each segment; find its DDL (after the chain) and the tables it changes,
    reading no row image (drc.core.codec.peek_tables)."""
    chain = job.chain()
    with job.source() as source:
        for info in infos:
            started = time.monotonic()
            copy(job, info, source)
            found = SegmentScan(info.name, info.size, time.monotonic() - started)
            current = before = info.prev_scn
            for record, _ in _records(job, (info, 0, 1), source, after):
                if record.scn > to:
                    break
                if record.scn != current:
                    before, current = current, record.scn
                found.records += 1
                drc_originated, tables, ddl = peek_tables(record.payload)
                if drc_originated:
                    continue
                found.tables.update(tables)
                if not ddl:
                    continue
                kept = chain(decode_transaction(record.payload, 0)[0])
                if kept is not None and kept.ddl:  # the SCN before it, unless it began earlier
                    scn = record.scn
                    found.ddl.append((scn, before if before < scn else SCN.ZERO))
            yield found


def target_tables(job: Job, tables: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The target's names of the source tables the chain keeps (table filter, map_tables)."""
    probe = tuple(RowChange(schema, table, Op.INSERT, None, {}) for schema, table in tables)
    kept = job.chain()(Transaction(SCN.ZERO, 0, None, 0, probe))
    return set() if kept is None else set(kept.tables())


def fragments_at(job: Job, infos: Iterable[SegmentInfo], scns: set[SCN]) -> Iterator[Transaction]:
    """The fragments (after the chain) of the transactions at ``scns``: the DDL steps."""
    chain = job.chain()
    with job.source() as source:
        for info in infos:
            for record, _ in _records(job, (info, 0, 1), source, info.prev_scn):
                if record.scn in scns:
                    kept = chain(decode_transaction(record.payload, 0)[0])
                    if kept is not None:
                        yield kept


def read_span(
    job: Job,
    pieces: Iterable[Slice],
    span: Span,
    primary_keys: Mapping[tuple[str, str], Sequence[str]],
    count: Callable[[int], Any] = lambda _n: None,
) -> Iterator[tuple[int, tuple[Position, bytes]]]:
    """The row changes of ``span`` in these slices (after the chain), routed to their
    partitions and already reduced per slice: a slice is a contiguous part of the stream, so
    reducing the slices' net changes again gives the span's, and a hot row crosses the shuffle
    once per slice instead of once per change. Only a slice's own records are decoded."""
    parts = job.parts()
    chain = Chain(parts.filters)
    reducible = {t: k for t, k in primary_keys.items() if t not in in_order(parts, [t])}
    with job.source() as source:
        for piece in pieces:
            routed: dict[int, list[tuple[Position, Change]]] = {}
            for record, mine in _records(job, piece, source, span.after):
                if record.scn > span.end or (record.scn == span.end and not span.end_included):
                    break
                if not mine:
                    continue
                kept = chain(decode_transaction(record.payload, 0)[0])
                if kept is not None and kept.changes:
                    count(len(kept.changes))
                    for part, item in route(kept, primary_keys, job.partitions):
                        routed.setdefault(part, []).append(item)
            for part, items in routed.items():
                for position, net in _combined(items, reducible):
                    yield part, (position, _encode(net))


def _combined(
    items: list[tuple[Position, Change]], primary_keys: Mapping[tuple[str, str], Sequence[str]]
) -> Iterator[tuple[Position, Change]]:
    """The net changes of a contiguous run, each at the position of its key's last change
    (keyless and tombstone rows: every change at its own position)."""
    keys = {(c.change.schema, c.change.table): _reducible(c, primary_keys) for _, c in items}
    ends: dict[tuple[Any, ...], Position] = {}
    kept: dict[int, Position] = {}
    for position, item in items:
        columns = keys[(item.change.schema, item.change.table)]
        if columns:
            ends[_ref(item, columns)] = position
        else:
            kept[id(item)] = position
    for net in reduce_changes([item for _, item in items], keys):
        columns = keys[(net.change.schema, net.change.table)]
        yield (ends[_ref(net, columns)] if columns else kept[id(net)]), net


def _reducible(
    item: Change, primary_keys: Mapping[tuple[str, str], Sequence[str]]
) -> Sequence[str]:
    table = (item.change.schema, item.change.table)
    return () if is_tombstone_table(*table) else primary_keys.get(table, ())


def in_order(parts: Any, tables: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The tables (target names) with a conflict policy: never reduced (module docstring)."""
    handling = parts.conflicts
    if handling is None:
        return set()
    return {t for t in tables if handling.engine.policies.get(*t) is not None}


def batches(changes: Sequence[Change], size: int) -> Iterator[list[Change]]:
    """``changes`` cut into batches of at least ``size`` (the last may be smaller), only where
    the SCN changes: the same input gives the same batches."""
    start = 0
    while start < len(changes):
        end = min(start + size, len(changes))
        while end < len(changes) and changes[end].scn == changes[end - 1].scn:
            end += 1
        yield list(changes[start:end])
        start = end


def _ref(item: Change, columns: Sequence[str]) -> tuple[Any, ...]:
    change = item.change
    return (change.schema, change.table, *(change.row[c] for c in columns))


def _encode(item: Change) -> bytes:
    """A change as it crosses the shuffle: DRC's own codec (exact values, and several times
    cheaper than pickling the objects)."""
    txn = Transaction(item.scn, 0, None, item.timestamp, (item.change,))
    return encode_transaction(txn)


def _decode(payload: bytes) -> Change:
    txn = decode_transaction(payload, 0)[0]
    return Change(txn.scn, txn.timestamp, txn.changes[0])


@dataclass
class PartitionResult:
    part: int
    changes: int = 0  # decoded row changes the partition received
    reduced: int = 0  # net changes left
    batches: int = 0
    skipped: int = 0  # batches an earlier run had committed
    rows: int = 0
    conflicts: int = 0
    fixes: int = 0
    reduce_s: float = 0.0  # sorting and reducing
    write_s: float = 0.0  # deciding and writing


def apply_partition(
    job: Job,
    span_key: str,
    definitions: Mapping[tuple[str, str], TargetTable],
    part: int,
    items: Iterable[tuple[Position, bytes]],
) -> PartitionResult:
    """Reduce, decide and write one partition of a span (see the module docstring)."""
    began = time.monotonic()
    ordered = [_decode(payload) for _, payload in sorted(items, key=lambda item: item[0])]
    result = PartitionResult(part, changes=len(ordered))
    keys: dict[tuple[str, str], Sequence[str]] = {
        (c.change.schema, c.change.table): () for c in ordered
    }
    parts = job.parts()
    # Not reduced: tombstone rows (read, not written: they stay as they came, see routing)
    # and tables with a policy (decided change by change, as streaming does).
    kept = in_order(parts, definitions)
    keys.update(
        {n: t.primary_key for n, t in definitions.items()
         if not is_tombstone_table(*n) and n not in kept}
    )  # fmt: skip
    reduced = reduce_changes(ordered, keys)
    result.reduced = len(reduced)
    result.reduce_s = time.monotonic() - began
    session: TargetSession = parts.target
    handling = parts.conflicts
    engine = ApplyEngine(
        KnownTables(definitions), job.channel.no_primary_key,
        None if handling is None else handling.engine,
    )  # fmt: skip
    policy = RetryPolicy(retries=job.channel.retries)
    try:
        for number, batch in enumerate(batches(reduced, job.batch_changes)):

            def attempt(batch: list[Change] = batch, number: int = number) -> Effects | None:
                return _write_batch(job, session, engine, handling, span_key, part, number, batch)

            effects = call_with_retries(
                attempt, policy, recover=session.recover, sleep=time.sleep, stopped=lambda: False
            )
            result.batches += 1
            if effects is None:
                result.skipped += 1
                continue
            result.rows += effects.rows
            result.conflicts += effects.conflicts
            result.fixes += effects.fixes
    finally:
        session.close()
    result.write_s = time.monotonic() - began - result.reduce_s
    return result


def _write_batch(
    job: Job,
    session: TargetSession,
    engine: ApplyEngine,
    handling: Any,
    span_key: str,
    part: int,
    number: int,
    batch: list[Change],
) -> Effects | None:
    """One batch, one target transaction; None when an earlier run committed it."""
    name = job.channel.name
    pending = engine.prepare(transactions(batch))
    observed: list[Observed] = []
    if handling is not None:  # first: its table setup may commit; then the rows are locked
        observed = handling.probe(pending.probes)
    _check_lease(session, name, job.owner)
    if session.query(journal.is_done(name, span_key, part, number), "reading catch-up progress"):
        session.commit()
        return None
    decision = engine.decide(pending, observed)
    writes = session.batch()
    writes.extend(decision.writes)
    writes.flush()
    for statement in decision.log_statements():
        session.execute(statement, "recording conflicts and tombstones")
    session.execute(journal.mark_done(name, span_key, part, number, len(batch)))
    session.commit()
    effects = writes.effects
    effects.conflicts = decision.counts.conflicts
    return effects


def _check_lease(session: TargetSession, channel: str, owner: str) -> None:
    """The lease is still this run's, read with a shared lock held to the commit."""
    rows = session.query(lease.state_statement(channel), "checking the catch-up lease")
    if not rows or str(rows[0][0]) != owner or not rows[0][1]:
        raise lease.LeaseLostError(
            f"catch-up {owner} lost the lease of channel {channel} (it expired or was "
            "taken): nothing more is written; run the catch-up again"
        )
