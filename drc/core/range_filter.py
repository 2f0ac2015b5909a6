"""One consumer-group range's share of a transaction, and the barrier that keeps per-key order
when an update moves a row's key to another range.

A row change belongs to the range holding its logical partition (drc.core.partitions):
``key_partition`` of its key, or ``table_partition`` of its table. An update whose before-key
and after-key fall in different ranges is split like a row filter's move
(drc.core.rowfilter.filtered): a DELETE of the before image in the old key's range, an INSERT
of the after image in the new key's range.

Ordering across such a move (the barrier): the new range's pull does not return the
transaction at SCN ``s`` that moved a key into it, nor anything after it, until every range a
key moved from has its checkpoint at or past the transaction stored right before ``s``: every
earlier change of the old key has been delivered and committed. The DELETE in the old range and
the INSERT in the new one are parts of one source transaction (same SCN) and are delivered
concurrently; waiting for the old range to pass ``s`` itself could deadlock two ranges that
swap keys in one transaction. DDL is not sent to group ranges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drc.core.events import Op, RowChange, Transaction
from drc.core.partitions import key_partition, range_index, row_key, table_partition
from drc.core.scn import SCN

# (schema, table, scn) -> the table's key columns at that SCN (empty: no primary key, every
# column keys the row)
KeyColumns = Callable[[str, str, SCN], Sequence[str]]


class Barrier(Exception):
    """The transaction at ``scn`` moved a key in from ``ranges``, whose checkpoints are before
    ``needed`` (the SCN stored before it): the pull stops before it."""

    def __init__(self, scn: SCN, ranges: Sequence[int], needed: SCN) -> None:
        super().__init__(f"waiting for ranges {list(ranges)} to commit {needed}")
        self.scn = scn
        self.ranges = tuple(ranges)
        self.needed = needed


@dataclass
class RangeFilter:
    """Narrow transactions to range ``index`` of ``count``; ``checkpoints`` are the other
    ranges' committed positions when the pull started (a later pull sees newer ones)."""

    index: int
    count: int
    by_key: bool
    key_columns: KeyColumns
    checkpoints: Mapping[int, SCN]
    found: Barrier | None = None  # the barrier that stopped the pull, if one did
    _keys: dict[tuple[str, str], Sequence[str]] = dataclasses.field(default_factory=dict)

    def narrow(self, txn: Transaction, previous: SCN) -> Transaction:
        """``txn`` with only this range's row changes and no DDL; raises Barrier when a key
        moved in from a range whose checkpoint is before ``previous``."""
        kept: list[RowChange] = []
        sources: set[int] = set()
        for change in txn.changes:
            part = self._part(change, txn.scn, sources)
            if part is not None:
                kept.append(part)
        waiting = sorted(i for i in sources if self.checkpoints.get(i, previous) < previous)
        if waiting:
            self.found = Barrier(txn.scn, waiting, previous)
            raise self.found
        unchanged = len(kept) == len(txn.changes) and all(
            k is c for k, c in zip(kept, txn.changes, strict=True)
        )
        if unchanged and not txn.ddl:
            return txn
        return dataclasses.replace(txn, changes=tuple(kept), ddl=())

    def _part(self, change: RowChange, scn: SCN, sources: set[int]) -> RowChange | None:
        if not self.by_key:
            where = range_index(table_partition(change.schema, change.table), self.count)
            return change if where == self.index else None
        before = None if change.before is None else self._range(change, change.before, scn)
        after = None if change.after is None else self._range(change, change.after, scn)
        mine_before, mine_after = before == self.index, after == self.index
        if change.op is not Op.UPDATE or before == after:
            return change if mine_before or mine_after else None
        if mine_after:
            assert before is not None
            sources.add(before)
            return RowChange(change.schema, change.table, Op.INSERT, None, change.after)
        if mine_before:
            return RowChange(change.schema, change.table, Op.DELETE, change.before, None)
        return None

    def _range(self, change: RowChange, image: Mapping[str, Any], scn: SCN) -> int:
        table = (change.schema, change.table)
        columns = self._keys.get(table)
        if columns is None:
            columns = self._keys[table] = tuple(self.key_columns(change.schema, change.table, scn))
        key = row_key(image, columns)
        return range_index(key_partition(change.schema, change.table, key), self.count)
