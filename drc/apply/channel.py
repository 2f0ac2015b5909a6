"""An apply channel: a remote datacenter's change stream, written into the local target.

    Subscriber (skip_drc, binary; prefetches the next batch while this one is applied)
      -> filter chain (drc.apply.stages; drc.apply.source), then the channel's position
      -> group (drc.apply.group): many source transactions, one target transaction
      -> decisions (drc.apply.engine: writes, conflict log, tombstones; pure)
      -> Target (drc.apply.target; drc.apply.sink): writes + checkpoint row, committed together
         (drc.apply.writer)

The channel keeps the loop, the flush and the commit. Every part is handed in (ChannelParts)
by the composition root (drc.apply.service.build_parts); the channel reads no config to build
them.

Exactly once: the checkpoint row (drc.apply.checkpoint) commits with the changes it covers. On
start the channel reads it and subscribes after its SCN, so a crash anywhere resumes right
after the last committed group: nothing lost, nothing applied twice. The subscriber's own
position is only in memory; batches are acked as they are taken into a group, which the channel
keeps until it commits, so a retried target transaction is rebuilt from memory.

Loops: every apply session sets skip_replication = 1, so the local replicator flags everything
the channel writes as DRC-originated, DDL included (DDL has no transaction for the checkpoint
row to ride in: Otter issue #32 looped forever on that); the checkpoint write flags it too, and
both the API (skip_drc) and the chain (SkipDrcOriginated) drop flagged transactions.

Conflicts ([conflicts] in the config, drc.conflicts): before a group is written, the rows
it touches in tables with a policy are read and locked in the same target transaction; the
engine decides each change, and the group's writes, the conflict log rows and tombstones
commit together with the checkpoint.

DDL: the open group is committed first, with ``pending_ddl_scn`` in the checkpoint row (and the
transaction's row changes, if any); then each statement runs exactly once (drc.apply.ddl), and
the checkpoint moves to the DDL's SCN.

Its collaborators, handed in with the parts: the source (drc.apply.source: the subscription,
the filter chain and the tables snapshots joined), the group writer (drc.apply.writer), the
catch-up handover (drc.apply.handover: the lease every target transaction reads, and an
interrupted catch-up run to finish first), DDL (drc.apply.ddl), an operator's actions
(drc.apply.actions), the start-up (drc.apply.startup: the channel's tables, its checkpoint
read), the retries (drc.apply.retrier) and what the channel shows (drc.apply.status).

Privileges of the apply user on the target:

    SELECT, INSERT, UPDATE, DELETE       on the replicated tables
    CREATE, ALTER, DROP, INDEX           for replicated DDL; for the schema objects the channel
    CREATE VIEW, CREATE ROUTINE,         replicates (``objects``) their privileges, SET USER to
    ALTER ROUTINE, TRIGGER, EVENT        create one with another definer (drc.apply.objects),
    SELECT on mysql.user                 and to check that a definer exists on the target;
                                         routines and triggers also need
                                         log_bin_trust_function_creators = 1 (no SUPER)
    ALL on drc.*                         the checkpoint table (created on first start), and
                                         drc.conflicts and drc.tomb_* with a [conflicts] section
    TRIGGER                              on tables with a conflict timestamp column
    SELECT on information_schema         (implicit) to read column and key definitions
                                         (triggers: only where it has TRIGGER; without it a
                                         table's inserts and deletes are not batched by shape,
                                         as a trigger it cannot see might depend on their order,
                                         drc.apply.shapes)
    setting skip_replication             no privilege on MariaDB 10.11; SUPER on older servers

It must NOT have SUPER or READ_ONLY ADMIN: those bypass read_only, and a target made read-only
for a switchover must make the channel wait, not write.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from drc.apply.actions import OperatorActions, Restart
from drc.apply.catchup_journal import Run
from drc.apply.checkpoint import CheckpointRow
from drc.apply.control import Stoppage
from drc.apply.ddl import DdlApplier
from drc.apply.group import Group, GroupLimits, worth_saving
from drc.apply.handover import CatchupHandover, LeaseMoved
from drc.apply.parallel import ParallelWriter
from drc.apply.retrier import Retrier
from drc.apply.retry import Stopped
from drc.apply.source import ChannelSource, Subscribe, SubscriberLike
from drc.apply.stages import Idempotency, Stage
from drc.apply.startup import ChannelStartup
from drc.apply.status import ChannelStatus
from drc.apply.streamed import LargeTransaction
from drc.apply.target import Target
from drc.apply.writer import GroupWriter, Written
from drc.config_channels import ChannelConfig
from drc.conflicts.target import ConflictTarget
from drc.core.errors import FatalError
from drc.core.events import Transaction
from drc.core.heartbeat import source_time_ms
from drc.core.scn import SCN
from drc.mysql.sql import Statement


@dataclass
class ChannelParts:
    """What a channel is handed by the composition root (drc.apply.service.build_parts),
    which builds them from the config: the channel itself reads no config to build them."""

    target: Target  # the local database (drc.apply.sink.TargetSession)
    source: ChannelSource  # the stream and what of it is applied (drc.apply.source)
    writer: GroupWriter | ParallelWriter  # a group's decisions and writes (drc.apply.writer)
    handover: CatchupHandover  # the catch-up lease and an interrupted run (drc.apply.handover)
    ddl: DdlApplier  # replicated DDL, exactly once (drc.apply.ddl)
    actions: OperatorActions  # an operator's actions (drc.apply.actions)
    startup: ChannelStartup  # the channel's tables, its checkpoint read (drc.apply.startup)
    retrier: Retrier  # target transactions retried and waited for (drc.apply.retrier)
    status: ChannelStatus  # counters, state, lag and stops (drc.apply.status)
    limits: GroupLimits  # when a group is committed (drc.apply.group)
    clock: Callable[[], float] = time.monotonic
    conflicts: ConflictTarget | None = None  # conflict handling's tables, triggers, probes


class ApplyChannel:
    def __init__(self, parts: ChannelParts) -> None:
        self.name = parts.source.channel.name
        self.target = parts.target
        self.source = parts.source
        self.writer = parts.writer
        self.conflicts = parts.conflicts
        self.handover = parts.handover
        self.ddl = parts.ddl
        self.actions = parts.actions
        self.control = parts.actions.control  # an operator's requests (drc.apply.control)
        self.startup = parts.startup
        self.retrier = parts.retrier
        self.status = parts.status
        self.stats, self.progress = parts.status.stats, parts.status.progress
        self._limits, self._clock = parts.limits, parts.clock
        self._applied = SCN.zero()  # the checkpoint row's SCN
        self._stop = threading.Event()
        # the channel's own position, and what a parallel group committed beyond it
        self._idempotency = Idempotency(lambda: self._applied, self.writer.applied)
        self._large = LargeTransaction(  # written piece by piece (drc.apply.streamed)
            self.target, self.writer, self.handover, self._retrying,
            lambda: self.source.converging, self._moved)  # fmt: skip

    @property
    def channel(self) -> ChannelConfig:
        """The channel's config, as last reloaded (drc.apply.actions)."""
        return self.source.channel

    @property
    def catchup_unfinished(self) -> Run | None:
        """The interrupted catch-up run the channel waits for or finishes (None: none)."""
        return self.handover.unfinished

    def report(self) -> dict[str, Any]:
        """Counters, state and lag as of now, for status, metrics and progress lines."""
        return self.status.report(self.channel.origin, paused=self.control.state == "paused")

    # ------------------------------------------------------------------ run

    def run(self, stop: threading.Event) -> None:
        """Apply until ``stop`` is set. Fatal errors are raised (the channel stops, its
        checkpoint unmoved) unless ``hold_on_error``, when the channel waits stopped for an
        operator's skip, resume or rewind; a target that is down or read-only is waited for."""
        self._stop = stop
        try:
            self._retrying(self._start)
            while not stop.is_set():
                try:
                    self._retrying(self.source.load_state)  # as of the checkpoint
                    with self.source.opened(self._applied) as subscriber:
                        self._loop(subscriber)
                except Restart:
                    continue
                except FatalError as exc:
                    # Roll back what the failed attempt left open: held, its row locks and
                    # metadata locks would block the operator's fix (CREATE TABLE waits on
                    # them for lock_wait_timeout, a year by default) and every local writer.
                    self.target.recover(exc)
                    self.status.failed(exc)
                    if not self.actions.hold_on_error:
                        raise
                    self.status.stopped(exc)  # alive: it waits for an operator's action
                    try:
                        self.actions.hold(self, exc)
                    finally:
                        self.progress.resumed(self._clock())
                    self._retrying(self._start)  # as stored: a snapshot may have moved it
        except Stopped:
            pass
        except BaseException as exc:
            self.status.ended(exc)
            raise
        finally:
            self.writer.close()
            self.target.close()

    def open(self) -> SCN:
        """run()'s set-up and checkpoint read, for a catch-up driver holding the lease."""
        self._retrying(self._start)
        return self._applied

    def apply_ddl(self, txn: Transaction, before: SCN) -> None:
        """Apply a DDL transaction (after the chain) as streaming does, everything up to
        ``before`` being applied (bulk catch-up, between its spans)."""
        self._apply_ddl(txn, Group(checkpoint=max(before, self._applied)))

    def _start(self) -> None:
        self._applied = self.startup.open(self.channel, self._applied)
        self.writer.recover(self._applied)
        self.stats.last_scn = self._applied
        self.progress.started(self._clock())

    def _loop(self, subscriber: SubscriberLike) -> None:
        group = Group(checkpoint=self._applied)
        self._large.abandon(Restart())  # rolled back if a Restart left it open
        while not self._stop.is_set():
            if group.inside is None:  # requests wait for the end of a split transaction
                self.actions.obey(self, group)
            batch = self.source.get(subscriber, group.remaining_s(self._limits, self._clock()))
            if batch is None:
                if group.due(self._limits, self._clock()):
                    self._flush(group)
                self._maintain(group)
                continue
            self.progress.answered(self._clock())
            group.epoch = batch.epoch
            chain = self.source.chain  # replaced only before a Restart (a reload, a snapshot)
            for txn in batch.transactions:
                self._take(txn, self._through(chain, txn, group), group)
            subscriber.ack(batch)
            if not group.consumed(batch.next, batch.epoch, getattr(batch, "within", 0)):
                continue  # it ended inside a transaction (split pages): nothing to commit
            caught_up = batch.newest is None or batch.next >= batch.newest
            if caught_up or group.due(self._limits, self._clock()):
                self._flush(group)
            self._maintain(group)
        if group.inside is not None:  # stopped inside a transaction: none of it lands
            self._large.abandon(Stopped())
            group.drop(group.inside)
        self._flush(group)  # on stop: what was received is complete transactions; keep it

    def _through(self, chain: Stage, txn: Transaction, group: Group) -> Transaction | None:
        """``txn`` through the filter chain. A stage that stops the channel at ``txn`` (a
        transformation hook, drc.apply.transforms) first has what came before it committed,
        without ``txn``'s fragments: a skip then goes past ``txn`` alone."""
        try:
            return chain(txn)
        except FatalError as exc:
            if exc.stoppage is not None and self._large.open:
                self._large.abandon(exc)  # ``txn`` is the large one: none of it lands
            elif exc.stoppage is not None:
                group.drop(txn.scn)
                self._flush(group)
            raise

    def _maintain(self, group: Group) -> None:
        """Conflict housekeeping, between target transactions (never with a group open)."""
        conflicts = self.conflicts
        if (
            conflicts is None
            or group.writes
            or self._large.open
            or not conflicts.due(self._clock())
        ):
            return
        self._retrying(partial(conflicts.maintain, self._clock()))

    # ------------------------------------------------------------------ transactions

    def _take(self, txn: Transaction, kept: Transaction | None, group: Group) -> None:
        """``kept``: what the source's chain left of ``txn``."""
        if kept is not None:
            kept = self._idempotency(kept)
        if txn.ddl:
            self.stats.ddl_skipped = self.source.ddl_skipped
        if kept is not None and kept.ddl:
            self._apply_ddl(_last_fragment(kept), group)
            self.progress.taken(source_time_ms(txn), txn.gtid, txn.gtid_position)
            self.progress.applied()
            return
        if kept is not None:
            group.add(kept, self._clock())
        if not txn.last_fragment and group.piece_due(txn.scn, self._limits):
            piece = group.take_tail(txn.scn)  # a large transaction: written piece by piece
            if not self._large.open:
                self._flush(group)  # the transactions before it commit on their own
            self._large.write(piece, self._applied)
        if txn.last_fragment:
            self.progress.taken(source_time_ms(txn), txn.gtid, txn.gtid_position)
            wrote = self._large.open or bool(group.tail(txn.scn))
            if not wrote:
                self.stats.skipped += 1
            group.finished(txn, wrote)
            if group.full(self._limits) or self._large.open:
                self._flush(group)

    def _apply_ddl(self, txn: Transaction, group: Group) -> None:
        """Commit what is open with the DDL marked pending, run each statement exactly once
        (drc.apply.ddl), then move past it."""
        if txn.changes:
            group.add(txn, self._clock())
        self._flush(group, pending_ddl=txn.scn)
        try:
            self.ddl.apply(txn, self._retrying, self._stop.is_set)
        finally:
            self.stats.ddl = self.ddl.ran
        group.finished(txn, wrote=False)
        self.stats.transactions += 1
        self._flush(group, force=True)

    def _flush(self, group: Group, *, pending_ddl: SCN | None = None, force: bool = False) -> None:
        position = group.checkpoint or self._applied
        if not (
            group.writes
            or self._large.open
            or pending_ddl
            or force
            or worth_saving(self._applied, position)
            or self.handover.taken_meanwhile(self._retrying)
        ):
            group.clear()
            self.progress.applied()  # nothing to write: what was taken needs nothing more
            return
        row = CheckpointRow(self.name, position, self.channel.origin, group.epoch, pending_ddl)
        try:
            written = self._retrying(lambda: self._commit(group, row))
        except FatalError as exc:
            raise _isolated(self, group, exc, pending_ddl) from exc
        self.progress.target_ok()
        self._applied = max(self._applied, row.scn)  # a catch-up may have moved it further
        self._record(group, written)
        group.clear()
        self.progress.applied()

    def _commit(self, group: Group, row: CheckpointRow) -> Written:
        """One attempt: the group written with the checkpoint row, and COMMIT (drc.apply
        .writer), the lease read first (drc.apply.handover: its shared lock keeps a catch-up
        out until COMMIT), sent ahead of the writes while it was last seen free and unchanged
        (if it moved, the attempt is rolled back and made again reading it first). A large
        transaction's last piece commits it (drc.apply.streamed: it read the lease first)."""
        if self._large.open:
            return self._large.commit(group.transactions, row)
        if self.handover.steady and not self.writer.splits(group.transactions):
            try:
                ahead = self.handover.send_ahead()
                return self.writer.write(group.transactions, row, ahead, self.source.converging)
            except LeaseMoved as exc:
                self.target.recover(exc)
        if self.handover.check(self._applied):
            row = self._caught_up(group, row)
        return self.writer.write(group.transactions, row, None, self.source.converging)

    def _caught_up(self, group: Group, row: CheckpointRow) -> CheckpointRow:
        """A catch-up or snapshot ran since the checkpoint was read: go on from the checkpoint
        it wrote, dropping what it applied (nothing skipped: the stream after it is still in
        the group or to come)."""
        moved = self.handover.caught_up()
        if moved is not None:
            self._applied = max(self._applied, moved)
        if self.source.read_windows():  # a snapshot joined tables: the group was filtered
            exc = Restart()  # without their windows; take the stream again after the checkpoint
            self.target.recover(exc)
            raise exc
        group.transactions[:] = [t for t in group.transactions if t.scn > self._applied]
        return row.at_least(self._applied)

    def _moved(self) -> None:
        """A catch-up or snapshot ran before a large transaction opened: on from there."""
        moved = self.handover.caught_up()
        self._applied = max(self._applied, moved or self._applied)
        self.source.read_windows()

    def _record(self, group: Group, written: Written) -> None:
        self.stats.committed(written, group.complete, self._applied)
        self.stats.ddl_skipped = self.source.ddl_skipped

    # ------------------------------------------------------------------ operator actions

    @property
    def applied(self) -> SCN:
        """The checkpoint row's SCN, as last read or written."""
        return self._applied

    def stopping(self) -> bool:
        return self._stop.is_set()

    def commit_open(self, group: Group) -> None:
        """Commit what ``group`` holds (an operator's action or a pause comes next)."""
        self._flush(group)

    def move_to(self, position: SCN, entry: Statement) -> None:
        """Move the checkpoint to ``position`` and record ``entry`` (drc.apply.audit), in one
        transaction: a rewind or a skip."""
        row = CheckpointRow(self.name, position, self.channel.origin, None, None)
        extra = [entry, *(self.writer.rewound() if position < self._applied else ())]
        self._retrying(lambda: self.target.write([], extra, row))
        self._applied = position
        self.stats.last_scn = position

    def reselect(
        self,
        config: ChannelConfig,
        filters: Sequence[Stage],
        subscribe: Subscribe,
        entry: Statement,
    ) -> None:
        """Stream with a new config's table selection (a reload), once ``entry`` is recorded."""

        def record() -> None:
            self.target.execute(entry, "auditing a reload")
            self.target.commit()

        self._retrying(record)
        self.source.reselect(config, filters, subscribe)

    def _retrying(self, attempt: Callable[[], Any]) -> Any:
        """``attempt`` as every target transaction of the channel runs (drc.apply.retrier)."""
        return self.retrier.run(attempt, self._stop)


