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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from drc.core.events import Op, Row, RowChange, Transaction
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

    def overlaps(self, first: SCN, last: SCN) -> bool:
        """Whether records with SCNs from ``first`` to ``last`` (a segment's) may hold some
        of the span. Bounded by the segment's first record, not the SCN before it: a segment
        that goes on with a large transaction's fragments has that transaction's SCN before
        it, and may be all that holds the rest of the span's last transaction."""
        return last > self.after and (first < self.end or (self.end_included and first == self.end))


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


Entry = list[Any]
"""A row change as bulk catch-up carries it: ``[position, scn, timestamp, schema, table, before,
after]``; ``position`` orders the stream (any comparable value: an index here, the record's
place in catch-up), ``scn`` and ``timestamp`` are its transaction's, the images as in a
RowChange (its op is which images it has). A plain list: cheap to build, pack and ship."""

POSITION, SCN_, TIMESTAMP, SCHEMA, TABLE, BEFORE, AFTER = range(7)


class Nets:
    """The net change per key of entries added in stream order (see the module docstring).

    ``add(key, entry)``: ``key`` names the row (schema, table and key values), None keeps the
    entry as it came (keyless and tombstone rows). The first entry of a key is kept and
    updated in place (its before-image stays; position, SCN, time and after-image become the
    latest), so pass a list of its own. Adding the nets of contiguous runs, in order, gives the
    nets of the whole: a net is itself a first before-image and a last after-image.
    """

    __slots__ = ("_nets", "_kept")

    def __init__(self) -> None:
        self._nets: dict[Any, Entry] = {}
        self._kept: list[Entry] = []

    def add(self, key: Any, entry: Entry) -> None:
        if key is None:
            self._kept.append(entry)
            return
        net = self._nets.get(key)
        if net is None:
            self._nets[key] = entry
        else:
            net[POSITION], net[SCN_], net[TIMESTAMP], net[AFTER] = (
                entry[POSITION], entry[SCN_], entry[TIMESTAMP], entry[AFTER]
            )  # fmt: skip

    def __len__(self) -> int:
        return len(self._nets) + len(self._kept)

    def result(self) -> list[Entry]:
        """The nets in order of each one's last change (a key made and removed is nothing).
        Positions are unique: the insert half of an update that moves its key sorts after
        the delete half (:func:`moved_position`)."""
        out = [e for e in self._nets.values() if e[BEFORE] is not None or e[AFTER] is not None]
        out.extend(self._kept)
        out.sort(key=itemgetter(POSITION))
        return out


def op_of(entry: Entry) -> Op:
    if entry[BEFORE] is None:
        return Op.INSERT
    return Op.DELETE if entry[AFTER] is None else Op.UPDATE


def reduce_changes(
    changes: Iterable[Change], primary_keys: Mapping[TableName, Sequence[str]]
) -> list[Change]:
    """The net change per (table, primary key), see the module docstring.

    ``primary_keys`` gives every table's key columns as of the span (empty: no primary key,
    changes kept as they are). A table missing from it is a ValueError: reducing without
    knowing the key would be a silent wrong answer.
    """
    nets = Nets()
    for position, item in enumerate(changes):
        change = item.change
        table = (change.schema, change.table)
        if table not in primary_keys:
            raise ValueError(
                f"no primary key known for {change.schema}.{change.table}: pass the key "
                "columns of every table in the span (an empty tuple for a keyless table)"
            )
        columns = primary_keys[table]
        parts = key_parts(item, columns) if columns else (item,)
        for at, part in zip((position * 2, position * 2 + 1), parts, strict=False):
            c = part.change
            entry = [at, part.scn, part.timestamp, c.schema, c.table, c.before, c.after]
            nets.add((*table, *row_key(c.row, columns, table)) if columns else None, entry)
    return [
        Change(e[SCN_], e[TIMESTAMP], RowChange(e[SCHEMA], e[TABLE], op_of(e), e[BEFORE], e[AFTER]))
        for e in nets.result()
    ]


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


def moved_position(position: bytes) -> bytes:
    """Where the insert half of an update that moves its key goes: right after its delete half
    (at ``position``), before the next change."""
    return position + b"\x01"


def key_getter(table: TableName, columns: Sequence[str]) -> Callable[[Row], tuple[Any, ...]]:
    """``row -> (schema, table, *key values)`` for rows of ``table`` (the error of
    :func:`row_key` for a row lacking a key column)."""
    schema, name = table
    get = itemgetter(*columns)
    single = len(columns) == 1

    def key(row: Row) -> tuple[Any, ...]:
        try:
            return (schema, name, get(row)) if single else (schema, name, *get(row))
        except KeyError:
            return (schema, name, *row_key(row, columns, table))  # raises, naming the column

    return key


def row_key(row: Mapping[str, Any], columns: Sequence[str], table: TableName) -> tuple[Any, ...]:
    try:
        return tuple(row[column] for column in columns)
    except KeyError as exc:
        raise ValueError(
            f"a row of {table[0]}.{table[1]} lacks primary key column {exc.args[0]}: the key "
            "given does not match the schema the rows were written with"
        ) from None
