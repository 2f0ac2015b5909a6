"""The apply decision engine: what to write into the target for a batch of row changes. Pure.

Streaming channels (drc.apply.writer) and bulk catch-up executors both decide through it, so
a change is decided the same way whichever path applies it. It does no I/O and reads no
config: the caller reads the target (a :class:`drc.apply.target.Target`) and hands in what it
found::

    pending  = engine.prepare(transactions)     the probes: target rows to read and lock
                                                (keys of tables with a conflict policy)
    observed = target.probe(pending.probes)     what each probe found (caller's I/O)
    decision = engine.decide(pending, observed) writes, conflict log entries, tombstones,
                                                counts
    target.write(decision, checkpoint)          one target transaction (caller's I/O)

Inputs. ``transactions``: source transactions (or fragments) in SCN order, their row changes
decoded with the schema at their SCN and already through the filter chain (target names).
``tables``: the target's table definitions (columns, primary key, FLOAT columns), looked up by
name; a lookup asked to ``refresh`` reads the definition again (a column that seems missing
may have been added since). ``observed``: one :class:`drc.conflicts.probes.Observed` per probe,
in order; whether the target's row equals an incoming image is decided by the server
(``<=>`` per column, FLOAT columns bound in single precision: drc.mysql.sql.row_values), so
no value is compared across two type systems.

Decisions, each documented where it is made:

    tables with a conflict policy   drc.conflicts: insert-insert, update-update,
                                    update-delete, delete-update, insert-delete conflicts,
                                    resolved by lww (timestamp column, ties by datacenter
                                    priority, deletes dated by tombstones), a resolver,
                                    overwrite or keep; the resolved changes go on below
    every table                     drc.apply.plan: idempotent writes (an insert is an upsert,
                                    an update of a missing row inserts it, a delete of a
                                    missing row is a counted no-op), keyless tables refused or
                                    matched by whole row (LIMIT 1), inserts and deletes
                                    batched by shape into multi-row statements where key
                                    order allows (drc.apply.shapes): each row's writes in
                                    stream order

A bulk caller (catch-up executors) does the same per partition: its changes as Transactions
(each keeps its SCN and commit time: conflict log entries and lww delete times need them, and
a resolver table's conflicting keys are decided in SCN order), :class:`KnownTables` for the
definitions read once per DDL-free range, and its own Target (drc.apply.sink.TargetSession) to
probe and write.

The idempotent fallbacks of a write (drc.apply.plan.run / settled) need the target's answer,
so the Target runs them; their counts come back as drc.apply.plan.Effects.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from drc.apply.plan import NoPrimaryKey, Planner, Write
from drc.conflicts import log as conflict_log
from drc.conflicts import tombstones
from drc.conflicts.engine import ConflictEngine, Prepared, TombstoneWrite
from drc.conflicts.log import ConflictEntry
from drc.conflicts.probes import Observed, Probe
from drc.core.events import RowChange, Transaction
from drc.core.online_schema_change import missing_shadow_hint
from drc.core.scn import SCN
from drc.core.target_errors import MissingColumnError, MissingTableError
from drc.core.target_table import TargetTable
from drc.mysql.sql import Statement

Converging = Callable[[SCN, str, str], bool]


class Tables(Protocol):
    """The target's table definitions by name (MissingTableError for a table it lacks)."""

    def table(self, schema: str, table: str, refresh: bool = False) -> TargetTable: ...


@dataclass(frozen=True, slots=True)
class KnownTables:
    """Definitions read beforehand (catch-up reads them once per DDL-free range)."""

    definitions: Mapping[tuple[str, str], TargetTable]

    def __reduce__(self) -> tuple[Any, ...]:  # as drc.mysql.sql.Statement's
        return KnownTables, (self.definitions,)

    def table(self, schema: str, table: str, refresh: bool = False) -> TargetTable:
        found = self.definitions.get((schema, table))
        if found is None:
            raise MissingTableError(
                f"the target has no table {schema}.{table} for the changes the source makes to "
                "it: create it on the target (or map the source table with map_tables)"
                + missing_shadow_hint(table)
            )
        return found


@dataclass
class Counts:
    """What a decision amounts to, before the target runs it."""

    changes: int = 0  # row changes planned (resolved changes, for tables with a policy)
    writes: int = 0  # write statements planned
    conflicts: int = 0  # conflict log entries
    tombstones: int = 0  # tombstone rows to write
    fallback_stamps: int = 0  # deletes on lww tables dated without their tombstone row