def _last_fragment(txn: Transaction) -> Transaction:
    """``txn``, a transaction's fragment carrying DDL, which must be its last: the DDL moves
    the checkpoint to its SCN, past the later fragments (the capture puts DDL only there,
    drc.replicator.assembler). Stops the channel at it rather than lose them."""
    if txn.last_fragment:
        return txn
    exc = FatalError(
        f"the transaction at SCN {txn.scn} carries DDL in fragment {txn.fragment}, before its "
        "last: applying it would drop its later fragments. The capture never stores DDL "
        "there; check the remote replicator's version and its buffer (drc buffer inspect)"
    )
    exc.stoppage = Stoppage.at(txn.scn, exc, [txn])
    raise exc


def _isolated(
    channel: ApplyChannel, group: Group, exc: FatalError, pending_ddl: SCN | None
) -> FatalError:
    """The transaction a failed group of ``channel`` stopped at: each of its transactions is
    written alone (those before it land), so the stoppage names one transaction."""
    if exc.stoppage is not None:
        return exc
    scns = list(dict.fromkeys(t.scn for t in group.transactions))
    if pending_ddl is not None:
        scns.append(pending_ddl)
    failing = scns[-1] if len(scns) == 1 or pending_ddl is not None else None
    if failing is None:
        for scn in scns:
            alone = Group(checkpoint=scn, epoch=group.epoch, complete=1)
            for txn in (t for t in group.transactions if t.scn == scn):
                alone.add(txn, channel._clock())
            row = CheckpointRow(channel.name, scn, channel.channel.origin, group.epoch)
            try:
                written = channel._retrying(partial(channel._commit, alone, row))
            except FatalError as single:
                exc, failing = single, scn
                break
            channel._applied = scn
            channel._record(alone, written)
    exc.stoppage = Stoppage.at(failing, exc, [t for t in group.transactions if t.scn == failing])
    return exc
