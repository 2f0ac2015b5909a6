"""What runs on the Spark executors: copy segments, read them, and apply one partition.

Everything an executor needs travels in a :class:`Job` (pickled by Spark): the channel's config
(its filter chain and decisions are built here from it, by the same composition root as a
streaming channel: drc.apply.service.build_parts), the target's settings, the remote API and
its token, the lease owner. Nothing is shared through storage: each executor copies the
segments it reads straight from the remote replicator (drc.client.SegmentSource: resumed,
SHA-256 checked before a byte is used) into a local directory, where a later stage of the same
run on the same host finds them again.

Reading a slice (:func:`read_span`): each record decoded once into plain rows
(drc.core.codec.decode_rows), the filter chain asked once per table, the slice reduced per key
(but the changes of tables with a conflict policy, see below) and routed
(drc.catchup.routing.Router), and each partition's nets of the slice shipped as one packed
blob. Applying a partition (:func:`apply_partition`): the slices' nets merged in slice order
into the net change per key (drc.core.reduce.Nets), in stream order, cut into batches of about
``batch_changes`` (only between two transactions: a delete and its tombstone row stay
together); each batch is one target transaction::

    probe          the rows of tables with a conflict policy, read and locked (FOR UPDATE)
    lease          the channel's lease row, shared lock: still this run's, or stop
                   (drc.apply.lease; a streaming channel may have taken over)
    done?          drc.catchup_done for (span, partition, batch): committed by an earlier run
                   of this catch-up, skip it (drc.apply.catchup_journal)
    decide         drc.apply.engine, exactly as streaming decides
    write          the writes (pipelined, skip_replication session), conflict log, tombstones,
                   the batch's done row, COMMIT

Tables with a conflict policy are not reduced (neither per slice nor per partition): a key's
changes are decided one by one in SCN order, as streaming decides them, so a key that meets a
concurrent local write gets the same decisions and the same conflict log entries (one per
change, not one per key), and an insert later deleted in the range still meets the local row
it conflicts with. Known difference: a key-changing update is split by the router (its old and
new keys may go to two partitions), so the delete of its old key is dated like a delete
without a tombstone (drc.conflicts.rules.derived_delete_stamp) where streaming dates it
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

from drc.apply import catchup_journal as journal
from drc.apply import lease
from drc.apply.engine import ApplyEngine, KnownTables
from drc.apply.osc_pending import ReplayOnlineSchemaChange
from drc.apply.plan import Effects
from drc.apply.retry import RetryPolicy, call_with_retries
from drc.apply.service import build_parts
from drc.apply.sink import TargetSession
from drc.apply.stages import Chain, KeepApplicableDdl, KeepTables, MapNames, SkipDrcOriginated
from drc.catchup.routing import NetKeys, Router, route, transactions
from drc.client import SegmentInfo, SegmentSource
from drc.config_channels import ChannelConfig
from drc.conflicts.probes import Observed
from drc.conflicts.settings import ConflictsConfig
from drc.core.codec import (
    decode_rows,
    decode_rows_packed,
    decode_transaction,
    encode_rows,
    peek_tables,
)
from drc.core.events import Op, RowChange, Transaction
from drc.core.reduce import SCN_, Entry, Nets, Span
from drc.core.scn import SCN
from drc.core.target_table import TargetTable
from drc.eventbuffer.export import read_segment_file
from drc.eventbuffer.reader import Record
from drc.mysql.driver import TargetSettings

BATCH_CHANGES = 2000


@dataclass(frozen=True)
class Job:
    """One catch-up run, as every executor needs it."""

    channel: ChannelConfig
    target: TargetSettings
    conflicts: ConflictsConfig | None
    datacenter: str
    owner: str  # the lease owner (drc.apply.lease.new_owner)
    url: str  # the remote replicator's API
    epoch: str  # of the listing: a rebuilt buffer is refused, never mixed in
    token: str | None = field(default=None, repr=False)
    partitions: int = 8
    batch_changes: int = BATCH_CHANGES

    @property
    def cache(self) -> Path:
        return cache_dir(self.owner)

    def chain(self) -> Chain:
        return loaded_chain(self.parts())

    def parts(self) -> Any:
        return build_parts(
            self.channel, self.target, conflicts=self.conflicts, datacenter=self.datacenter
        )

    def source(self) -> SegmentSource:
        return segment_source(self.channel, self.url, self.token)


def loaded_chain(parts: Any) -> Chain:
    """The channel's filter chain with what its stages keep in the target read (the pending
    online schema changes, drc.apply.osc_pending: fixed inside a span, which every change of
    them ends)."""
    try:
        parts.source.load_state()
    finally:
        parts.target.close()
    chain: Chain = parts.source.filters
    return chain


def ddl_chain(job: Job) -> Chain:
    """The chain DDL steps are found and read with, on executors that each see some segments:
    the stages before the one replaying online schema changes (drc.apply.osc_pending), whose
    state follows every DDL in stream order; the driver runs it and the rest of the chain on
    each step in turn (the streaming channel's ChannelSource.after_ddl_chain). Its tool DDL
    is a step whatever that stage makes of it: a step it leaves empty applies nothing."""
    stages = job.parts().source.filters.stages
    cut = next((i for i, s in enumerate(stages) if isinstance(s, ReplayOnlineSchemaChange)), None)
    return Chain(stages if cut is None else stages[:cut])


def cache_dir(owner: str) -> Path:
    """Where this host keeps the segment copies of the run driven by ``owner``."""
    safe = "".join(c if c.isalnum() else "-" for c in owner)[-60:]
    return Path(tempfile.gettempdir()) / f"drc-catchup-{safe}"


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
    chain = ddl_chain(job)
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
    names = _TableNames(job.chain(), job.channel)
    found = (names.target(False, schema, table) for schema, table in tables)
    return {target for target in found if target is not None}


def fragments_at(job: Job, infos: Iterable[SegmentInfo], scns: set[SCN]) -> Iterator[Transaction]:
    """The fragments (after :func:`ddl_chain`) of the transactions at ``scns``: the DDL
    steps."""
    chain = ddl_chain(job)
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
) -> Iterator[tuple[int, tuple[tuple[int, int], bytes]]]:
    """The row changes of ``span`` in these slices (after the chain), reduced per slice and
    routed: ``(partition, ((segment, slice), packed nets))``, one per slice and partition. A
    slice is a contiguous part of the stream, so reducing the slices' nets again, in slice
    order, gives the span's; a hot row crosses the shuffle once per slice, and a slice's nets
    for one partition cross it as one packed blob (drc.core.codec.encode_rows), not as objects.
    Only a slice's own records are decoded, each once (drc.core.codec.decode_rows)."""
    parts = job.parts()
    chain = loaded_chain(parts)
    names = _TableNames(chain, job.channel)
    unreduced = in_order(parts, primary_keys)
    with job.source() as source:
        for piece in pieces:
            router = Router(primary_keys, job.partitions, unreduced)
            for record, mine in _records(job, piece, source, span.after):
                if record.scn > span.end or (record.scn == span.end and not span.end_included):
                    break
                if mine:
                    _route_record(record.payload, chain, names, router)
            count(router.added)
            order = (piece[0].seq, piece[1])
            for part, nets in router.parts.items():
                yield part, (order, encode_rows(nets.result()))


def _route_record(payload: bytes, chain: Chain, names: _TableNames, router: Router) -> None:
    rows = decode_rows(payload)
    if rows.ddl or not names.fast:  # DDL the chain drops, or a chain that reads rows: whole
        kept = chain(decode_transaction(payload, 0)[0])
        if kept is not None:
            route(kept, router)
        return
    scn, timestamp, drc = rows.scn, rows.timestamp, rows.drc_originated
    prefix = scn + rows.fragment.to_bytes(4, "big")
    add, target = router.add, names.target
    for index, (schema, table, _op, before, after) in enumerate(rows.changes):
        found = target(drc, schema, table)
        if found is not None:
            at = prefix + index.to_bytes(4, "big")
            add(at, scn, timestamp, found[0], found[1], before, after)


def in_order(parts: Any, tables: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The tables (target names) with a conflict policy: never reduced (module docstring)."""
    handling = parts.conflicts
    if handling is None:
        return set()
    return {t for t in tables if handling.engine.policies.get(*t) is not None}


def batches(entries: Sequence[Entry], size: int) -> Iterator[Sequence[Entry]]:
    """``entries`` (in stream order) cut into batches of at least ``size`` (the last may be
    smaller), only where the SCN changes: the same input gives the same batches."""
    start = 0
    while start < len(entries):
        end = min(start + size, len(entries))
        while end < len(entries) and entries[end][SCN_] == entries[end - 1][SCN_]:
            end += 1
        yield entries[start:end]
        start = end


# Stages that decide a row change by its transaction's origin and its table's name alone (the
# pending online schema changes are fixed inside a span: their changes are steps, see scan).
_BY_NAME = (SkipDrcOriginated, KeepTables, KeepApplicableDdl, ReplayOnlineSchemaChange, MapNames)


class _TableNames:
    """The chain's verdict on a source table's row changes (dropped, or its target name),
    asked once per table: the chain runs on one probe change instead of on every change.
    Only for chains whose stages go by names (and no map_columns, which renames columns).
    The probe runs the stages that go by names alone: the others (row filters, excluded
    columns: drc.apply.rowstages) read the rows and rename no table."""

    def __init__(self, chain: Chain, channel: ChannelConfig) -> None:
        self.chain = Chain([s for s in chain.stages if type(s) in _BY_NAME])
        self.fast = not channel.map_columns and all(type(s) in _BY_NAME for s in chain.stages)
        self._known: dict[tuple[bool, str, str], tuple[str, str] | None] = {}

    def target(self, drc_originated: bool, schema: str, table: str) -> tuple[str, str] | None:
        key = (drc_originated, schema, table)
        try:
            return self._known[key]
        except KeyError:
            pass
        probe = RowChange(schema, table, Op.INSERT, None, {})
        kept = self.chain(
            Transaction(SCN.ZERO, 0, None, 0, (probe,), drc_originated=drc_originated)
        )
        found = None if kept is None else (kept.changes[0].schema, kept.changes[0].table)
        self._known[key] = found
        return found


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
    items: Iterable[tuple[tuple[int, int], bytes]],
) -> PartitionResult:
    """Reduce, decide and write one partition of a span (see the module docstring)."""
    began = time.monotonic()
    parts = job.parts()
    # Not reduced: tombstone rows (read, not written: they stay as they came, see routing)
    # and tables with a policy (decided change by change, as streaming does).
    keys = {n: t.primary_key for n, t in definitions.items()}
    key_of = NetKeys(keys, in_order(parts, definitions))
    nets, received = Nets(), 0
    for _, packed in sorted(items, key=lambda item: item[0]):  # the slices in stream order
        entries = decode_rows_packed(packed)
        received += len(entries)
        for entry in entries:
            nets.add(key_of(entry), entry)
    reduced = nets.result()
    result = PartitionResult(part, changes=received, reduced=len(reduced))
    result.reduce_s = time.monotonic() - began
    session: TargetSession = parts.target
    handling = parts.conflicts
    engine = ApplyEngine(
        KnownTables(definitions), job.channel.no_primary_key,
        None if handling is None else handling.engine,
    )  # fmt: skip
    policy = RetryPolicy(retries=job.channel.retries)
    try:
        for number, run in enumerate(batches(reduced, job.batch_changes)):
            batch, size = list(transactions(run)), len(run)

            def attempt(
                batch: list[Transaction] = batch, number: int = number, size: int = size
            ) -> Effects | None:
                return _write_batch(
                    job, session, engine, handling, (span_key, part, number, size), batch
                )

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
    where: tuple[str, int, int, int],
    batch: list[Transaction],
) -> Effects | None:
    """One batch, one target transaction; None when an earlier run committed it. ``where``:
    the span, partition, batch number and its number of changes."""
    name = job.channel.name
    span_key, part, number, size = where
    pending = engine.prepare(batch)
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
    session.execute(journal.mark_done(name, span_key, part, number, size))
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
