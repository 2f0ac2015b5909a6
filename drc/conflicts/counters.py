"""Counter columns (``delta_columns``): what a change did to them is added, never written. Pure.

A counter is an integer or DECIMAL column, NOT NULL (drc.conflicts.target checks both when the
channel starts). What the origin did to it is the difference of its images, ``after - before``
(an insert: the value it inserted, an increment from nothing); the receiving side adds that
amount to its own value, ``SET n = n + amount`` (drc.core.events.CounterUpdate), so increments
made at the same time on every datacenter all count:

    dc1: n 10 -> 7 (-3)        dc2: n 10 -> 7 (-3)
    dc1 applies dc2's -3: 4    dc2 applies dc1's -3: 4           both end at 10 - 3 - 3

Integer and DECIMAL sums are exact and do not depend on the order they are added in, so every
datacenter ends with its start value plus every datacenter's amounts, whatever the
interleaving. Floating-point sums depend on the order, so FLOAT and DOUBLE are refused.

The row's other columns keep the table's policy (drc.conflicts.engine compares only them to
detect a conflict, and the policy decides whether the incoming values or the local ones stay);
the amount is added either way. Deletes, rows that are missing (an update whose row was
deleted, an insert of a row not there) and changes inside a snapshot's window are whole-row
changes decided as on any table. A sum beyond the column's range stops the channel
(:class:`CounterRangeError`): the server would clamp it, silently, and the sides would differ.
"""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from drc.conflicts.rules import Row
from drc.core.events import CounterUpdate, Op, RowChange
from drc.core.target_errors import ApplyError
from drc.core.target_table import TargetTable

# Wide enough for any DECIMAL (65 digits): the default context's 28 would round.
_EXACT = decimal.Context(prec=200, traps=[decimal.Inexact, decimal.InvalidOperation])


class CounterValueError(ApplyError):
    """A counter column holds NULL or a floating-point value: it cannot be added to."""


class CounterRangeError(ApplyError):
    """A counter's sum does not fit its column."""


def without(image: Row | None, columns: Sequence[str]) -> Row | None:
    """``image`` without the counter columns: what conflict detection compares."""
    if image is None:
        return None
    counters = {c.lower() for c in columns}
    return {k: v for k, v in image.items() if k.lower() not in counters}


def amounts(change: RowChange, columns: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """What ``change`` added to each counter: after - before (an insert: its value)."""
    after = change.after
    assert after is not None  # an insert or an update
    out = []
    for column in columns:
        name, value = _find(after, column, change, "incoming row")
        if change.before is None:
            out.append((name, value))
            continue
        _, old = _find(change.before, column, change, "incoming before image")
        out.append((name, _minus(value, old)))
    return tuple(out)


def update(
    table: TargetTable,
    change: RowChange,
    local: Row,
    added: tuple[tuple[str, Any], ...],
    incoming_wins: bool,
) -> tuple[CounterUpdate, dict[str, Any]]:
    """The write that adds ``added`` to the local row, with the other columns the incoming
    ones (``incoming_wins``) or the local ones; and the row it leaves."""
    after = change.after
    assert after is not None
    counters = {c.lower() for c, _ in added}
    key = {k.lower() for k in table.primary_key}
    others = tuple(c for c in after if c.lower() not in counters and c.lower() not in key)
    row = dict(after) if incoming_wins else dict(local)
    for column, amount in added:
        _, value = _find(local, column, change, "local row")
        total = _plus(value, amount)
        _check_range(table, column, total, change, after)
        row[_find(row, column, change, "local row")[0]] = total
    write = CounterUpdate(
        change.schema, change.table, Op.UPDATE, change.before or after, after,
        added=added, assigned=others if incoming_wins else (), kept=() if incoming_wins else others,
    )  # fmt: skip
    return write, row


def _find(row: Row, column: str, change: RowChange, where: str) -> tuple[str, Any]:
    """A counter's name and value in ``row`` (names are case-insensitive)."""
    name = column if column in row else next((k for k in row if k.lower() == column.lower()), None)
    if name is None:
        raise CounterValueError(
            f"counter column {column!r} is not in the {where} of {change.schema}.{change.table}: "
            "add it to the table on every datacenter, or fix conflicts.tables.delta_columns"
        )
    value = row[name]
    if value is None or isinstance(value, float) or not isinstance(value, int | Decimal):
        what = "NULL" if value is None else f"a {type(value).__name__}"
        raise CounterValueError(
            f"counter column {column!r} of {change.schema}.{change.table} is {what} in the "
            f"{where}: a counter must be an integer or DECIMAL column, NOT NULL, on every "
            "datacenter (ALTER TABLE .. MODIFY it .. NOT NULL DEFAULT 0), or be left out of "
            "conflicts.tables.delta_columns"
        )
    return name, value


def _minus(a: int | Decimal, b: int | Decimal) -> int | Decimal:
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return _EXACT.subtract(Decimal(a), Decimal(b))


def _plus(a: int | Decimal, b: int | Decimal) -> int | Decimal:
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    return _EXACT.add(Decimal(a), Decimal(b))


def _check_range(
    table: TargetTable, column: str, total: Any, change: RowChange, after: Row
) -> None:
    bounds = table.bounds_of(column)
    if bounds is None or bounds[0] <= total <= bounds[1]:
        return
    key = {k: v for k, v in after.items() if k.lower() in {c.lower() for c in table.primary_key}}
    raise CounterRangeError(
        f"counter {column!r} of {table.name} key {key} would become {total}, outside the "
        f"column's range [{bounds[0]}, {bounds[1]}]: the datacenters' changes together go "
        "beyond it. Widen the column on every datacenter (ALTER TABLE .. MODIFY) and restart "
        "the channel; nothing after the last checkpoint was applied"
    )
