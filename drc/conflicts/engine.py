"""Write conflicts: detected by comparing each incoming change with the target's row, resolved
by the table's policy the same way on every side. Pure: decisions from rows already read.

Detection, for every table with a policy (``[[conflicts.tables]]``). The target's row for the
change's key is read with SELECT .. FOR UPDATE in the apply transaction (the probes
:meth:`ConflictEngine.prepare` asks for: drc.conflicts.probes); whether it equals an
incoming image is decided by the server (``<=>`` per column), so no value is ever compared
across two Python type systems::

    incoming   target row                                 result
    insert     none (or a tombstone older than it)         applied
               equal to the after image (a replay)         applied
               another row                                 conflict insert-insert
               none, tombstone newer (policies with a       conflict insert-delete
               timestamp column)
    update     equal to the before or after image          applied
               another row                                 conflict update-update
               none                                        conflict update-delete
    delete     equal to the before image                   applied
               none                                        applied (already gone)
               another row                                 conflict delete-update

Columns are never merged: the winner's whole row is kept, but for counter columns
(``delta_columns``, drc.conflicts.counters): an insert or update of a row that is there adds
what it did to them, whatever the policy decides for the other columns, and only those other
columns are compared to detect its conflict. A key-changing update on such a table
is handled as a delete of the old key and an insert of the new one. Within one target
transaction later changes of a key are compared with the row the earlier ones left.

Resolution is the table's policy: its ``decide`` is given the conflict at hand
(drc.conflicts.policies declares every policy and what it decides; drc.conflicts.rules holds
versions and resolvers). The resolved changes, not the incoming ones, go on to the write
planner (drc.apply.engine, drc.apply.plan).

Every conflict becomes a :class:`drc.conflicts.log.ConflictEntry`, written in the same
transaction as its resolution, and every applied delete on a table with a timestamp column
records its time as a :class:`TombstoneWrite` (when newer than the key's tombstone:
drc.conflicts.tombstones).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drc.conflicts import counters, tombstones
from drc.conflicts.log import ConflictEntry
from drc.conflicts.policies import Conflict, Policies, TablePolicy
from drc.conflicts.probes import Observed, Probe
from drc.conflicts.rules import (
    ConflictContext,
    Ranks,
    Row,
    Version,
    derived_delete_stamp,
    stamp_key,
)
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.core.target_errors import ApplyError
from drc.core.target_table import TargetTable, key_of


@dataclass(frozen=True, slots=True)
class TombstoneWrite:
    table: TargetTable
    key: tuple[Any, ...]
    version: Version


@dataclass
class Resolution:
    changes: list[RowChange] = field(default_factory=list)
    entries: list[ConflictEntry] = field(default_factory=list)
    tombstones: list[TombstoneWrite] = field(default_factory=list)


@dataclass(slots=True)
class _Item:
    txn: Transaction
    change: RowChange
    policy: TablePolicy | None = None
    table: TargetTable | None = None
    key: tuple[Any, ...] = ()
    delete_stamp: Any = None
    quiet: bool = False  # in a snapshot's window: converges, never logged (prepare)
    # The images a target row is compared with: the change's, without its counter columns
    # on a table with delta_columns (insert and update).
    before: Row | None = None
    after: Row | None = None
    counting: bool = False  # adds to counter columns when the row is there


@dataclass(slots=True)
class _State:
    """The target's row for one key as the transaction being built leaves it."""

    row: Row | None  # None: no row
    version_dc: str  # who wrote ``row`` (lww ties)
    observed: Observed | None = None  # set while ``row`` is still the row the probe read
    images: tuple[Row, ...] = ()
    tombstone: Version | None = None

    def equals(self, image: Row | None, part: bool = False) -> bool:
        """Whether the row equals ``image`` (``part``: on the image's columns alone)."""
        if self.row is None or image is None:
            return False
        if self.observed is not None:
            return any(
                s and i is image for s, i in zip(self.observed.same, self.images, strict=True)
            )
        if part:
            return all(_get(self.row, k, _MISSING) == v for k, v in image.items())
        return dict(self.row) == dict(image)


class Prepared:
    """A group's changes, the probes they need, and how to finish once the probes are read."""

    def __init__(self, engine: ConflictEngine, items: list[_Item], probes: list[Probe]) -> None:
        self.engine, self.items, self.probes = engine, items, probes

    def resolve(self, observed: Sequence[Observed]) -> Resolution:
        """Decide every change, given what each probe found (in :attr:`probes` order)."""
        probed = {
            (p.table.schema, p.table.table, p.key): (p, seen)
            for p, seen in zip(self.probes, observed, strict=True)
        }
        return self.engine.decide(self.items, probed)


