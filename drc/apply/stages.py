"""The apply filter chain: small stages, each a one-method transform, composed by :class:`Chain`.

    SkipDrcOriginated -> KeepTables -> KeepApplicableDdl -> [row filters, excluded columns,
    transforms: drc.apply.rowstages, drc.apply.transforms] -> [ReplayOnlineSchemaChange:
    drc.apply.osc_pending] -> MapNames -> Idempotency

Conflicts are not a stage: deciding them needs the target's rows, read and locked inside the
target transaction (drc.conflicts.target, called by drc.apply.writer.GroupWriter.write).

A stage is ``(Transaction) -> Transaction | None``; None (or a transaction left with no change
and no DDL) means "nothing to write". The channel still moves its checkpoint past every SCN it
received, written or not, so a dropped transaction is never asked for again. Stages are pure
apart from their counters (and the position or lookup they are handed).

Idempotency works at two levels: here, a transaction at or before the applied position is
dropped (defence in depth: the subscription already starts after it); per row, the writes of
:mod:`drc.apply.plan` converge when a change's effect is already on the target.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from drc.core import schema_objects
from drc.core.ddl import ddl_tables, dropped_database
from drc.core.events import RowChange, SchemaChange, Transaction
from drc.core.markers import CHECKPOINT_SCHEMA, is_tombstone_table
from drc.core.scn import SCN
from drc.core.selection import selects_ddl
from drc.core.statements import for_log
from drc.core.tablefilter import TableFilter

log = logging.getLogger(__name__)

_MAX_CACHED_TABLES = 65536  # tables remembered by a stage's per-table lookups


class Stage(Protocol):
    def __call__(self, txn: Transaction) -> Transaction | None: ...


class Chain:
    """Stages applied in order; stops at the first that leaves nothing."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = tuple(stages)

    @property
    def ddl_skipped(self) -> int:
        """Schema statements the stages left out (counted: drc status, /metrics)."""
        return sum(getattr(stage, "ddl_skipped", 0) for stage in self.stages)

    def __call__(self, txn: Transaction) -> Transaction | None:
        for stage in self.stages:
            result = stage(txn)
            if result is None or not (result.changes or result.ddl):
                return None
            txn = result
        return txn


def _narrowed(
    txn: Transaction, changes: tuple[RowChange, ...], ddl: tuple[SchemaChange, ...]
) -> Transaction | None:
    if not changes and not ddl:
        return None
    if len(changes) == len(txn.changes) and len(ddl) == len(txn.ddl):
        return txn
    return dataclasses.replace(txn, changes=changes, ddl=ddl)


class SkipDrcOriginated:
    """Loop suppression: never apply what DRC itself applied somewhere (beside skip_drc)."""

    def __init__(self) -> None:
        self.skipped = 0

    def __call__(self, txn: Transaction) -> Transaction | None:
        if txn.drc_originated:
            self.skipped += 1
            return None
        return txn


class KeepTables:
    """The channel's table filter, on source names. DRC's own tables never pass, except the
    tombstone rows a channel resolving conflicts reads (``tombstones``)."""

    def __init__(self, tables: TableFilter, tombstones: bool = False) -> None:
        self.tables = tables
        self.tombstones = tombstones
        # (schema, table) -> kept: asked per row change, answered once per table
        self._kept: dict[tuple[str, str], bool] = {}

    def __call__(self, txn: Transaction) -> Transaction | None:
        kept, keeps = self._kept, self._keeps
        changes = tuple([
            c for c in txn.changes
            if kept.get((c.schema, c.table)) or (
                (c.schema, c.table) not in kept and keeps(c.schema, c.table)
            )
        ])  # fmt: skip
        ddl = tuple([d for d in txn.ddl if self.keeps_ddl(d)]) if txn.ddl else ()
        return _narrowed(txn, changes, ddl)

    def _keeps(self, schema: str, table: str) -> bool:
        if schema == CHECKPOINT_SCHEMA:
            keeps = self.tombstones and is_tombstone_table(schema, table)
        else:
            keeps = self.tables.matches(schema, table)
        if len(self._kept) >= _MAX_CACHED_TABLES:
            self._kept.clear()
        self._kept[(schema, table)] = keeps
        return keeps

    def keeps_ddl(self, change: SchemaChange) -> bool:
        return selects_ddl(self.tables, change, own_schema=False)


# Schema statements DRC replays: tables, indexes, databases, and the schema objects the channel's
# ``objects`` names (views, routines, triggers, events: drc.core.schema_objects). Everything else
# a binlog may carry (GRANT, CREATE USER, TEMPORARY tables, ANALYZE/OPTIMIZE, packages) is
# skipped and counted: privileges are per datacenter.
_APPLICABLE_DDL = re.compile(
    r"\s*(?:/\*.*?\*/\s*)*(?:TRUNCATE\b|(?:CREATE|ALTER|DROP|RENAME)\s+"
    r"(?:(?:OR\s+REPLACE|ONLINE|OFFLINE|IGNORE|UNIQUE|FULLTEXT|SPATIAL)\s+)*"
    r"(?:TABLES?|INDEX|DATABASE|SCHEMA)\b)",
    re.IGNORECASE | re.DOTALL,
)


def applicable_ddl(change: SchemaChange, objects: Collection[str] = schema_objects.KINDS) -> bool:
    """A table, index or database statement, or one on a schema object of ``objects``."""
    found = schema_objects.parse(change.statement, change.schema)
    if found is not None:
        return found.kind in objects
    return _APPLICABLE_DDL.match(change.statement) is not None


