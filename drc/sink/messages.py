"""What the sink publishes: one message per row change, placed by its key's logical partition.

A message's body is one JSON object (values in DRC's JSON wire form, drc.core.jsonwire)::

    {"id": "c:s:i:p/F/R", "scn": "c:s:i:p", "fragment": F, "last_fragment": true, "row": R,
     "gtid": "0-1-42", "timestamp": 1700000000, "schema": "shop", "table": "orders",
     "op": "insert" | "update" | "delete", "before": {...} | null, "after": {...} | null,
     "key": [...], "partition": P, "key_change": null | "old" | "new"}

- ``id`` is unique across the stream and the same on every redelivery: the SCN of the
  transaction, its fragment and the row's index in that fragment (plus ``/old`` or ``/new``,
  below). A consumer that remembers the ids it processed (or the highest (scn, fragment, row)
  per queue, since a queue's order is the stream's) drops a redelivery.
- ``partition`` is drc.core.partitions.key_partition over the primary key's values (all columns
  for a table without one); queue ``i`` of ``n`` receives the partitions of
  ``split_ranges(n)[i]``, so every change of one key lands in one queue, in stream order.
- An update that changes the key is two messages, as the old key leaves and the new one
  arrives: first a ``delete`` of the old row (``key_change: "old"``, routed by the old key),
  then an ``insert`` of the new row (``key_change: "new"``, routed by the new key). So each
  key's own history stays in its queue and in order; the old key's delete is published (and
  confirmed) before the new key's insert.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from drc.core.events import Op, Row, RowChange, Transaction
from drc.core.jsonwire import value_to_json
from drc.core.partitions import key_partition, range_index, row_key

# The primary key columns of (schema, table) as of an SCN: () for a table without one.
KeyColumns = Callable[[str, str, Transaction], Sequence[str]]


@dataclass(frozen=True, slots=True)
class Message:
    """One row change ready to publish: ``queue`` is its range index among the sink's queues."""

    message_id: str
    queue: int
    partition: int
    op: str
    body: bytes
    timestamp: int


def message_id(txn: Transaction, row: int, half: str | None = None) -> str:
    base = f"{txn.scn}/{txn.fragment}/{row}"
    return base if half is None else f"{base}/{half}"


def transaction_messages(txn: Transaction, keys: KeyColumns, queues: int) -> Iterator[Message]:
    """The messages of one transaction (fragment), in its row order."""
    for index, change in enumerate(txn.changes):
        key_columns = tuple(keys(change.schema, change.table, txn))
        yield from change_messages(txn, index, change, key_columns, queues)


def change_messages(
    txn: Transaction, index: int, change: RowChange, key_columns: Sequence[str], queues: int
) -> Iterator[Message]:
    """One message, or two for an update that changes the row's key (see the module doc)."""
    if change.op is Op.UPDATE:
        assert change.before is not None and change.after is not None
        old, new = row_key(change.before, key_columns), row_key(change.after, key_columns)
        if old != new:
            yield _message(txn, index, change, Op.DELETE, change.before, None, old, queues, "old")
            yield _message(txn, index, change, Op.INSERT, None, change.after, new, queues, "new")
            return
        yield _message(txn, index, change, change.op, change.before, change.after, old, queues)
        return
    key = row_key(change.row, key_columns)
    yield _message(txn, index, change, change.op, change.before, change.after, key, queues)


def _message(
    txn: Transaction,
    index: int,
    change: RowChange,
    op: Op,
    before: Row | None,
    after: Row | None,
    key: tuple[Any, ...],
    queues: int,
    half: str | None = None,
) -> Message:
    partition = key_partition(change.schema, change.table, key)
    ident = message_id(txn, index, half)
    body = {
        "id": ident,
        "scn": str(txn.scn),
        "fragment": txn.fragment,
        "last_fragment": txn.last_fragment,
        "row": index,
        "gtid": txn.gtid,
        "timestamp": txn.timestamp,
        "schema": change.schema,
        "table": change.table,
        "op": op.value,
        "before": _row(before),
        "after": _row(after),
        "key": [value_to_json(value) for value in key],
        "partition": partition,
        "key_change": half,
    }
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return Message(ident, range_index(partition, queues), partition, op.value, data, txn.timestamp)


def _row(row: Row | None) -> dict[str, Any] | None:
    return None if row is None else {name: value_to_json(value) for name, value in row.items()}