@dataclass
class Decision:
    """The writes for a batch (each row's in stream order), and what goes with them in its
    transaction."""

    writes: Iterable[Write] = field(default_factory=list)  # a list unless decided lazily
    entries: list[ConflictEntry] = field(default_factory=list)
    tombstones: list[TombstoneWrite] = field(default_factory=list)
    counts: Counts = field(default_factory=Counts)

    def log_statements(self) -> list[Statement]:
        """The conflict log rows and tombstones, written after the writes, in the same
        target transaction."""
        out = []
        if self.entries:
            out.append(conflict_log.insert(self.entries))
        by_table: dict[TargetTable, list[tuple[Any, Any, str]]] = defaultdict(list)
        for write in self.tombstones:
            by_table[write.table].append((write.key, write.version.stamp, write.version.datacenter))
        for table, rows in by_table.items():
            out.append(tombstones.upsert(table.schema, table.table, table.primary_key, rows))
        return out


@dataclass
class Pending:
    """A batch prepared for deciding: the probes it needs, in the order ``decide`` wants
    their answers."""

    transactions: Sequence[Transaction]
    prepared: Prepared | None = None  # None: no table of the batch has a conflict policy
    fallback_stamps: int = 0

    @property
    def probes(self) -> list[Probe]:
        return [] if self.prepared is None else self.prepared.probes


class ApplyEngine:
    """Decides one channel's writes (see the module docstring)."""

    def __init__(
        self,
        tables: Tables,
        no_primary_key: NoPrimaryKey = "refuse",
        conflicts: ConflictEngine | None = None,
    ) -> None:
        self.tables = tables
        self.no_primary_key: NoPrimaryKey = no_primary_key
        self.conflicts = conflicts

    def prepare(
        self, transactions: Sequence[Transaction], plain: Converging | None = None
    ) -> Pending:
        """``plain(scn, schema, table)``: changes applied without conflict detection (a
        snapshot's converging window, drc.core.windows)."""
        conflicts = self.conflicts
        if conflicts is None:
            return Pending(transactions)
        before = conflicts.fallback_stamps
        prepared = conflicts.prepare(transactions, plain)
        return Pending(transactions, prepared, conflicts.fallback_stamps - before)

    def decide(
        self, pending: Pending, observed: Sequence[Observed] = (), *, lazy: bool = False
    ) -> Decision:
        """Decide every change of ``pending``, given what each of its probes found.

        ``lazy``: :attr:`Decision.writes` is an iterator that plans each write as it is taken
        (consume it once, in order), so a streaming target sends the first chunk while the
        rest is still being planned; ``counts.changes`` and ``counts.writes`` are complete
        once it is consumed. Conflicts are decided before it returns, either way."""
        decision = Decision()
        changes: Sequence[RowChange] | Iterator[RowChange]
        if pending.prepared is None:
            changes = _changes_of(pending.transactions)
        else:
            resolution = pending.prepared.resolve(observed)
            changes = resolution.changes
            decision.entries, decision.tombstones = resolution.entries, resolution.tombstones
        counts = decision.counts
        counts.conflicts = len(decision.entries)
        counts.tombstones = len(decision.tombstones)
        counts.fallback_stamps = pending.fallback_stamps
        writes = self._plan(changes, counts)
        decision.writes = writes if lazy else list(writes)
        return decision

    def _plan(self, changes: Iterable[RowChange], counts: Counts) -> Iterator[Write]:
        """The writes of ``changes``, as they complete (drc.apply.plan.Planner)."""
        planner, tables = Planner(self.no_primary_key), self.tables
        for change in changes:
            counts.changes += 1
            table = tables.table(change.schema, change.table)
            try:
                writes = planner.add(change, table)
            except MissingColumnError:  # maybe altered since it was read: read it again
                table = tables.table(change.schema, change.table, refresh=True)
                writes = planner.add(change, table)
            if writes:
                counts.writes += len(writes)
                yield from writes
        writes = planner.finish()
        counts.writes += len(writes)
        yield from writes


def _changes_of(transactions: Sequence[Transaction]) -> Iterator[RowChange]:
    """Every row change of ``transactions``, in order (a generator function: compiled, a
    generator expression would be built as a list)."""
    for txn in transactions:
        yield from txn.changes
