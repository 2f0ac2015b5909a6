"""An apply channel: a remote datacenter's change stream, written into the local target.

    Subscriber (skip_drc, binary; prefetches the next batch while this one is applied)
      -> filter chain (drc.apply.stages)
      -> group (drc.apply.group): many source transactions, one target transaction
      -> decisions (drc.apply.engine: writes, conflict log, tombstones; pure)
      -> Target (drc.apply.target; drc.apply.sink): writes + checkpoint row, committed together

Every part is handed in (ChannelParts) by the composition root (drc.apply.service
.build_channel); the channel reads no config to build them.

Exactly once: the checkpoint row (drc.apply.checkpoint) commits with the changes it covers. On
start the channel reads it and subscribes after its SCN, so a crash anywhere resumes right
after the last committed group: nothing lost, nothing applied twice. The subscriber's own
position is only in memory; batches are acked as they are taken into a group, which the channel
keeps until it commits, so a retried target transaction is rebuilt from memory.

Loops: every apply session sets skip_replication = 1, so the local replicator flags everything
the channel writes as DRC-originated, DDL included (DDL has no transaction for the checkpoint
row to ride in: Otter issue #32 looped forever on that); the checkpoint write flags it too, and
both the API (skip_drc) and the chain (SkipDrcOriginated) drop flagged transactions.

Conflicts ([conflicts] in the config, drc.apply.conflicts): before a group is written, the rows
it touches in tables with a policy are read and locked in the same target transaction; the
engine decides each change, and the group's writes, the conflict log rows and tombstones
commit together with the checkpoint.

DDL: the open group is committed first; then the checkpoint row gets ``pending_ddl_scn`` (with
the transaction's row changes, if any), each statement runs exactly once (journalled in
drc.ddl_journal with the definitions it found, on its own session with the source's default
database: drc.apply.ddl_journal), and the checkpoint moves to the DDL's SCN. After a crash in
between, or after a rewind, the journal says whether the statement ran. The target's table
definitions are read again after every DDL.

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
    setting skip_replication             no privilege on MariaDB 10.11; SUPER on older servers

It must NOT have SUPER or READ_ONLY ADMIN: those bypass read_only, and a target made read-only
for a switchover must make the channel wait, not write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from drc.apply import audit, checkpoint, ddl_journal, lease, objects, plan, windows
from drc.apply import catchup_journal as journal
from drc.apply.conflict_target import ConflictTarget
from drc.apply.conflicts import Observed
from drc.apply.control import ChannelControl, Request, Stoppage
from drc.apply.engine import ApplyEngine
from drc.apply.errors import (
    CatchupRunningError,
    CatchupUnfinishedError,
    CheckpointMismatchError,
)
from drc.apply.group import Group, GroupLimits, worth_saving
from drc.apply.progress import STALE_AFTER_S, STOPPED, ChannelProgress
from drc.apply.retry import Kind, RetryPolicy, Stopped, call_with_retries
from drc.apply.stages import Chain, Idempotency, Stage
from drc.apply.stats import ApplyStats
from drc.apply.target import Target
from drc.apply.windows import DropCopied
from drc.client import ApiUnavailableError
from drc.config import ChannelConfig
from drc.core.control import ControlError
from drc.core.errors import DrcError, FatalError
from drc.core.events import SchemaChange, Transaction
from drc.core.heartbeat import source_time_ms
from drc.core.scn import SCN
from drc.core.statements import for_log

log = logging.getLogger(__name__)

_MOVED = object()  # the checkpoint may have moved since it was read: read it again
IDLE_POLL_S = 1.0  # how long one get() may block before the stop flag is looked at again
LEASE_CHECK_S = 1.0  # how often a channel with nothing to write looks at its lease
DDL_LOCK_POLL_S = 5  # how long one wait for an earlier run's DDL lock lasts
UNAVAILABLE_LOG_EVERY_S = 30.0
FINISH_RETRY_S = 30.0  # after a failed finish of an interrupted catch-up run, the next try
STOPPAGE_KEYS_SHOWN = 10


class _Restart(Exception):
    """Subscribe again after the checkpoint (a rewind, a skip, a retry moved or kept it)."""


class _LeaseMoved(Exception):
    """The lease read sent ahead of the writes found it taken or moved: roll back, read first."""


class SubscriberLike(Protocol):
    def get(self, timeout: float | None = None) -> Any: ...

    def ack(self, batch: Any) -> None: ...

    def close(self) -> None: ...


@dataclass
class ChannelParts:
    """What a channel is handed by the composition root (drc.apply.service.build_channel),
    which builds them from the config: the channel itself reads no config to build them."""

    target: Target  # the local database (drc.apply.sink.TargetSession)
    subscribe: Callable[[SCN], SubscriberLike]  # the remote stream, after an SCN
    filters: Sequence[Stage]  # the filter chain, in order (drc.apply.stages)
    engine: ApplyEngine  # the decisions (drc.apply.engine)
    conflicts: ConflictTarget | None = None  # conflict handling's tables, triggers, probes
    # The filter chain and subscription of a config with more source tables: those a snapshot
    # joined to the channel (drc.apply.windows) that its ``tables`` do not name.
    rejoin: Callable[[ChannelConfig, Sequence[str]], tuple[Sequence[Stage], Any]] | None = None


class ApplyChannel:
    def __init__(
        self,
        channel: ChannelConfig,
        parts: ChannelParts,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.channel = channel
        self.name = channel.name
        self.stats = ApplyStats()
        # State and lag (drc.apply.progress); a long poll may rightly last wait_ms.
        self.progress = ChannelProgress(STALE_AFTER_S + channel.wait_ms / 1000)
        self.target = parts.target
        self.engine = parts.engine
        self.conflicts = parts.conflicts
        self._subscribe = parts.subscribe
        self._clock, self._wall_clock, self._sleep = clock, wall_clock, sleep
        self._policy = RetryPolicy(retries=channel.retries)
        self._limits = GroupLimits(
            max_txns=channel.max_txns_per_commit,
            max_bytes=int(channel.max_bytes_per_commit_mb * (1 << 20)),
            max_delay_s=channel.max_commit_delay_ms / 1000,
        )
        self._applied = SCN.zero()  # the checkpoint row's SCN
        self._stop = threading.Event()
        self._idempotency = Idempotency(lambda: self._applied)  # the channel's own position
        self._copied = DropCopied()  # changes a snapshot's copy holds (drc.apply.windows)
        self._rejoin = parts.rejoin
        self._filters = Chain(parts.filters)
        self.chain = self._chain(parts.filters)
        self._unavailable_logged = -UNAVAILABLE_LOG_EVERY_S
        self.lease_owner = ""  # a catch-up driver's own channel applies under its lease
        self._lease_taken: object = None  # the lease's taken_at when the checkpoint was read
        self._lease_checked = -LEASE_CHECK_S  # clock of the last idle look (_lease_moved)
        self._lease_steady = False  # the lease was last seen free, unchanged (_commit)
        self.catchup_unfinished: journal.Run | None = None  # the run being finished, if any
        # Finishes an interrupted catch-up run (drc.catchup.driver.finish_interrupted, given
        # by drc.apply.service.build_channel; asked whether the channel is stopping); None:
        # the channel waits for a `drc catchup` to finish it.
        self.finish_catchup: Callable[[Callable[[], bool]], object] | None = None
        self._finish_after = 0.0  # clock before which a failed finish is not tried again
        self._finish_failure = ""  # why the last try failed, shown while the channel waits
        self._catchup_logged: tuple[str, float] = ("", 0.0)  # a wait is logged every 30 s
        # An operator's pause/skip/rewind (drc.apply.control). With ``hold_on_error`` a change
        # the target rejects leaves the channel stopped but alive, waiting for one of them.
        self.control = ChannelControl()
        self.hold_on_error = False
        self._replays = 0
        self._conflict_tables: list[str] = []

    def report(self) -> dict[str, Any]:
        """Counters, state and lag as of now, for status, metrics and progress lines."""
        now = self.progress.snapshot(self._wall_clock())
        state = "paused" if self.control.state == "paused" else now.state
        return {
            "name": self.name, "origin": self.channel.origin, "state": state,
            "up": now.state != STOPPED, "error": now.error, "lag_seconds": now.lag_seconds,
            "applied_source_ms": now.applied_ms, **self.stats.as_dict(),
            # A channel continued after a stop no longer shows its error (last_stop keeps it).
            "last_error": self.stats.last_error if now.state == STOPPED else None,
        }  # fmt: skip

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
                    self._stream()
                except _Restart:
                    continue
                except FatalError as exc:
                    self.stats.last_error = str(exc)
                    log.error("channel %s stopped: %s", self.name, exc)
                    if not self.hold_on_error:
                        raise
                    self._hold(exc)
        except Stopped:
            pass
        except DrcError as exc:
            self.stats.last_error = str(exc)
            log.error("channel %s stopped: %s", self.name, exc)
            self._stopped(exc)
            raise
        except BaseException as exc:
            self._stopped(exc)
            raise
        finally:
            self.target.close()

    def _stream(self) -> None:
        subscriber = self._subscribe(self._applied)
        try:
            self._loop(subscriber)
        finally:
            subscriber.close()

    def open(self) -> SCN:
        """What run() does first: set up the target, read the checkpoint (a catch-up driver
        calls it once it holds the lease, then applies DDL through :meth:`apply_ddl`)."""
        self._retrying(self._start)
        return self._applied

    def apply_ddl(self, txn: Transaction, before: SCN) -> None:
        """Apply a DDL transaction (after the chain) as streaming does, everything up to
        ``before`` being applied (bulk catch-up, between its spans)."""
        self._apply_ddl(txn, Group(checkpoint=max(before, self._applied)))

    def _start(self) -> None:
        self.target.ensure_checkpoint_table()
        self.target.execute(ddl_journal.purge(self.name), "purging the DDL journal")
        self.target.commit()
        if self.conflicts is not None:
            self.conflicts.setup()
        self.target.run_setup(
            [
                lease.create_statement(),
                *journal.create_statements(),
                *windows.create_statements()[1:],
            ],
            "creating the catch-up and snapshot tables",
        )
        self._read_windows()
        self.target.commit()
        owner, held, taken, _run = self._lease_state()
        # Held by a catch-up: the checkpoint read below is not the one to stream from.
        self._lease_taken = _MOVED if held and owner != self.lease_owner else taken
        # Read before the checkpoint, whose read commits: no transaction is left open (a
        # catch-up driver keeps this channel's session, idle, for the whole run).
        rewinds = self.target.query(audit.rewinds(self.name), "reading the channel's rewinds")
        row = self.target.read_checkpoint(self.name)
        if row is not None:
            if row.origin and row.origin != self.channel.origin:
                raise _origin_mismatch(self.name, row.origin, self.channel.origin)
            self._applied = row.scn
        self.control.replay_until = audit.replay_until([r[0] for r in rewinds], self._applied)
        self.stats.last_scn = self._applied
        self.progress.started(self._clock())
        log.info("channel %s (from %s) resumes after %s", self.name, self.channel.origin,
                 self._applied)  # fmt: skip

    def _loop(self, subscriber: SubscriberLike) -> None:
        group = Group(checkpoint=self._applied)
        while not self._stop.is_set():
            self._obey(group)
            batch = self._get(subscriber, group)
            if batch is None:
                if group.due(self._limits, self._clock()):
                    self._flush(group)
                self._maintain(group)
                continue
            self.progress.answered(self._clock())
            group.epoch = batch.epoch
            for txn in batch.transactions:
                self._take(txn, group)
            subscriber.ack(batch)
            group.consumed(batch.next, batch.epoch)
            caught_up = batch.newest is None or batch.next >= batch.newest
            if caught_up or group.due(self._limits, self._clock()):
                self._flush(group)
            self._maintain(group)
        self._flush(group)  # on stop: what was received is complete transactions; keep it

    def _maintain(self, group: Group) -> None:
        """Conflict housekeeping, between target transactions (never with a group open)."""
        conflicts = self.conflicts
        if conflicts is None or group.transactions or not conflicts.due(self._clock()):
            return
        self._retrying(partial(conflicts.maintain, self._clock()))

    def _get(self, subscriber: SubscriberLike, group: Group) -> Any:
        remaining = group.remaining_s(self._limits, self._clock())
        timeout = IDLE_POLL_S if remaining is None else min(remaining, IDLE_POLL_S)
        try:
            return subscriber.get(timeout=timeout)
        except ApiUnavailableError as exc:
            now = self._clock()
            self.progress.unanswered(now, str(exc) if exc.errors else None)
            if exc.errors and now - self._unavailable_logged >= UNAVAILABLE_LOG_EVERY_S:
                self._unavailable_logged = now
                log.warning("channel %s: remote API unavailable, retrying: %s", self.name, exc)
            return None

    # ------------------------------------------------------------------ transactions

    def _take(self, txn: Transaction, group: Group) -> None:
        kept = self.chain(txn)
        if txn.ddl:
            self.stats.ddl_skipped = self._filters.ddl_skipped
        if kept is not None and kept.ddl:
            self._apply_ddl(kept, group)
            self.progress.taken(source_time_ms(txn))
            self.progress.applied()
            return
        if kept is not None:
            group.add(kept, self._clock())
        if txn.last_fragment:
            self.progress.taken(source_time_ms(txn))
            wrote = bool(group.transactions) and group.transactions[-1].scn == txn.scn
            if not wrote:
                self.stats.skipped += 1
            group.finished(txn, wrote)
            if group.full(self._limits):
                self._flush(group)

    def _apply_ddl(self, txn: Transaction, group: Group) -> None:
        """Commit what is open with the DDL marked pending, run each statement exactly once
        (drc.apply.ddl_journal), then move past it."""
        if txn.changes:
            group.add(txn, self._clock())
        self._flush(group, pending_ddl=txn.scn)
        for seq, change in enumerate(txn.ddl):
            apply = partial(self._apply_statement, str(txn.scn), seq, change, txn.timestamp)
            try:
                self._retrying(apply)
            except FatalError as exc:
                exc.stoppage = _stoppage(txn.scn, exc, [txn])  # type: ignore[attr-defined]
                raise
        self.target.forget_tables()
        if self.conflicts is not None:  # a new or altered table may need its tombstones
            self._retrying(self.conflicts.refresh_tables)
        group.finished(txn, wrote=False)
        self.stats.transactions += 1
        self._flush(group, force=True)

    def _apply_statement(self, scn: str, seq: int, change: SchemaChange, timestamp: int) -> None:
        target, name = self.target, self.name
        rows = target.query(ddl_journal.select(name, scn, seq), "reading the DDL journal")
        target.commit()
        entry = ddl_journal.parse(rows[0]) if rows else None
        if entry is not None and entry.state == ddl_journal.DONE:
            log.info("channel %s: DDL at %s #%d already applied, skipped", name, scn, seq)
            return
        what = f"DDL {for_log(change.statement)!r}"
        with target.ddl_session(what) as ddl:
            # A killed channel's DDL may still be running in the server: wait for it first.
            while not ddl.try_lock(ddl_journal.lock_name(name), DDL_LOCK_POLL_S):
                if self._stop.is_set():
                    raise Stopped()
                log.info("channel %s: waiting for an earlier run of %s to finish", name, what)
            current = self._definitions(ddl, change)
            decision = ddl_journal.decide(entry, current)
            if decision is ddl_journal.Decision.RAN:
                log.info("channel %s: %s ran before a restart; recorded as done", name, what)
                after = current
            else:
                statement = objects.prepared(change, ddl, self.channel.definer, name)
                if entry is None:
                    target.execute(ddl_journal.start(name, scn, seq, change.statement, current))
                    target.commit()
                ddl.run(statement, timestamp)
                self.stats.ddl += 1
                after = self._definitions(ddl, change)
        target.execute(ddl_journal.finish(name, scn, seq, change.statement, after))
        target.commit()

    @staticmethod
    def _definitions(ddl: Any, change: SchemaChange) -> ddl_journal.Definitions:
        return {
            ddl_journal.key(kind, db, obj): _normalised(ddl.definition(kind, db, obj))
            for kind, db, obj in ddl_journal.objects(change)
        }

    def _flush(self, group: Group, *, pending_ddl: SCN | None = None, force: bool = False) -> None:
        position = group.checkpoint or self._applied
        if not (
            group.writes
            or pending_ddl
            or force
            or worth_saving(self._applied, position)
            or self._lease_moved()
        ):
            group.clear()
            self.progress.applied()  # nothing to write: what was taken needs nothing more
            return
        row = checkpoint.CheckpointRow(
            self.name, position, self.channel.origin, group.epoch, pending_ddl
        )
        try:
            effects = self._retrying(lambda: self._commit(group, row))
        except FatalError as exc:
            raise self._isolated(group, exc, pending_ddl) from exc
        self.progress.target_ok()
        self._applied = max(self._applied, row.scn)  # a catch-up may have moved it further
        self._record(group, effects)
        group.clear()
        self.progress.applied()

    def _commit(self, group: Group, row: checkpoint.CheckpointRow) -> plan.Effects:
        """One attempt: decide the group's writes (drc.apply.engine), then write them, the
        conflict log, tombstones and the checkpoint row, and COMMIT.

        The lease is read first in the transaction either way (its shared lock keeps a
        catch-up out until COMMIT). While it was last seen free and unchanged, the read is
        sent ahead of the writes and checked before COMMIT: one round trip less per target
        transaction; if it moved, the attempt is rolled back and made again reading it first."""
        if self._lease_steady and not self.lease_owner:
            seen: list[Any] = []
            self.target.send_read(journal.channel_state(self.name), seen.extend)
            try:
                return self._write_group(group, row, lambda: self._still_steady(seen))
            except _LeaseMoved as exc:
                self.target.recover(exc)
        row = self._handover(group, row)
        return self._write_group(group, row, None)

    def _still_steady(self, rows: list[Any]) -> None:
        """Before COMMIT on the fast path: the lease is still free, unchanged, with no run."""
        owner, held, taken, run = self._parse_lease(rows)
        if held or run is not None or taken != self._lease_taken:
            self._lease_steady = False
            raise _LeaseMoved()

    def _write_group(
        self,
        group: Group,
        row: checkpoint.CheckpointRow,
        before_commit: Callable[[], None] | None,
    ) -> plan.Effects:
        converging = self._copied.windows.converging if self._copied.windows else None
        pending = self.engine.prepare(group.transactions, converging)
        observed: list[Observed] = []
        if self.conflicts is not None:  # first: it reads and locks the rows the group touches
            observed = self.conflicts.probe(pending.probes)
        decision = self.engine.decide(pending, observed, lazy=True)  # planned as it is sent
        replays = [e for e in decision.entries if self.control.is_replay(SCN.parse(e.scn))]
        if replays:  # a rewound channel meets its own earlier writes: not conflicts
            decision.entries = [e for e in decision.entries if e not in replays]
            decision.counts.conflicts -= len(replays)
        effects = self.target.write(decision.writes, decision.log_statements(), row, before_commit)
        self._replays = len(replays)  # counted once committed (_record): an attempt may fail
        self._conflict_tables = [f"{e.schema}.{e.table}" for e in decision.entries]
        effects.conflicts = decision.counts.conflicts
        return effects

    def _lease_moved(self) -> bool:
        """Whether a catch-up or snapshot took the channel's lease since the checkpoint was
        read (looked at every LEASE_CHECK_S at most). A channel with nothing to write passes
        through :meth:`_handover` only when it commits: without this, one whose selected tables
        are idle (or whose changes are all echoes) would never see the tables a snapshot joined,
        nor apply their changes."""
        now = self._clock()
        if now - self._lease_checked < LEASE_CHECK_S:
            return False
        self._lease_checked = now
        return bool(self._retrying(self._lease_taken_now) != self._lease_taken)

    def _lease_taken_now(self) -> object:
        taken = self._lease_state()[2]
        self.target.commit()
        return taken

    def _lease_state(self) -> tuple[str, bool, object, journal.Run | None]:
        """The catch-up lease (owner, held now, taken_at) and the channel's unfinished run."""
        found = self.target.query(journal.channel_state(self.name), "reading the catch-up lease")
        return self._parse_lease(found)

    def _parse_lease(self, found: Sequence[Any]) -> tuple[str, bool, object, journal.Run | None]:
        if not found:
            return "", False, None, None
        row = found[0]
        return str(row[0]), bool(row[1]), row[2], journal.parse_run(self.name, row[3:])

    def _handover(self, group: Group, row: checkpoint.CheckpointRow) -> checkpoint.CheckpointRow:
        """Inside the apply transaction (drc.catchup.lease): wait while a live catch-up holds
        the channel, or while an interrupted one's run is unfinished (the target holds part of
        its range beyond the checkpoint); after one ran, go on from the checkpoint it wrote,
        dropping what it applied (nothing skipped: the stream after it is still in the group
        or to come)."""
        owner, held, taken, run = self._lease_state()
        if self.lease_owner and not (held and owner == self.lease_owner):
            raise lease.LeaseLostError(
                f"catch-up {self.lease_owner} lost the lease of channel {self.name}: nothing "
                "more is written; run the catch-up again"
            )
        self.catchup_unfinished = run if run is not None and not held else None
        if held and owner != self.lease_owner:
            raise CatchupRunningError(f"bulk catch-up {owner} holds channel {self.name}")
        if self.catchup_unfinished is not None:
            raise CatchupUnfinishedError(self._unfinished_message(self.catchup_unfinished))
        self._lease_steady = not held and run is None
        if taken == self._lease_taken:
            return row
        found = self.target.query(checkpoint.select(self.name), "reading the checkpoint")
        self._lease_taken = taken
        if found:
            moved = checkpoint.parse(self.name, found[0]).scn
            log.info("channel %s: a catch-up applied up to %s; streaming from there", self.name,
                     moved)  # fmt: skip
            self._applied = max(self._applied, moved)
        if self._read_windows():  # a snapshot joined tables: the group was filtered without
            exc = _Restart()  # their windows; take the stream again after the checkpoint
            self.target.recover(exc)
            raise exc
        group.transactions[:] = [t for t in group.transactions if t.scn > self._applied]
        if row.scn > self._applied:
            return row
        pending = row.pending_ddl_scn
        return replace(
            row,
            scn=self._applied,
            pending_ddl_scn=pending if pending and pending > self._applied else None,
        )

    def _unfinished_message(self, run: journal.Run) -> str:
        how = "run"
        if self.finish_catchup is not None:
            failed = self._finish_failure
            every = f"tried again every {FINISH_RETRY_S:.0f} s"
            tried = f" (its last try failed: {failed}; {every})" if failed else ""
            how = f"the channel finishes it itself{tried}, or run"
        return (
            f"channel {self.name} waits: the interrupted {run.describe()} applied part of its "
            f"range beyond the checkpoint {self._applied}, and streaming it again would apply "
            f"that twice. To finish it, {how} `drc catchup --config FILE --channel {self.name}` "
            "(what the run committed is skipped)"
        )

    def _chain(self, filters: Sequence[Stage]) -> Chain:
        return Chain([*filters, self._copied, self._idempotency])

    def _read_windows(self) -> bool:
        """The tables snapshots joined to the channel, read again; True when they changed."""
        rows = self.target.query(windows.select(self.name), "reading the snapshot tables")
        found = windows.parse(rows)
        if found.by_target == self._copied.windows.by_target:
            return False
        self._copied.windows = found
        self._join_tables()
        log.info("channel %s: tables joined by snapshots: %s", self.name,
                 ", ".join(found.source_names()) or "none")  # fmt: skip
        return True

    def _join_tables(self) -> None:
        """Select the joined tables the config's ``tables`` leave out (their changes would
        otherwise not even be pulled)."""
        extra = windows.unselected(self.channel, self._copied.windows)
        if not extra or self._rejoin is None:
            return
        filters, subscribe = self._rejoin(self.channel, extra)
        self._filters = Chain(filters)
        self.chain = self._chain(filters)
        self._subscribe = subscribe

    def _record(self, group: Group, effects: plan.Effects) -> None:
        stats = self.stats
        stats.replays += self._replays
        for name in self._conflict_tables:
            stats.conflicts_by_table[name] = stats.conflicts_by_table.get(name, 0) + 1
        self._replays, self._conflict_tables = 0, []
        stats.commits += 1
        stats.transactions += group.complete
        stats.add_effects(effects)
        stats.last_scn = self._applied
        stats.ddl_skipped = self._filters.ddl_skipped

    # ------------------------------------------------------------------ operator control

    def _obey(self, group: Group) -> None:
        """Between target transactions: carry out queued requests, then hold while paused."""
        while not self._stop.is_set():
            request = self.control.take()
            if request is not None:
                self._flush(group)
                self._carry_out(request, stoppage=None)
                continue
            if not self.control.paused(self._applied):
                self.control.state = "running"
                return
            self._flush(group)
            self.control.state = "paused"
            self.control.wait(self._stop, IDLE_POLL_S)

    def _hold(self, exc: FatalError) -> None:
        """Stopped by ``exc``: wait for skip (of the stopped transaction), resume (retry it,
        after a fix) or rewind; then stream again from the checkpoint."""
        stoppage = getattr(exc, "stoppage", None)
        self.control.stoppage = stoppage or Stoppage(None, str(exc), {}, [], [])
        self.control.failure = exc
        self.control.state = "stopped"
        self._stopped(exc)
        try:
            while not self._stop.is_set():
                request = self.control.take()
                if request is None:
                    if not self.control.paused(self._applied) and self.control.retry:
                        self.control.retry = False
                        return
                    self.control.wait(self._stop, IDLE_POLL_S)
                    continue
                if self._carry_out(request, stoppage=self.control.stoppage):
                    return
            raise Stopped()
        finally:
            self.control.stoppage = self.control.failure = None
            self.control.state = "running"
            self.progress.resumed(self._clock())

    def _stopped(self, exc: BaseException) -> None:
        """Stopped by ``exc``; ``last_stop`` keeps when and why once the channel continues."""
        now, error = self._wall_clock(), f"{type(exc).__name__}: {exc}"
        if self.progress.snapshot(now).state != STOPPED:  # stopped already: keep the first
            self.stats.last_stop = {"at": now, "error": error}
        self.progress.stopped(error)

    def _carry_out(self, request: Request, stoppage: Stoppage | None) -> bool:
        """Do ``request``; True when the channel must stream again from its checkpoint."""
        try:
            if request.action == "rewind":
                result = self._rewind(request)
            elif request.action == "skip":
                result = self._skip(request, stoppage)
            elif request.action == "reload":
                result = self._reload(request)
            else:
                raise ControlError(f"unknown request {request.action!r}", 400)
        except ControlError as error:
            request.refuse(error)
            return False
        request.finish(result)
        if stoppage is None:
            raise _Restart()
        return True

    def _rewind(self, request: Request) -> dict[str, Any]:
        to = request.scn
        assert to is not None
        if to >= self._applied:
            raise ControlError(
                f"rewind to {to}: the channel has applied only up to {self._applied}; "
                "a rewind goes back"
            )
        before = self._applied
        detail = {"from": str(before), "to": str(to)}
        self._control_commit(to, request, detail)
        self.control.replay_until = max(before, self.control.replay_until or before)
        log.warning("channel %s rewound from %s to %s by %s", self.name, before, to, request.actor)
        return {"action": "rewind", "from": str(before), "to": str(to)}

    def _skip(self, request: Request, stoppage: Stoppage | None) -> dict[str, Any]:
        if stoppage is None:
            raise ControlError(f"channel {self.name} is running; only a stopped channel skips")
        if stoppage.scn is None:
            raise ControlError(
                f"channel {self.name} stopped on an error that is not one transaction's "
                f"({stoppage.error}); fix it and resume, or rewind"
            )
        if request.scn != stoppage.scn:
            raise ControlError(
                f"channel {self.name} is stopped at {stoppage.scn}, not {request.scn}: "
                "look again (drc channel list) before skipping"
            )
        self._control_commit(stoppage.scn, request, {"skipped": stoppage.as_dict()})
        log.warning("channel %s skipped %s by %s: %s", self.name, stoppage.scn, request.actor,
                    stoppage.error)  # fmt: skip
        return {"action": "skip", "skipped": str(stoppage.scn), "applied": str(self._applied)}

    def _reload(self, request: Request) -> dict[str, Any]:
        """A new config for this channel (drc run got SIGHUP): its table selection, mapping and
        object kinds. The stream restarts after the checkpoint with the new filters."""
        config, filters, subscribe = request.payload
        before = {"tables": list(self.channel.tables), "exclude": list(self.channel.exclude)}
        after = {"tables": list(config.tables), "exclude": list(config.exclude)}
        detail = {"before": before, "after": after, "at": str(self._applied)}
        entry = audit.record(self.name, "reload", request.actor, request.reason, detail)

        def record() -> None:
            self.target.execute(entry, "auditing a reload")
            self.target.commit()

        self._retrying(record)
        self.channel = config
        self._filters = Chain(filters)
        self.chain = self._chain(filters)
        self._subscribe = subscribe
        self._join_tables()
        log.warning("channel %s reloaded: tables %s exclude %s (was %s)", self.name,
                    after["tables"], after["exclude"], before)  # fmt: skip
        return {"action": "reload", **after}

    def _control_commit(self, position: SCN, request: Request, detail: dict[str, Any]) -> None:
        """Move the checkpoint to ``position`` and record the action, in one transaction."""
        row = checkpoint.CheckpointRow(self.name, position, self.channel.origin, None, None)
        entry = audit.record(self.name, request.action, request.actor, request.reason, detail)
        self._retrying(lambda: self.target.write([], [entry], row))
        self._applied = position
        self.stats.last_scn = position

    def _isolated(self, group: Group, exc: FatalError, pending_ddl: SCN | None) -> FatalError:
        """The transaction a failed group stopped at: each of its transactions is written
        alone (those before it land), so the stoppage names one transaction."""
        if getattr(exc, "stoppage", None) is not None:
            return exc
        scns = list(dict.fromkeys(t.scn for t in group.transactions))
        if pending_ddl is not None:
            scns.append(pending_ddl)
        failing = scns[-1] if len(scns) == 1 or pending_ddl is not None else None
        if failing is None:
            for scn in scns:
                alone = Group(checkpoint=scn, epoch=group.epoch, complete=1)
                for txn in (t for t in group.transactions if t.scn == scn):
                    alone.add(txn, self._clock())
                row = checkpoint.CheckpointRow(self.name, scn, self.channel.origin, group.epoch)
                try:
                    effects = self._retrying(partial(self._commit, alone, row))
                except FatalError as single:
                    exc, failing = single, scn
                    break
                self._applied = scn
                self._record(alone, effects)
        txns = [t for t in group.transactions if t.scn == failing]
        exc.stoppage = _stoppage(failing, exc, txns)  # type: ignore[attr-defined]
        return exc

    # ------------------------------------------------------------------ retries

    def _retrying(self, attempt: Callable[[], Any]) -> Any:
        return call_with_retries(
            attempt,
            self._policy,
            recover=self._recover,
            sleep=self._sleep or self._wait,
            stopped=self._stop.is_set,
            note=self._note,
        )

    def _recover(self, exc: BaseException) -> None:
        self.target.recover(exc)  # rolled back: the lease row's shared lock is gone too
        if isinstance(exc, CatchupUnfinishedError):
            self._finish_interrupted()

    def _finish_interrupted(self) -> None:
        """Finish the interrupted catch-up run in this thread, to the end it recorded; the
        retried transaction then streams on from the checkpoint it wrote (:meth:`_handover`).
        A failure (the remote or target away, the range gone) is logged and shown in the
        channel's state, and tried again after FINISH_RETRY_S."""
        run, now = self.catchup_unfinished, self._clock()
        if self.finish_catchup is None or run is None or now < self._finish_after:
            return
        log.info("channel %s: the interrupted %s holds no live lease any more: finishing it "
                 "here (what it committed is skipped), then streaming on from its end",
                 self.name, run.describe())  # fmt: skip
        self.progress.target_waiting(f"finishing the interrupted {run.describe()}")
        try:
            self.finish_catchup(self._stop.is_set)
        except Stopped:
            raise
        except Exception as exc:  # shown (the wait's message) and tried again meanwhile
            self._finish_after = now + FINISH_RETRY_S
            self._finish_failure = f"{type(exc).__name__}: {exc}"
            log.error("channel %s: finishing the interrupted %s failed: %s; trying again in "
                      "%.0fs", self.name, run.describe(), exc, FINISH_RETRY_S)  # fmt: skip
            return
        self.catchup_unfinished, self._finish_failure = None, ""
        log.info("channel %s: the interrupted catch-up run is finished", self.name)

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)  # wakes at once when the channel is stopped

    def _note(self, kind: Kind, exc: BaseException, delay: float) -> None:
        if isinstance(exc, CatchupUnfinishedError) and self.catchup_unfinished is None:
            return  # finished meanwhile (_recover): nothing was waited for
        if kind is Kind.LOCK_CONFLICT:
            self.stats.retries += 1
        else:
            self.stats.waits += 1
            self.progress.target_waiting(str(exc))
        self.stats.last_error = str(exc)
        if isinstance(exc, CatchupRunningError | CatchupUnfinishedError):  # may last for hours
            now = self._clock()
            if str(exc) == self._catchup_logged[0] and now - self._catchup_logged[1] < 30.0:
                return
            self._catchup_logged = (str(exc), now)
        log.warning("channel %s: %s; retrying in %.2fs", self.name, exc, delay)


def _origin_mismatch(name: str, found: str, configured: str) -> DrcError:
    return CheckpointMismatchError(
        f"drc.checkpoint row {name!r} was written for origin {found!r} but the channel is "
        f"configured for origin {configured!r}: resuming would use another stream's SCN. "
        "Delete that row (the channel then starts from the beginning of the remote buffer) "
        "or give the channel a new name"
    )


def _stoppage(scn: SCN | None, exc: Exception, txns: Sequence[Transaction]) -> Stoppage:
    tables: dict[str, int] = {}
    keys: list[str] = []
    ddl: list[str] = []
    for txn in txns:
        for change in txn.changes:
            name = f"{change.schema}.{change.table}"
            tables[name] = tables.get(name, 0) + 1
            if len(keys) < STOPPAGE_KEYS_SHOWN:
                image = change.after if change.after is not None else change.before
                keys.append(f"{name} {dict(list((image or {}).items())[:3])}")
        ddl.extend(for_log(d.statement) for d in txn.ddl)
    return Stoppage(scn, str(exc), tables, keys, ddl)


def _normalised(create: str | None) -> str | None:
    return None if create is None else ddl_journal.normalise(create)
