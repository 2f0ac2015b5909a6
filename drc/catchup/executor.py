"""What runs on the Spark executors: copy segments, read them, and apply one partition.

Everything an executor needs travels in a :class:`Job` (pickled by Spark): the channel's config
(its filter chain and decisions are built here from it, by the same composition root as a
streaming channel: drc.apply.service.build_parts), the target's settings, the remote API and
its token, the lease owner. Nothing is shared through storage: each executor copies the
segments it reads straight from the remote replicator (drc.client.SegmentSource: resumed,
SHA-256 checked before a byte is used) into a local directory, where a later stage of the same
run on the same host finds them again.

Applying a partition (:func:`apply_partition`): its changes sorted into stream order, reduced
to the net change per key (drc.core.reduce), cut into batches of ``batch_changes``; each batch
is one target transaction::

    probe          the rows of tables with a conflict policy, read and locked (FOR UPDATE)
    lease          the channel's lease row, shared lock: still this run's, or stop
                   (drc.catchup.lease; a streaming channel may have taken over)
    done?          drc.catchup_done for (span, partition, batch): committed by an earlier run
                   of this catch-up, skip it (drc.catchup.journal)
    decide         drc.apply.engine, exactly as streaming decides
    write          the writes (pipelined, skip_replication session), conflict log, tombstones,
                   the batch's done row, COMMIT
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
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
from drc.catchup.routing import Position, Routed, route, transactions
from drc.client import SegmentInfo, SegmentSource, read_segment
from drc.config import ChannelConfig, ConflictsConfig
from drc.core.events import Transaction
from drc.core.markers import is_tombstone_table
from drc.core.reduce import Change, Span, reduce_changes
from drc.core.scn import SCN

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
    changes: int = 0
    ddl: list[tuple[SCN, SCN]] = field(default_factory=list)  # (DDL's SCN, the SCN before it)
    tables: set[tuple[str, str]] = field(default_factory=set)  # target names


def copy(job: Job, info: SegmentInfo, source: SegmentSource) -> Path:
    """The verified local copy of a segment (downloaded once per host and run)."""
    job.cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = job.cache / info.name
    if final.exists() and final.stat().st_size == info.size:
        return final  # renamed into place only after its checksum matched
    return source.download(info, job.cache, job.epoch)


def _read(job: Job, info: SegmentInfo, source: SegmentSource, after: SCN) -> Iterator[Transaction]:
    yield from read_segment(copy(job, info, source), job.epoch, info.seq, after=after)


def scan(job: Job, infos: Iterable[SegmentInfo], after: SCN, to: SCN) -> Iterator[SegmentScan]:
    """Pass 1: copy each segment and find its DDL and the tables it changes (after the chain)."""
    chain = job.chain()
    with job.source() as source:
        for info in infos:
            started = time.monotonic()
            path = copy(job, info, source)
            found = SegmentScan(info.name, info.size, time.monotonic() - started)
            current = before = info.prev_scn
            for txn in read_segment(path, job.epoch, info.seq, after=after):
                if txn.scn > to:
                    break
                if txn.scn != current:
                    before, current = current, txn.scn
                found.records += 1
                kept = chain(txn)
                if kept is not None:
                    found.changes += len(kept.changes)
                    found.tables.update(kept.tables())
                    if kept.ddl:  # the SCN before it, unless its transaction began earlier
                        found.ddl.append((txn.scn, before if before < txn.scn else SCN.ZERO))
            yield found


def fragments_at(job: Job, infos: Iterable[SegmentInfo], scns: set[SCN]) -> Iterator[Transaction]:
    """The fragments (after the chain) of the transactions at ``scns``: the DDL steps."""
    chain = job.chain()
    with job.source() as source:
        for info in infos:
            for txn in _read(job, info, source, info.prev_scn):
                kept = chain(txn) if txn.scn in scns else None
                if kept is not None:
                    yield kept


def read_span(
    job: Job,
    infos: Iterable[SegmentInfo],
    span: Span,
    primary_keys: Mapping[tuple[str, str], Sequence[str]],
) -> Iterator[Routed]:
    """Every row change of ``span`` (after the chain), routed to its partition."""
    chain = job.chain()
    with job.source() as source:
        for info in infos:
            for txn in _read(job, info, source, span.after):
                if not span.contains(txn.scn):
                    if txn.scn > span.end:
                        break
                    continue
                kept = chain(txn)
                if kept is not None and kept.changes:
                    yield from route(kept, primary_keys, job.partitions)


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


def apply_partition(
    job: Job,
    span_key: str,
    definitions: Mapping[tuple[str, str], TargetTable],
    part: int,
    items: Iterable[tuple[Position, Change]],
) -> PartitionResult:
    """Reduce, decide and write one partition of a span (see the module docstring)."""
    ordered = [change for _, change in sorted(items, key=lambda item: item[0])]
    result = PartitionResult(part, changes=len(ordered))
    keys: dict[tuple[str, str], Sequence[str]] = {
        (c.change.schema, c.change.table): () for c in ordered
    }
    keys.update(
        {n: t.primary_key for n, t in definitions.items() if not is_tombstone_table(*n)}
    )  # tombstone rows are read, not written: they stay as they came (drc.catchup.routing)
    reduced = reduce_changes(ordered, keys)
    result.reduced = len(reduced)
    parts = job.parts()
    session: TargetSession = parts.target
    handling = parts.conflicts
    engine = ApplyEngine(
        KnownTables(definitions), job.channel.no_primary_key,
        None if handling is None else handling.engine,
    )  # fmt: skip
    policy = RetryPolicy(retries=job.channel.retries)
    try:
        for number, start in enumerate(range(0, len(reduced), job.batch_changes)):
            batch = reduced[start : start + job.batch_changes]

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
