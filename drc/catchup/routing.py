"""Which partition a row change of a span goes to, and the order within it. Pure.

Every change of one (table, primary key) goes to one partition, so the partition can reduce it
to the key's net change (drc.core.reduce) and decide it against the target's row alone. An
update that moves a key is split first into a delete of the old key and an insert of the new
one (drc.core.reduce.key_parts), each routed by its own key. A table without a primary key
goes whole to one partition, where its changes stay in SCN order, unreduced. DRC's tombstone
rows (which the conflict engine reads to date a delete, drc.apply.tombstones) go unreduced with
the key they date.

The partition is a CRC-32 of the key's msgpack encoding (drc.core.codec), the same in every
process and on every host (Python's ``hash`` of a str is not), so a re-run routes alike.
Within a partition, changes are sorted by :data:`Position` (SCN, fragment, place in it): the
stream order.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from drc.apply import tombstones
from drc.core.codec import encode_value
from drc.core.events import Transaction
from drc.core.markers import is_tombstone_table
from drc.core.reduce import Change, key_parts, row_key

Position = tuple[bytes, int, int]  # SCN bytes (sort in SCN order), fragment, index
Routed = tuple[int, tuple[Position, Change]]


def partition_of(parts: Sequence[Any], partitions: int) -> int:
    return zlib.crc32(encode_value(list(parts))) % partitions


def route(
    txn: Transaction, primary_keys: Mapping[tuple[str, str], Sequence[str]], partitions: int
) -> Iterator[Routed]:
    """``(partition, (position, change))`` for every row change of ``txn`` (a fragment)."""
    scn = txn.scn.to_bytes()
    for index, change in enumerate(txn.changes):
        table = (change.schema, change.table)
        item = Change(txn.scn, txn.timestamp, change)
        position = (scn, txn.fragment, index)
        if is_tombstone_table(*table):  # with the key it dates the delete of
            yield _tombstone_partition(change.row, primary_keys, partitions), (position, item)
            continue
        columns = primary_keys.get(table, ())
        if not columns:
            yield partition_of(table, partitions), (position, item)
            continue
        for part in key_parts(item, columns):
            key = row_key(part.change.row, columns, table)
            yield partition_of((*table, *key), partitions), (position, part)


def _tombstone_partition(
    row: Mapping[str, Any], primary_keys: Mapping[tuple[str, str], Sequence[str]], partitions: int
) -> int:
    """A tombstone row goes where the changes of the row it dates go (its key columns are the
    table's, its table the origin's names: a table renamed by map_tables falls back to the
    delete's own time, as a missing tombstone does)."""
    table = (str(row.get(tombstones.COL_SCHEMA)), str(row.get(tombstones.COL_TABLE)))
    columns = primary_keys.get(table, ())
    if not columns or any(column not in row for column in columns):
        return partition_of(table, partitions)
    return partition_of((*table, *(row[column] for column in columns)), partitions)


def transactions(changes: Sequence[Change]) -> list[Transaction]:
    """Reduced changes (in SCN order) as the engine takes them: one Transaction per run of
    changes sharing an SCN, with its commit time (conflict log entries and lww need both)."""
    out: list[Transaction] = []
    run: list[Change] = []
    for item in changes:
        if run and run[0].scn != item.scn:
            out.append(_transaction(run))
            run = []
        run.append(item)
    if run:
        out.append(_transaction(run))
    return out


def _transaction(run: list[Change]) -> Transaction:
    first = run[0]
    return Transaction(first.scn, 0, None, first.timestamp, tuple(c.change for c in run))