class ConflictEngine:
    """Detects and resolves the conflicts of one channel's target transactions."""

    def __init__(
        self,
        policies: Policies,
        ranks: Ranks,
        *,
        channel: str,
        origin: str,
        datacenter: str,
        tables: Callable[[str, str], TargetTable],
        names: Any = None,  # drc.apply.stages.NameMap: tombstone rows carry source names
    ) -> None:
        self.policies, self.ranks = policies, ranks
        self.channel, self.origin, self.datacenter = channel, origin, datacenter
        self._tables, self._names = tables, names
        self.fallback_stamps = 0  # deletes that came without a tombstone row

    def prepare(
        self,
        transactions: Sequence[Transaction],
        plain: Callable[[SCN, str, str], bool] | None = None,
    ) -> Prepared:
        """The probes of ``transactions``' changes to tables with a policy; ``plain`` picks
        changes inside a snapshot's window (drc.core.windows), whose target row may already be
        at a later state of the origin's. They converge and are never logged (``quiet``):

        - written as they are (upserts, deletes by key), but still through the per-key state,
          so a change after the window in the same target transaction is compared with the
          row the window's changes leave, not with the row the probe read before them (that
          would be a false conflict);
        - on tables whose policy decides by version (lww), decided by their versions instead:
          the copy's later state is newer and stays, and a row written here after the join,
          while the channel is still inside the window, is not undone by an older change of
          the origin (which keeps the local write, it being newer: a plain write would leave
          the datacenters different)."""
        items: list[_Item] = []
        images: dict[tuple[str, str, tuple[Any, ...]], list[Row]] = {}
        probes_for: dict[tuple[str, str, tuple[Any, ...]], tuple[TargetTable, bool]] = {}
        # A big transaction comes in fragments, and a delete's tombstone row may sit in the
        # next one: the times are collected per source transaction (SCN), in order.
        by_scn: dict[SCN, dict[tuple[str, str, tuple[Any, ...]], deque[Any]]] = {}
        for txn in transactions:
            for ref, queued in self._delete_stamps(txn).items():
                by_scn.setdefault(txn.scn, {}).setdefault(ref, deque()).extend(queued)
        for txn in transactions:
            stamps = by_scn.get(txn.scn, {})
            for change in txn.changes:
                if tombstones.is_tombstone_table(change.schema, change.table):
                    continue
                policy = self.policies.get(change.schema, change.table)
                if policy is None:
                    items.append(_Item(txn, change))
                    continue
                window = plain is not None and plain(txn.scn, change.schema, change.table)
                table = self._tables(change.schema, change.table)
                for part in _split_key_change(change, table):
                    key = key_of(table, part.row)
                    ref = (table.schema, table.table, key)
                    stamp = None
                    if part.op is Op.DELETE and policy.column is not None:
                        waiting = stamps.get(ref)
                        carried = waiting.popleft() if waiting and change.op is Op.DELETE else None
                        stamp = self._delete_stamp(txn, part, policy, carried, change)
                    item = _Item(txn, part, policy, table, key, stamp, window)
                    item.before, item.after = part.before, part.after
                    if policy.delta_columns and not window and part.op is not Op.DELETE:
                        item.counting = True
                        item.before = counters.without(part.before, policy.delta_columns)
                        item.after = counters.without(part.after, policy.delta_columns)
                    items.append(item)
                    found = images.setdefault(ref, [])
                    found.extend(i for i in (item.before, item.after) if i is not None)
                    probes_for[ref] = (table, policy.column is not None)
        probes = [
            Probe(table, ref[2], tuple(images[ref]), timed)
            for ref, (table, timed) in probes_for.items()
        ]
        return Prepared(self, items, probes)

    # -- deletes' timestamps -------------------------------------------------------------

    def _delete_stamps(
        self, txn: Transaction
    ) -> dict[tuple[str, str, tuple[Any, ...]], deque[Any]]:
        """The times the origin's delete trigger wrote in this transaction, per key, in order:
        each delete of a key is followed by its own tombstone row (the trigger runs after it)."""
        stamps: dict[tuple[str, str, tuple[Any, ...]], deque[Any]] = {}
        for change in txn.changes:
            if (
                not tombstones.is_tombstone_table(change.schema, change.table)
                or change.after is None
            ):
                continue
            row = change.after
            schema, table = row[tombstones.COL_SCHEMA], row[tombstones.COL_TABLE]
            columns: Mapping[str, str] = {}
            if self._names is not None:
                columns = self._names.columns.get((schema, table), {})
                schema, table = self._names.table(schema, table)
            if self.policies.get(schema, table) is None:
                continue
            target = self._tables(schema, table)
            image = {columns.get(k, k): v for k, v in row.items()}
            ref = (schema, table, key_of(target, image))
            stamps.setdefault(ref, deque()).append(row[tombstones.COL_DELETED_AT])
        return stamps

    def _delete_stamp(
        self, txn: Transaction, part: RowChange, policy: TablePolicy, found: Any, change: RowChange
    ) -> Any:
        column = policy.column
        assert column is not None
        if change.op is Op.UPDATE:  # a key change: deleted when the new row was written
            return _column(change.after, column, change)
        if found is not None:
            return found
        # No tombstone row: the origin had no DRC delete trigger on the table (yet). Its
        # LwwGuard derives the same time from the same captured delete and records it there.
        self.fallback_stamps += 1
        return derived_delete_stamp(txn.timestamp, _column(part.before, column, part))

    # -- deciding -------------------------------------------------------------------------

    def decide(
        self,
        items: Sequence[_Item],
        probed: Mapping[tuple[str, str, tuple[Any, ...]], tuple[Probe, Observed]],
    ) -> Resolution:
        out = Resolution()
        states: dict[tuple[str, str, tuple[Any, ...]], _State] = {}
        for item in items:
            if item.policy is None or item.table is None:
                out.changes.append(item.change)
                continue
            ref = (item.table.schema, item.table.table, item.key)
            state = states.get(ref)
            if state is None:
                probe, seen = probed[ref]
                state = states[ref] = _State(
                    seen.row, self.datacenter, seen, probe.images, seen.tombstone
                )
            self._one(item, state, out)
        return out

    def _one(self, item: _Item, state: _State, out: Resolution) -> None:
        change, policy = item.change, item.policy
        assert policy is not None
        if item.quiet and not policy.declared.by_version:
            self._apply(item, state, out, upsert=True)
            return
        incoming = self._incoming(item)
        kind = _conflict(item, state, incoming, self.ranks)
        if item.counting and state.row is not None:
            self._count(item, state, out, kind, incoming)
            return
        if kind is None:
            self._apply(item, state, out)
            return
        decide = policy.declared.decide
        assert decide is not None  # a TablePolicy's policy detects
        decision, reason, result = decide(self._at_hand(item, state, kind, incoming))
        local = state.row
        if decision == "incoming":
            self._apply(item, state, out, upsert=True)
        elif decision == "custom":
            assert result is not None
            out.changes.append(
                RowChange(change.schema, change.table, Op.INSERT, None, dict(result))
            )
            state.row, state.observed, state.version_dc = result, None, self.datacenter
        elif decision == "delete":
            assert local is not None
            out.changes.append(RowChange(change.schema, change.table, Op.DELETE, dict(local), None))
            state.row, state.observed = None, None
        if not item.quiet:
            out.entries.append(self._entry(item, kind, decision, reason, local, state.row))

    def _count(
        self, item: _Item, state: _State, out: Resolution, kind: str | None, incoming: Any
    ) -> None:
        """An insert or update of a row that is there, on a table with counter columns: what
        it did to them is added; the policy decides the other columns on a conflict."""
        policy, table, change, local = item.policy, item.table, item.change, state.row
        assert policy is not None and table is not None and local is not None
        decision, reason = "incoming", ""
        if kind is not None:
            decide = policy.declared.decide
            assert decide is not None
            decision, reason, _ = decide(self._at_hand(item, state, kind, incoming))
            # A policy that takes delta_columns keeps the incoming or the local columns.
            assert decision in ("incoming", "local"), decision
        added = counters.amounts(change, policy.delta_columns)
        wins = decision == "incoming"
        write, row = counters.update(table, change, local, added, wins)
        out.changes.append(write)
        state.row, state.observed = row, None
        if wins:
            state.version_dc = self.origin
        if kind is not None:
            sums = ", ".join(f"{c} {a:+}" for c, a in added)
            reason = f"{reason}; counters added to: {sums}"
            out.entries.append(self._entry(item, kind, decision, reason, local, row))

    def _incoming(self, item: _Item) -> Version | None:
        policy = item.policy
        if policy is None or policy.column is None:
            return None
        assert policy.column is not None
        if item.change.op is Op.DELETE:
            return Version(item.delete_stamp, self.origin)
        return Version(_column(item.change.after, policy.column, item.change), self.origin)

    def _apply(self, item: _Item, state: _State, out: Resolution, upsert: bool = False) -> None:
        change = item.change
        if change.op is Op.DELETE:
            out.changes.append(change)
            state.row, state.observed = None, None
            incoming = self._incoming(item)
            # Strictly newer, as the tombstone upsert keeps it (tombstones.upsert).
            old = state.tombstone
            if incoming is not None and (
                old is None or stamp_key(incoming.stamp) > stamp_key(old.stamp)
            ):
                state.tombstone = incoming
                out.tombstones.append(TombstoneWrite(item.table, item.key, incoming))  # type: ignore[arg-type]
            return
        if upsert and change.op is Op.UPDATE:
            change = RowChange(change.schema, change.table, Op.INSERT, None, change.after)
        out.changes.append(change)
        state.row, state.observed, state.version_dc = change.after, None, self.origin

    def _at_hand(self, item: _Item, state: _State, kind: str, incoming: Version | None) -> Conflict:
        """What the table's policy decides by; made only for a conflict."""
        policy, table = item.policy, item.table
        assert policy is not None and table is not None
        local = None if policy.column is None else self._local_version(state, policy.column)
        return Conflict(
            kind, policy, table, item.key, item.change, state.row, incoming, local, self.ranks,
            lambda: self._context(item, state, kind),
        )  # fmt: skip

    def _local_version(self, state: _State, column: str) -> Version | None:
        if state.row is None:
            return state.tombstone
        return Version(_get(state.row, column), state.version_dc)

    def _context(self, item: _Item, state: _State, kind: str) -> ConflictContext:
        """What a resolver is told about the conflict besides the rows."""
        table = item.table
        assert table is not None
        tombstone = state.tombstone if state.row is None else None
        return ConflictContext(
            self.channel, self.origin, self.datacenter, item.txn.scn, _origin_time(item.txn),
            table.schema, table.table, kind, dict(zip(table.primary_key, item.key, strict=True)),
            None if tombstone is None else tombstone.stamp, item.delete_stamp,
        )  # fmt: skip

    def _entry(
        self,
        item: _Item,
        kind: str,
        decision: str,
        reason: str,
        local: Row | None,
        result: Row | None,
    ) -> ConflictEntry:
        table, change, policy = item.table, item.change, item.policy
        assert table is not None and policy is not None
        return ConflictEntry(
            channel=self.channel,
            scn=str(item.txn.scn),
            origin=self.origin,
            datacenter=self.datacenter,
            schema=table.schema,
            table=table.table,
            key=dict(zip(table.primary_key, item.key, strict=True)),
            kind=kind,
            policy=policy.name,
            decision=decision,
            reason=reason,
            local_row=None if local is None else dict(local),
            incoming_before=None if change.before is None else dict(change.before),
            incoming_after=None if change.after is None else dict(change.after),
            result_row=None if result is None else dict(result),
            origin_time=_origin_time(item.txn),
        )


