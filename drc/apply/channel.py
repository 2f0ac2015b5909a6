"""An apply channel: a remote datacenter's change stream, written into the local target.

    Subscriber (skip_drc, binary; prefetches the next batch while this one is applied)
      -> filter chain (drc.apply.stages)
      -> group (drc.apply.group): many source transactions, one target transaction
      -> writes (drc.apply.plan) + checkpoint row, committed together (drc.apply.sink)

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
engine decides each change, and the group's writes, the conflict log rows and tombstones commit
together with the checkpoint.

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
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from drc.apply import checkpoint, ddl_journal, objects, plan
from drc.apply.conflict_target import ConflictTarget
from drc.apply.conflicts import ConflictEngine, Policies, Ranks
from drc.apply.errors import CheckpointMismatchError, MissingColumnError
from drc.apply.group import Group, GroupLimits, worth_saving
from drc.apply.progress import STALE_AFTER_S, STOPPED, ChannelProgress
from drc.apply.retry import Kind, RetryPolicy, Stopped, call_with_retries
from drc.apply.sink import TargetSession, TargetSettings
from drc.apply.sql import Statement
from drc.apply.stages import (
    Chain,
    Idempotency,
    KeepApplicableDdl,
    KeepTables,
    MapNames,
    NameMap,
    SkipDrcOriginated,
)
from drc.apply.stats import ApplyStats
from drc.client import ApiUnavailableError, Subscriber
from drc.config import ChannelConfig, ConflictsConfig
from drc.core.errors import DrcError
from drc.core.events import RowChange, SchemaChange, Transaction
from drc.core.heartbeat import source_time_ms
from drc.core.markers import CHECKPOINT_SCHEMA as TOMBSTONE_SCHEMA
from drc.core.markers import HEARTBEAT_TABLE, TOMBSTONE_PREFIX
from drc.core.scn import SCN
from drc.core.statements import for_log

log = logging.getLogger(__name__)

IDLE_POLL_S = 1.0  # how long one get() may block before the stop flag is looked at again
DDL_LOCK_POLL_S = 5  # how long one wait for an earlier run's DDL lock lasts
UNAVAILABLE_LOG_EVERY_S = 30.0


class SubscriberLike(Protocol):
    def get(self, timeout: float | None = None) -> Any: ...

    def ack(self, batch: Any) -> None: ...

    def close(self) -> None: ...


SubscriberFactory = Callable[[ChannelConfig, SCN], SubscriberLike]


def default_subscriber(channel: ChannelConfig, after: SCN) -> SubscriberLike:
    return Subscriber(
        list(channel.remote),
        after=after,
        tables=",".join(channel.tables) or None,
        token=channel.secret(),
        skip_drc=True,
        binary=True,
        wait_ms=channel.wait_ms,
        verify=channel.https_verify(),
    )


def target_settings(target: Any) -> TargetSettings:
    """TargetSettings from anything with host, port, user and password (str or SecretStr),
    and TLS settings if it has ``mysql_tls()`` (a TargetConfig)."""
    if isinstance(target, TargetSettings):
        return target
    password: Any = getattr(target, "password", None)
    if hasattr(target, "secret"):
        password = target.secret()
    elif password is not None and hasattr(password, "get_secret_value"):
        password = password.get_secret_value()
    settings = TargetSettings(target.host, target.port, target.user, password or "")
    if hasattr(target, "mysql_tls"):
        settings = replace(settings, tls=target.mysql_tls())
    return settings


class ApplyChannel:
    def __init__(
        self,
        channel: ChannelConfig,
        target: Any,
        *,
        subscriber_factory: SubscriberFactory | None = None,
        connect: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        conflicts: ConflictsConfig | None = None,
        datacenter: str = "",
    ) -> None:
        self.channel = channel
        self.name = channel.name
        self.stats = ApplyStats()
        # State and lag (drc.apply.progress); a long poll may rightly last wait_ms.
        self.progress = ChannelProgress(STALE_AFTER_S + channel.wait_ms / 1000)
        self.session = (
            TargetSession(target_settings(target))
            if connect is None
            else TargetSession(target_settings(target), connect)
        )
        self._factory = subscriber_factory or default_subscriber
        self._clock, self._wall_clock, self._sleep = clock, wall_clock, sleep
        self._policy = RetryPolicy(retries=channel.retries)
        self._limits = GroupLimits(
            max_txns=channel.max_txns_per_commit,
            max_bytes=int(channel.max_bytes_per_commit_mb * (1 << 20)),
            max_delay_s=channel.max_commit_delay_ms / 1000,
        )
        self._applied = SCN.zero()  # the checkpoint row's SCN
        self._stop = threading.Event()
        self._skip_drc = SkipDrcOriginated()
        self._ddl_filter = KeepApplicableDdl(channel.objects)
        names = NameMap(channel.map_tables, channel.map_columns)
        self._mapping = MapNames(names)
        self._idempotency = Idempotency(lambda: self._applied)
        self.conflicts = self._conflict_target(conflicts, datacenter, names)
        keep = KeepTables(channel.table_filter(), tombstones=self.conflicts is not None)
        self.chain = Chain(
            [self._skip_drc, keep, self._ddl_filter, self._mapping, self._idempotency]
        )
        self._unavailable_logged = -UNAVAILABLE_LOG_EVERY_S

    def _conflict_target(
        self, config: ConflictsConfig | None, datacenter: str, names: NameMap
    ) -> ConflictTarget | None:
        policies = Policies.from_config(config) if config is not None else None
        if config is None or policies is None or not policies.active:
            return None
        engine = ConflictEngine(
            policies, Ranks(config.priority), channel=self.name, origin=self.channel.origin,
            datacenter=datacenter, tables=self.session.table, names=names,
        )  # fmt: skip
        retention_s = int(config.tombstone_retention_hours * 3600)
        return ConflictTarget(
            self.session, engine, policies, retention_s, config.log_retention_days
        )

    def _subscription(self) -> ChannelConfig:
        """The channel's config as subscribed: a table list also asks for the heartbeat rows
        (drc.core.heartbeat) and, with conflicts, the tombstone rows."""
        if not self.channel.tables:
            return self.channel
        tables = (*self.channel.tables, f"{TOMBSTONE_SCHEMA}.{HEARTBEAT_TABLE}")
        if self.conflicts is not None:
            tables += (f"{TOMBSTONE_SCHEMA}.{TOMBSTONE_PREFIX}*",)
        return self.channel.model_copy(update={"tables": tables})

    def report(self) -> dict[str, Any]:
        """Counters, state and lag as of now, for status, metrics and progress lines."""
        now = self.progress.snapshot(self._wall_clock())
        return {
            "name": self.name, "origin": self.channel.origin, "state": now.state,
            "up": now.state != STOPPED, "error": now.error, "lag_seconds": now.lag_seconds,
            "applied_source_ms": now.applied_ms, **self.stats.as_dict(),
        }  # fmt: skip

    # ------------------------------------------------------------------ run

    def run(self, stop: threading.Event) -> None:
        """Apply until ``stop`` is set. Fatal errors are raised (the channel stops, its
        checkpoint unmoved); a target that is down or read-only is waited for."""
        self._stop = stop
        try:
            self._retrying(self._start)
            subscriber = self._factory(self._subscription(), self._applied)
            try:
                self._loop(subscriber)
            finally:
                subscriber.close()
        except Stopped:
            pass
        except DrcError as exc:
            self.stats.last_error = str(exc)
            log.error("channel %s stopped: %s", self.name, exc)
            self.progress.stopped(f"{type(exc).__name__}: {exc}")
            raise
        except BaseException as exc:
            self.progress.stopped(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.session.close()

    def _start(self) -> None:
        self.session.ensure_checkpoint_table()
        self.session.execute(ddl_journal.purge(self.name), "purging the DDL journal")
        self.session.commit()
        if self.conflicts is not None:
            self.conflicts.setup()
        row = self.session.read_checkpoint(self.name)
        if row is not None:
            if row.origin and row.origin != self.channel.origin:
                raise _origin_mismatch(self.name, row.origin, self.channel.origin)
            self._applied = row.scn
        self.stats.last_scn = self._applied
        self.progress.started(self._clock())
        log.info("channel %s (from %s) resumes after %s", self.name, self.channel.origin,
                 self._applied)  # fmt: skip

    def _loop(self, subscriber: SubscriberLike) -> None:
        group = Group(checkpoint=self._applied)
        while not self._stop.is_set():
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
            self.stats.ddl_skipped = self._ddl_filter.skipped + self._mapping.ddl_skipped
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
            self._retrying(apply)
        self.session.forget_tables()
        if self.conflicts is not None:  # a new or altered table may need its tombstones
            self._retrying(self.conflicts.refresh_tables)
        group.finished(txn, wrote=False)
        self.stats.transactions += 1
        self._flush(group, force=True)

    def _apply_statement(self, scn: str, seq: int, change: SchemaChange, timestamp: int) -> None:
        session, name = self.session, self.name
        rows = session.query(ddl_journal.select(name, scn, seq), "reading the DDL journal")
        session.commit()
        entry = ddl_journal.parse(rows[0]) if rows else None
        if entry is not None and entry.state == ddl_journal.DONE:
            log.info("channel %s: DDL at %s #%d already applied, skipped", name, scn, seq)
            return
        what = f"DDL {for_log(change.statement)!r}"
        with session.ddl_session(what) as ddl:
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
                    session.execute(ddl_journal.start(name, scn, seq, change.statement, current))
                    session.commit()
                ddl.run(statement, timestamp)
                self.stats.ddl += 1
                after = self._definitions(ddl, change)
        session.execute(ddl_journal.finish(name, scn, seq, change.statement, after))
        session.commit()

    @staticmethod
    def _definitions(ddl: Any, change: SchemaChange) -> ddl_journal.Definitions:
        return {
            ddl_journal.key(kind, db, obj): _normalised(ddl.definition(kind, db, obj))
            for kind, db, obj in ddl_journal.objects(change)
        }

    def _flush(self, group: Group, *, pending_ddl: SCN | None = None, force: bool = False) -> None:
        position = group.checkpoint or self._applied
        if not (group.writes or pending_ddl or force or worth_saving(self._applied, position)):
            group.clear()
            self.progress.applied()  # nothing to write: what was taken needs nothing more
            return
        row = checkpoint.CheckpointRow(
            self.name, position, self.channel.origin, group.epoch, pending_ddl
        )
        effects = self._retrying(lambda: self._commit(group, row))
        self.progress.target_ok()
        self._applied = row.scn
        self._record(group, effects)
        group.clear()
        self.progress.applied()

    def _commit(self, group: Group, row: checkpoint.CheckpointRow) -> plan.Effects:
        """One attempt: every write of the group, the checkpoint row, COMMIT."""
        session, planner = self.session, plan.Planner(self.channel.no_primary_key)
        changes: Iterable[RowChange] = (c for txn in group.transactions for c in txn.changes)
        extra: list[Statement] = []
        conflicts = 0
        if self.conflicts is not None:  # first: it reads and locks the rows the group touches
            resolution = self.conflicts.resolve(group.transactions)
            changes, extra = resolution.changes, self.conflicts.writes(resolution)
            conflicts = len(resolution.entries)
        batch = session.batch()
        for change in changes:
            table = session.table(change.schema, change.table)
            try:
                writes = planner.add(change, table)
            except MissingColumnError:  # maybe altered since it was read: read it again
                table = session.table(change.schema, change.table, refresh=True)
                writes = planner.add(change, table)
            batch.extend(writes)
        batch.extend(planner.finish())
        batch.flush()  # left in flight: the checkpoint write is pipelined behind it
        for statement in extra:
            session.execute(statement, "recording conflicts and tombstones")
        session.write_checkpoint(row)
        session.commit()  # reads every reply first, so batch.effects is complete
        batch.effects.conflicts = conflicts
        return batch.effects

    def _record(self, group: Group, effects: plan.Effects) -> None:
        stats = self.stats
        stats.commits += 1
        stats.transactions += group.complete
        stats.add_effects(effects)
        stats.last_scn = self._applied
        stats.ddl_skipped = self._ddl_filter.skipped + self._mapping.ddl_skipped

    # ------------------------------------------------------------------ retries

    def _retrying(self, attempt: Callable[[], Any]) -> Any:
        return call_with_retries(
            attempt,
            self._policy,
            recover=self.session.recover,
            sleep=self._sleep or self._wait,
            stopped=self._stop.is_set,
            note=self._note,
        )

    def _wait(self, seconds: float) -> None:
        self._stop.wait(seconds)  # wakes at once when the channel is stopped

    def _note(self, kind: Kind, exc: BaseException, delay: float) -> None:
        if kind is Kind.LOCK_CONFLICT:
            self.stats.retries += 1
        else:
            self.stats.waits += 1
            self.progress.target_waiting(str(exc))
        self.stats.last_error = str(exc)
        log.warning("channel %s: %s; retrying in %.2fs", self.name, exc, delay)


def _origin_mismatch(name: str, found: str, configured: str) -> DrcError:
    return CheckpointMismatchError(
        f"drc.checkpoint row {name!r} was written for origin {found!r} but the channel is "
        f"configured for origin {configured!r}: resuming would use another stream's SCN. "
        "Delete that row (the channel then starts from the beginning of the remote buffer) "
        "or give the channel a new name"
    )


def _normalised(create: str | None) -> str | None:
    return None if create is None else ddl_journal.normalise(create)
