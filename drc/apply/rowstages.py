"""Filter stages on the rows themselves: a channel's ``row_filters`` and ``exclude_columns``.

Both work on source names (they run before drc.apply.stages.MapNames) and only on row
changes; DDL passes as is.

A row filter keeps the target equal to the filtered projection of the source, so a change is
judged by both its images::

    before passes   after passes    written as
    yes             yes             the update
    no              yes             INSERT of the after image   (the row moved into the filter)
    yes             no              DELETE of the before image  (the row moved out of it)
    no              no              nothing

Excluded columns are left out of both images, so the target needs not have them (or keeps its
own values); conflict detection then compares the columns that remain. A key column cannot be
excluded: the write would not know its row (drc.apply.plan refuses it with a clear error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from drc.core.events import Op, Row, RowChange, Transaction
from drc.core.rowfilter import Predicate
from drc.core.tablefilter import TableFilter

_MAX_CACHED_TABLES = 65536


class RowFilterColumnError(ValueError):
    """A row filter names a column the table's changes do not carry."""


class _PerTable:
    """Which entry of a {pattern: value} map a table takes: the first pattern it matches."""

    def __init__(self, entries: Mapping[str, Any]) -> None:
        self._entries = [(TableFilter.build([p]), v) for p, v in entries.items()]
        self._found: dict[tuple[str, str], Any] = {}

    def __bool__(self) -> bool:
        return bool(self._entries)

    def get(self, schema: str, table: str) -> Any:
        key = (schema, table)
        if key in self._found:
            return self._found[key]
        if len(self._found) >= _MAX_CACHED_TABLES:
            self._found.clear()
        found = next((v for f, v in self._entries if f.matches(schema, table)), None)
        self._found[key] = found
        return found


class FilterRows:
    """The channel's row filters (see the module's table); counts what it drops or turns."""

    def __init__(self, predicates: Mapping[str, Predicate]) -> None:
        self._predicates = _PerTable(predicates)
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
        predicate: Predicate | None = self._predicates.get(change.schema, change.table)
        if predicate is None:
            return change
        before = change.before is not None and _passes(predicate, change, change.before)
        after = change.after is not None and _passes(predicate, change, change.after)
        if change.op is Op.UPDATE and before != after:
            self.turned += 1
            if after:
                return RowChange(change.schema, change.table, Op.INSERT, None, change.after)
            return RowChange(change.schema, change.table, Op.DELETE, change.before, None)
        if before or after:
            return change
        self.dropped += 1
        return None


def _passes(predicate: Predicate, change: RowChange, image: Row) -> bool:
    try:
        return predicate.passes(image)
    except KeyError:
        unknown = predicate.unknown_columns(image)
        raise RowFilterColumnError(
            f"the row filter of {change.schema}.{change.table} ({predicate.text!r}) names "
            f"{', '.join(map(repr, unknown))}, which the table's changes do not carry (columns: "
            f"{', '.join(image)}): correct row_filters and reload the channel"
        ) from None


class ExcludeColumns:
    """Leaves the channel's ``exclude_columns`` out of every row image."""

    def __init__(self, exclude_columns: Mapping[str, Iterable[str]]) -> None:
        self._columns = _PerTable(
            {t: frozenset(c.lower() for c in cols) for t, cols in exclude_columns.items()}
        )

    def __call__(self, txn: Transaction) -> Transaction | None:
        if not self._columns:
            return txn
        changes = tuple([self._change(c) for c in txn.changes])
        return dataclasses.replace(txn, changes=changes)

    def _change(self, change: RowChange) -> RowChange:
        columns: frozenset[str] | None = self._columns.get(change.schema, change.table)
        if not columns:
            return change
        before, after = _without(change.before, columns), _without(change.after, columns)
        return RowChange(change.schema, change.table, change.op, before, after)


def _without(row: Row | None, columns: frozenset[str]) -> Row | None:
    if row is None:
        return None
    return {name: value for name, value in row.items() if name.lower() not in columns}
