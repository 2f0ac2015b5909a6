"""Conflict handling against the target: DRC's tables and triggers, the probes, the extra writes.

The edge of the package: the decisions are drc.conflicts.engine, through drc.apply.engine (both
pure); this module runs what they need through the channel's Target (drc.apply.target, the
pymysql one being drc.apply.sink.TargetSession):

    setup      the drc.conflicts table; for every table with a timestamp column, its tombstone
               table and triggers (again after each DDL and every MAINTAIN_EVERY_S, for tables
               created since)
    probe      the tables the probes name set up, then one locked read per key the group
               touches (SELECT .. FOR UPDATE, batched in a few round trips: Target.probe)
    maintain   purge tombstones and conflict log entries past their retention
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from drc.conflicts import log as conflict_log
from drc.conflicts import tombstones
from drc.conflicts.engine import ConflictEngine
from drc.conflicts.policies import Policies
from drc.conflicts.probes import Observed, Probe
from drc.core.target_errors import ApplyError, NoPrimaryKeyError, TargetSchemaError
from drc.mysql import sql
from drc.mysql.sql import Statement

log = logging.getLogger(__name__)

MAINTAIN_EVERY_S = 30.0
NEED_SUPER_FOR_TRIGGERS = 1419
# Trigger creation refused: binlogging needs SUPER or log_bin_trust_function_creators (1419),
# no TRIGGER privilege on the table (1142), a privilege like SUPER needed (1227).
TRIGGER_REFUSED = frozenset({NEED_SUPER_FOR_TRIGGERS, 1142, 1227})


def _refusal(exc: ApplyError) -> str:
    """What to do about a refused trigger (the operator reads it in drc status)."""
    if exc.code == NEED_SUPER_FOR_TRIGGERS:
        return (
            "the target refused DRC's triggers: with binary logging on, MariaDB lets a user "
            "without SUPER create triggers only when log_bin_trust_function_creators = 1. Set "
            "it (SET GLOBAL log_bin_trust_function_creators = 1, and in the config file); do "
            "not give the apply user SUPER (it bypasses read_only)"
        )
    return (
        f"the target refused DRC's triggers ({exc.code}): grant the apply user TRIGGER on the "
        "table. Until then its deletes are dated by their commit second and the row's time, "
        "and its rows' time is not kept moving forward"
    )


def _check_counters(name: str, counters: Sequence[str], columns: dict[str, Any]) -> None:
    """Every counter column (conflicts.tables.delta_columns) is there, an integer or DECIMAL
    and NOT NULL (drc.conflicts.counters)."""
    found = {c.lower(): c for c in columns}
    for counter in counters:
        column = found.get(counter.lower())
        if column is None:
            raise TargetSchemaError(
                f"{name} has no column {counter!r}, a counter of conflicts.tables.delta_columns: "
                "add it on every datacenter, or fix delta_columns"
            )
        info = columns[column]
        if sql.value_bounds(info.data_type, info.definition) is None:
            raise TargetSchemaError(
                f"{name}.{column} is {info.definition}, but a counter (delta_columns) must be "
                "an integer or DECIMAL column: a floating-point or other sum depends on the order "
                "the datacenters' changes are added in, so the sides would end different. Make "
                "it DECIMAL or an integer on every datacenter, or leave it out of delta_columns"
            )
        if info.nullable:
            raise TargetSchemaError(
                f"{name}.{column} is nullable, but a counter (delta_columns) cannot be NULL "
                f"(NULL cannot be added to): ALTER TABLE {name} MODIFY {column} "
                f"{info.definition} NOT NULL DEFAULT 0 on every datacenter"
            )


class ConflictTarget:
    def __init__(
        self,
        session: Any,
        engine: ConflictEngine,
        policies: Policies,
        retention_s: int,
        log_retention_days: float | None = None,
    ) -> None:
        self.session, self.engine, self.policies = session, engine, policies
        self.retention_s = retention_s
        self.log_retention_days = log_retention_days
        # Tables with a timestamp column, set up: their stamp type, and the (key, time column,
        # its definition) the triggers were made for.
        self._ready: dict[tuple[str, str], tuple[tombstones.StampType, tuple[Any, ...]]] = {}
        self._checked: set[tuple[str, str]] = set()  # every table looked at
        # Tables set up without their triggers, and why (drc status, /metrics).
        self.unprotected: dict[tuple[str, str], str] = {}
        self._maintained_at: float | None = None

    def sharing(self, session: Any, engine: ConflictEngine) -> ConflictTarget:
        """This conflict handling on another connection of the channel (drc.apply.parallel):
        probes run there, the tables it set up are this one's (set up once, by this one)."""
        other = copy.copy(self)
        other.session, other.engine = session, engine
        return other

    def ready_for(self, tables: Iterable[tuple[str, str]]) -> None:
        """Set up what ``tables`` need before other connections probe them (DDL commits, so
        it runs here, before the parts of a parallel group start)."""
        for schema, table in tables:
            self._ensure(schema, table)

    # ------------------------------------------------------------------ setup

    def setup(self) -> None:
        self.session.run_setup(conflict_log.create_statements(), "creating drc.conflicts")
        self.refresh_tables()

    def refresh_tables(self) -> None:
        """Tombstone table and triggers for every table with a timestamp column (triggers are
        replaced: DDL may have changed the key or the columns)."""
        self._ready.clear()
        self._checked.clear()
        present = self.session.base_tables()
        for schema, table in present:
            self._ensure(schema, table)
        self._forget_dropped(present)

    def _forget_dropped(self, present: Sequence[tuple[str, str]]) -> None:
        for gone in set(self.unprotected) - set(present):
            del self.unprotected[gone]

    def _ensure(self, schema: str, table: str) -> None:
        if (schema, table) in self._checked:
            return
        policy = self.policies.get(schema, table)
        if policy is None:
            self._checked.add((schema, table))
            return
        target = self.session.table(schema, table, refresh=True)
        if not target.primary_key:
            raise NoPrimaryKeyError(
                f"{target.name} has conflict policy {policy.name} but no primary key: conflicts "
                "are detected per key; add a primary key or set its policy to off"
            )
        if policy.delta_columns:
            counters = policy.delta_columns
            _check_counters(target.name, counters, self.session.columns(schema, table))
        if policy.column is None:
            self._checked.add((schema, table))
            return
        assert policy.column is not None
        columns = self.session.columns(schema, table)
        found = {c.lower(): c for c in columns}.get(policy.column.lower())
        if found is None:
            raise TargetSchemaError(
                f"{target.name} has no column {policy.column!r}, its conflict timestamp column: "
                "add it (e.g. updated_at DATETIME(3) ON UPDATE CURRENT_TIMESTAMP(3)) on every "
                "datacenter, or fix conflicts.tables.column"
            )
        info = columns[found]
        try:
            stamp = tombstones.StampType.of(
                info.data_type, info.datetime_precision, found, target.name
            )
        except ValueError as exc:
            raise TargetSchemaError(str(exc)) from exc
        key = [tombstones.KeyColumn(k, columns[k].definition) for k in target.primary_key]
        triggers = tombstones.create_triggers(
            schema, table, target.primary_key, found, stamp, self.engine.datacenter
        )
        setup = [tombstones.create_table(schema, table, key, stamp)]
        if self._stale_companion(schema, table, key, stamp):
            log.warning(
                "the key or timestamp column of %s changed: its tombstones are dropped and "
                "recorded afresh", target.name,
            )  # fmt: skip
            setup.insert(0, tombstones.drop_table(schema, table))
        self.session.run_setup(setup, f"creating the tombstone table of {target.name}")
        self._install_triggers(target.name, (schema, table), triggers)
        self._ready[(schema, table)] = (stamp, (target.primary_key, found, info))
        self._checked.add((schema, table))

    def _install_triggers(self, name: str, ref: tuple[str, str], triggers: list[str]) -> None:
        """Create the triggers; a table the target refuses them on is recorded in
        :attr:`unprotected` (reported by drc status and /metrics), not a stopped channel:
        its deletes still get tombstones, derived from the captured delete (LwwGuard)."""
        try:
            self.session.run_setup(triggers, f"creating the conflict triggers of {name}")
        except ApplyError as exc:
            if exc.code not in TRIGGER_REFUSED:
                raise
            reason = _refusal(exc)
            if self.unprotected.get(ref) != reason:
                log.error("%s is not fully protected by lww: %s", name, reason)
            self.unprotected[ref] = reason
            return
        self.unprotected.pop(ref, None)

    # ------------------------------------------------------------------ per group

    def probe(self, probes: Sequence[Probe]) -> list[Observed]:
        """Read and lock the rows the probes name (drc.apply.engine.Pending.probes). Run first
        in the target transaction: a table set up here commits DDL, so nothing may be written
        before it."""
        for schema, table in {(p.table.schema, p.table.table) for p in probes}:
            self._ensure(schema, table)
        return list(self.session.probe(probes))

    # ------------------------------------------------------------------ maintenance

    def _stale_companion(
        self, schema: str, table: str, key: list[tombstones.KeyColumn], stamp: tombstones.StampType
    ) -> bool:
        """Whether the tombstone table exists with another key or time type than needed."""
        existing = self.session.columns(tombstones.SCHEMA, tombstones.name(schema, table))
        if not existing:
            return False
        wanted = {k.name: k.definition for k in key}
        have = {n: c.definition for n, c in existing.items() if not n.startswith("drc$")}
        deleted_at = existing.get(tombstones.COL_DELETED_AT)
        same_time = deleted_at is not None and deleted_at.data_type.lower() == stamp.data_type
        return have != wanted or not same_time

    def _reshaped(self, schema: str, table: str) -> bool:
        """Whether local DDL changed the key or the timestamp column the triggers name (the
        triggers of a renamed key column would make every insert fail)."""
        policy = self.policies.get(schema, table)
        if policy is None or policy.column is None:
            return True
        key = self.session.table(schema, table, refresh=True).primary_key
        columns = self.session.columns(schema, table)
        found = {c.lower(): c for c in columns}.get(policy.column.lower())
        info = columns.get(found) if found is not None else None
        return self._ready[(schema, table)][1] != (key, found, info)

    def due(self, now: float) -> bool:
        return self._maintained_at is None or now - self._maintained_at >= MAINTAIN_EVERY_S

    def maintain(self, now: float) -> int:
        """Set up tables created since, purge old tombstones; returns how many were purged."""
        self._maintained_at = now
        present = self.session.base_tables()
        for schema, table in present:
            ref = (schema, table)
            if ref in self._ready and (ref in self.unprotected or self._reshaped(schema, table)):
                self._checked.discard(ref)  # made again for the new shape, or tried again
                del self._ready[ref]
            self._ensure(schema, table)
        self._forget_dropped(present)
        purged = 0
        for (schema, table), (stamp, _shape) in self._ready.items():
            statement = tombstones.purge(schema, table, stamp, self.retention_s)
            purged += self._purge(statement, tombstones.PURGE_BATCH, f"{schema}.{table}")
        if purged:
            log.info("purged %d tombstones older than %d s", purged, self.retention_s)
        if self.log_retention_days is not None:
            old = self._purge(
                conflict_log.purge(self.log_retention_days), conflict_log.PURGE_BATCH, "the log"
            )
            if old:
                log.info("purged %d conflict log entries older than %s days", old,
                         self.log_retention_days)  # fmt: skip
        return purged

    def _purge(self, statement: Statement, batch: int, what: str) -> int:
        """Run a bounded DELETE until it deletes less than a batch, committing each."""
        total = 0
        while True:
            deleted = self.session.execute(statement, f"purging old entries of {what}")
            self.session.commit()
            total += deleted
            if deleted < batch:
                return total