class KeepApplicableDdl:
    """Drops schema statements that must not be replayed on another datacenter (counted)."""

    def __init__(self, objects: Collection[str] = schema_objects.KINDS) -> None:
        self.objects = frozenset(objects)
        self.skipped = 0

    @property
    def ddl_skipped(self) -> int:
        return self.skipped

    def __call__(self, txn: Transaction) -> Transaction | None:
        if not txn.ddl:
            return txn
        kept = tuple(d for d in txn.ddl if applicable_ddl(d, self.objects))
        for change in txn.ddl:
            if change not in kept:
                self.skipped += 1
                log.warning("not applying statement at %s: %s", txn.scn, for_log(change.statement))
        return _narrowed(txn, txn.changes, kept)


class NameMap:
    """``map_tables`` ("db.t" -> "db2.t2", or "db.*" -> "db2.*") and ``map_columns``."""

    def __init__(self, tables: Mapping[str, str], columns: Mapping[str, Mapping[str, str]]) -> None:
        self.tables: dict[tuple[str, str], tuple[str, str]] = {}
        self.schemas: dict[str, str] = {}
        for source, target in tables.items():
            (db, table), (db2, table2) = _split(source), _split(target)
            if table == "*" and table2 == "*" and "*" not in db + db2:
                self.schemas[db] = db2
            elif "*" in source + target or "?" in source + target or "[" in source + target:
                raise ValueError(
                    f"map_tables {source!r} = {target!r}: map exact names (db.t = db2.t2) "
                    "or a whole database (db.* = db2.*)"
                )
            else:
                self.tables[(db, table)] = (db2, table2)
        self.columns = {_split(t): dict(m) for t, m in columns.items()}

    def table(self, schema: str, table: str) -> tuple[str, str]:
        mapped = self.tables.get((schema, table))
        if mapped is not None:
            return mapped
        return self.schemas.get(schema, schema), table

    def maps(self, schema: str, table: str | None) -> bool:
        return schema in self.schemas or (table is not None and (schema, table) in self.tables)

    @property
    def empty(self) -> bool:
        return not (self.tables or self.schemas or self.columns)


def _split(name: str) -> tuple[str, str]:
    db, _, table = name.partition(".")
    return db, table


class MapNames:
    """Renames tables and columns from the source's names to the target's.

    DDL is replayed as the source wrote it, so a statement on a mapped table (or in a mapped
    database) cannot be applied as is: it is skipped, counted and logged for the operator.
    """

    def __init__(self, names: NameMap) -> None:
        self.names = names
        self.ddl_skipped = 0
        # (source schema, table) -> (target schema, table, column map): looked up per row change
        self._targets: dict[tuple[str, str], tuple[str, str, Mapping[str, str] | None]] = {}

    def __call__(self, txn: Transaction) -> Transaction | None:
        if self.names.empty:
            return txn
        changes = tuple([self._change(c) for c in txn.changes])
        ddl = tuple(d for d in txn.ddl if self._keeps(txn.scn, d))
        return dataclasses.replace(txn, changes=changes, ddl=ddl)

    def _change(self, change: RowChange) -> RowChange:
        source = (change.schema, change.table)
        target = self._targets.get(source)
        if target is None:
            if len(self._targets) >= _MAX_CACHED_TABLES:
                self._targets.clear()
            target = (*self.names.table(*source), self.names.columns.get(source))
            self._targets[source] = target
        schema, table, columns = target
        if not columns:
            if (schema, table) == source:
                return change
            return RowChange(schema, table, change.op, change.before, change.after)
        before, after = _rename(change.before, columns), _rename(change.after, columns)
        return RowChange(schema, table, change.op, before, after)

    def _keeps(self, scn: SCN, change: SchemaChange) -> bool:
        mapped = [name for name in _ddl_names(change) if self._mapped(name)]
        if mapped:
            self.ddl_skipped += 1
            log.warning(
                "not applying DDL at %s on mapped %s (apply the equivalent by hand): %s",
                scn,
                ", ".join(".".join(n for n in name if n) for name in mapped),
                for_log(change.statement),
            )
        return not mapped

    def _mapped(self, name: tuple[str, str | None]) -> bool:
        schema, table = name
        if self.names.maps(schema, table):
            return True
        return table is not None and (schema, table) in self.names.columns


def _ddl_names(change: SchemaChange) -> list[tuple[str, str | None]]:
    """The tables a DDL names, or (database, None) for one that names no table."""
    found = schema_objects.parse(change.statement, change.schema)
    if found is not None:
        return [(found.schema, found.table)]
    named: list[tuple[str, str | None]] = [(db, t) for db, t, _kind in ddl_tables(change)]
    return named or [(dropped_database(change) or change.schema, None)]


def _rename(row: Mapping[str, Any] | None, columns: Mapping[str, str] | None) -> Any:
    if row is None or not columns:
        return row
    return {columns.get(name, name): value for name, value in row.items()}


class Idempotency:
    """Drops a transaction at or before the applied position (a redelivered batch), or one
    committed beyond it by a parallel group a crash left half-written."""

    def __init__(
        self, applied: Callable[[], SCN], beyond: Callable[[SCN], bool] = lambda scn: False
    ) -> None:
        self.applied = applied
        self.beyond = beyond  # committed beyond the position (drc.apply.parallel)
        self.dropped = 0

    def __call__(self, txn: Transaction) -> Transaction | None:
        if txn.scn <= self.applied() or self.beyond(txn.scn):
            self.dropped += 1
            return None
        return txn
