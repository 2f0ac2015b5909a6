"""Bulk catch-up's pure steps: split a range at every DDL, reduce a sub-range to net changes.

Splitting (:func:`plan_steps`, :func:`split_transactions`): a range ``(after, to]`` becomes
:class:`Span` steps of row changes with :class:`DdlStep` steps between them, in SCN order. A
transaction that carries DDL is a step of its own (its row changes, e.g. a CREATE ... SELECT,
come after the statement and are applied with it, serially), so every span is decoded with one
schema per table and the driver runs the DDL between spans, in order.

Reduction (:func:`reduce_changes`): the row changes of one span, in SCN order, become the net
change per (schema, table, primary key): the key's *first* before-image and its *last*
after-image::

    first op   last op    net change
    insert     delete     nothing (the row was made and removed inside the span)
    insert     not delete insert(last after)
    update/del delete     delete(first before)
    update/del not delete update(first before -> last after)

An update that changes the primary key is a delete of the old key and an insert of the new one
(in that order, at the update's position). Tables without a primary key are not reduced: their
changes pass through unchanged. The output is ordered by the position of each key's last
change, so it is in SCN order and a key whose row moved away is freed before it is reused.

The invariant (tests/unit/test_reduce.py checks it on random histories): applying the reduced
changes to any state whose rows equal the first before-images (and lacks the keys first
inserted) ends in the same state as applying every change serially. A secondary UNIQUE index
is not part of the model: a span that swaps unique values between rows can be valid serially
and not once reduced; such tables belong among those applied in SCN order.

Keys compare by Python equality of the stored values: a case- or pad-insensitive collation
can make two keys equal in the database that differ here. Each change's final effect still
lands in SCN order, so such keys converge too.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN

TableName = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Change:
    """A row change with where it comes from: its transaction's SCN and commit time."""

    scn: SCN
    timestamp: int
    change: RowChange


@dataclass(frozen=True, slots=True)
class Span:
    """Row changes with ``after < scn < end``, or ``<= end`` when ``end_included``."""

    after: SCN
    end: SCN
    end_included: bool

    def contains(self, scn: SCN) -> bool:
        return self.after < scn and (scn < self.end or (self.end_included and scn == self.end))


@dataclass(frozen=True, slots=True)
class DdlStep:
    """The transaction at ``scn`` carries DDL: applied alone, serially, between spans."""

    scn: SCN


Step = Span | DdlStep


def plan_steps(after: SCN, to: SCN, ddl_scns: Iterable[SCN]) -> list[Step]:
    """The steps of the range ``(after, to]`` given the SCNs of its DDL transactions.

    SCNs outside the range are ignored. A span may hold no transaction (two DDL transactions
    in a row): SCNs alone cannot tell, and reading an empty span costs nothing.
    """
    if to < after:
        raise ValueError(f"the range end {to} is before its start {after}")
    steps: list[Step] = []
    start = after
    for scn in sorted({s for s in ddl_scns if after < s <= to}):
        steps.append(Span(start, scn, end_included=False))
        steps.append(DdlStep(scn))
        start = scn
    if start < to:
        steps.append(Span(start, to, end_included=True))
    return steps


def split_transactions(
    transactions: Iterable[Transaction],
) -> Iterator[tuple[Transaction, ...] | Transaction]:
    """Group whole transactions (in SCN order) into runs without DDL, yielded as tuples, and
    the transactions carrying DDL, yielded alone between them. Empty runs are not yielded."""
    run: list[Transaction] = []
    for txn in transactions:
        if not txn.ddl:
            run.append(txn)
            continue
        if run:
            yield tuple(run)
            run = []
        yield txn
    if run:
        yield tuple(run)


def changes_of(transactions: Iterable[Transaction]) -> Iterator[Change]:
    """The row changes of transactions, in order, each with its transaction's SCN and time."""
    for txn in transactions:
        for change in txn.changes:
            yield Change(txn.scn, txn.timestamp, change)


@dataclass(slots=True)
class _Net:
    """What one key's changes amount to so far."""

    first: Change  # its first change: the before-image the target should hold
    last: Change  # its latest change: the after-image it ends with
    position: int  # where ``last`` was in the input


def reduce_changes(
    changes: Iterable[Change], primary_keys: Mapping[TableName, Sequence[str]]
) -> list[Change]:
    """The net change per (table, primary key), see the module docstring.

    ``primary_keys`` gives every table's key columns as of the span (empty: no primary key,
    changes kept as they are). A table missing from it is a ValueError: reducing without
    knowing the key would be a silent wrong answer.
    """
    nets: dict[tuple[str, str, tuple[Any, ...]], _Net] = {}
    kept: list[tuple[int, int, Change]] = []  # (position, order within it, change)
    for position, item in enumerate(changes):
        change = item.change
        table = (change.schema, change.table)
        if table not in primary_keys:
            raise ValueError(
                f"no primary key known for {change.schema}.{change.table}: pass the key "
                "columns of every table in the span (an empty tuple for a keyless table)"
            )
        columns = primary_keys[table]
        if not columns:
            kept.append((position, 0, item))
            continue
        for part in key_parts(item, columns):
            key = (*table, row_key(part.change.row, columns, table))
            net = nets.get(key)
            if net is None:
                nets[key] = _Net(part, part, position)
            else:
                net.last, net.position = part, position
    for net in nets.values():
        result = _net_change(net.first, net.last)
        if result is not None:
            order = 0 if result.change.op is Op.DELETE else 1  # a moved key frees before reuse
            kept.append((net.position, order, result))
    kept.sort(key=lambda entry: (entry[0], entry[1]))
    return [change for _, _, change in kept]


def key_parts(item: Change, columns: Sequence[str]) -> tuple[Change, ...]:
    """The change, or for an update that moves the key, its delete and its insert."""
    change = item.change
    if change.op is not Op.UPDATE:
        return (item,)
    assert change.before is not None and change.after is not None
    table = (change.schema, change.table)
    if row_key(change.before, columns, table) == row_key(change.after, columns, table):
        return (item,)
    delete = RowChange(change.schema, change.table, Op.DELETE, change.before, None)
    insert = RowChange(change.schema, change.table, Op.INSERT, None, change.after)
    return (Change(item.scn, item.timestamp, delete), Change(item.scn, item.timestamp, insert))


def row_key(row: Mapping[str, Any], columns: Sequence[str], table: TableName) -> tuple[Any, ...]:
    try:
        return tuple(row[column] for column in columns)
    except KeyError as exc:
        raise ValueError(
            f"a row of {table[0]}.{table[1]} lacks primary key column {exc.args[0]}: the key "
            "given does not match the schema the rows were written with"
        ) from None


def _net_change(first: Change, last: Change) -> Change | None:
    before = first.change.before  # None: the key did not exist before the span
    after = last.change.after  # None: the key does not exist after it
    schema, table = first.change.schema, first.change.table
    if before is None and after is None:
        return None
    if first is last:
        return first
    if before is None:
        op = Op.INSERT
    elif after is None:
        op = Op.DELETE
    else:
        op = Op.UPDATE
    return Change(last.scn, last.timestamp, RowChange(schema, table, op, before, after))
