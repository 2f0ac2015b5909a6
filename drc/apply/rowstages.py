"""Filter stages on the rows themselves: a channel's ``row_filters`` and ``exclude_columns``.

Both work on source names (they run before drc.apply.stages.MapNames) and only on row
changes; DDL passes as is.

A row filter keeps the target equal to the filtered projection of the source, so a change is
judged by both its images (drc.core.rowfilter.filtered): an update that moves a row into the
filter is written as an insert of its new row, one that moves it out as a delete of its old
row, and a change outside it not at all.

Excluded columns are left out of both images, so the target need not have them (or keeps its
own values); conflict detection then compares the columns that remain. A key column cannot be
excluded: the write would not know its row (drc.apply.plan refuses it with a clear error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from drc.core.events import Row, RowChange, Transaction
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.rowfilter import PerTable, Predicate, RowFilterColumnError, filtered


class FilterRows:
    """The channel's row filters (drc.core.rowfilter.filtered); counts what it drops or turns."""

    def __init__(self, predicates: Mapping[str, Predicate]) -> None:
        self._predicates = PerTable(predicates)
        self.dropped = 0
        self.turned = 0  # updates written as an insert or a delete

    def __call__(self, txn: Transaction) -> Transaction | None:
        if not self._predicates:
            return txn
        changes: list[RowChange] = []
        changed = False
        for change in txn.changes:
            kept = self._change(change)
            if kept is not None:
                changes.append(kept)
            if kept is not change:
                changed = True
        if not changed:
            return txn
        if not changes and not txn.ddl:
            return None
        return dataclasses.replace(txn, changes=tuple(changes))

    def _change(self, change: RowChange) -> RowChange | None:
        if change.schema == CHECKPOINT_SCHEMA:  # DRC's own rows (tombstones): never filtered
            return change
        predicate: Predicate | None = self._predicates.get(change.schema, change.table)
        if predicate is None:
            return change
        try:
            kept = filtered(predicate, change)
        except RowFilterColumnError as exc:
            raise RowFilterColumnError(
                f"{exc}: correct row_filters and reload the channel"
            ) from None
        if kept is None:
            self.dropped += 1
        elif kept.op is not change.op:
            self.turned += 1
        return kept


class ExcludeColumns:
    """Leaves the channel's ``exclude_columns`` out of every row image."""

    def __init__(self, exclude_columns: Mapping[str, Iterable[str]]) -> None:
        self._columns = PerTable(
            {t: frozenset(c.lower() for c in cols) for t, cols in exclude_columns.items()}
        )

    def __call__(self, txn: Transaction) -> Transaction | None:
        if not self._columns:
            return txn
        changes = tuple([self._change(c) for c in txn.changes])
        return dataclasses.replace(txn, changes=changes)

    def _change(self, change: RowChange) -> RowChange:
        columns: frozenset[str] | None = self._columns.get(change.schema, change.table)
        if not columns or change.schema == CHECKPOINT_SCHEMA:
            return change
        before, after = _without(change.before, columns), _without(change.after, columns)
        return RowChange(change.schema, change.table, change.op, before, after)


def _without(row: Row | None, columns: frozenset[str]) -> Row | None:
    if row is None:
        return None
    return {name: value for name, value in row.items() if name.lower() not in columns}