def _conflict(item: _Item, state: _State, incoming: Version | None, ranks: Ranks) -> str | None:
    """The conflict kind, or None when the change applies as the origin expected."""
    present, op, part = state.row is not None, item.change.op, item.counting
    if op is Op.INSERT:
        if present:
            return None if state.equals(item.after, part) else "insert-insert"
        if incoming is not None and state.tombstone is not None:
            return None if ranks.newer(incoming, state.tombstone) else "insert-delete"
        return None
    if op is Op.UPDATE:
        if not present:
            return "update-delete"
        same = state.equals(item.before, part) or state.equals(item.after, part)
        return None if same else "update-update"
    if not present:
        return None
    return None if state.equals(item.before) else "delete-update"


def _split_key_change(change: RowChange, table: TargetTable) -> list[RowChange]:
    if change.op is not Op.UPDATE:
        return [change]
    assert change.before is not None and change.after is not None
    if key_of(table, change.before) == key_of(table, change.after):
        return [change]
    return [
        dataclasses.replace(change, op=Op.DELETE, after=None),
        dataclasses.replace(change, op=Op.INSERT, before=None),
    ]


_MISSING = object()


def _get(row: Row, column: str, default: Any = None) -> Any:
    """A column's value; MySQL column names are case-insensitive."""
    if column in row:
        return row[column]
    folded = {k.lower(): v for k, v in row.items()}
    return folded.get(column.lower(), default)


def _column(image: Row | None, column: str, change: RowChange) -> Any:
    if image is not None:
        value = _get(image, column, _MISSING)
        if value is not _MISSING:
            return value
    raise ApplyError(
        f"lww column {column!r} is not in the incoming rows of {change.schema}.{change.table}: "
        "add it to the table on every datacenter, or fix conflicts.tables.column"
    )


def _origin_time(txn: Transaction) -> dt.datetime | None:
    if not txn.timestamp:
        return None
    return dt.datetime.fromtimestamp(txn.timestamp, dt.UTC).replace(tzinfo=None)
