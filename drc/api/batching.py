"""What one pull returns: stored records filtered by a subscriber's selection, cut into a batch.

Pure: records in, the records to send and the SCN to continue from out; no I/O, no HTTP.

Selection, per stored transaction (its records share one SCN; fragments 0.. with the last one
flagged ``last_fragment``):

- ``skip_drc``: a transaction flagged ``drc_originated`` is dropped whole.
- ``markers``: without ``skip_drc``, a DRC-originated transaction stored without its rows
  (``rows_omitted``) is sent as stored, whatever the ``tables`` filter (its tables are not
  known); without ``markers`` meeting one raises :class:`RowsOmitted` (the API's 409).
- ``tables``: each fragment keeps the row changes of matching tables and the DDL that names a
  matching table (:func:`drc.core.selection.selects_ddl`), or, naming no table (CREATE DATABASE,
  GRANT, ...), runs in a database the filter could match. Fragments left empty are dropped, but
  once any fragment of the transaction is kept its last fragment is sent too, possibly empty, so
  the subscriber knows the transaction is complete. Kept fragments keep their stored
  ``fragment`` numbers, so a filtered stream may skip numbers.
- A transaction with nothing left is dropped; with a filter that includes the buffer's empty
  progress markers (the replicator stores one for a stretch its capture filter emptied). With no
  filter at all nothing is dropped: followers copy the buffer record for record.

A record the selection leaves as it was is passed through as stored (no decode when nothing
needs filtering, no re-encode ever for an unchanged record). A transaction whose records all
have row changes of matching tables only, and no DDL, is recognised from a peek at its table
names and flags (:func:`drc.core.codec.peek_tables`), without decoding its rows; like the
unfiltered path, it then relies on the buffer's frame CRC, and the subscriber's decode checks
the record.

Batching counts whole transactions: at most ``max_events`` of them and ``max_bytes`` of record
bytes (codec bytes as sent in the records form), except that the first transaction is always
sent whole, however big. ``next`` is the SCN of the last transaction examined, sent or dropped,
so a subscriber whose tables are quiet still moves on; it never passes a transaction that was
examined but left out because the batch was full.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from drc.core.codec import decode_transaction, encode_transaction, peek_tables, rows_omitted
from drc.core.errors import CorruptRecordError
from drc.core.events import SchemaChange, Transaction
from drc.core.scn import SCN
from drc.core.selection import selects_ddl
from drc.core.tablefilter import TableFilter
from drc.eventbuffer.reader import Record


@dataclass(frozen=True, slots=True)
class Selection:
    """Which transactions and rows a subscriber wants."""

    tables: TableFilter = TableFilter()
    skip_drc: bool = False
    markers: bool = False  # takes records stored without their rows (drc_applied=marker)

    @property
    def refuses_markers(self) -> bool:
        return not (self.skip_drc or self.markers)

    @property
    def passes_everything(self) -> bool:
        return self.tables.matches_everything and not self.skip_drc

    def keeps_ddl(self, change: SchemaChange) -> bool:
        return selects_ddl(self.tables, change)

    def narrow(self, txn: Transaction) -> Transaction:
        """``txn`` with only the wanted row changes and DDL (``txn`` itself if all are)."""
        if self.tables.matches_everything:
            return txn
        match = self.tables.matches
        changes = tuple(c for c in txn.changes if match(c.schema, c.table))
        ddl = tuple(d for d in txn.ddl if self.keeps_ddl(d))
        if len(changes) == len(txn.changes) and len(ddl) == len(txn.ddl):
            return txn
        return dataclasses.replace(txn, changes=changes, ddl=ddl)


class RowsOmitted(Exception):
    """A record stored without its rows at ``scn`` would be sent to a subscriber that did
    not say it takes such records."""

    def __init__(self, scn: SCN) -> None:
        super().__init__(f"the transaction at SCN {scn} is stored without its rows")
        self.scn = scn


@dataclass(frozen=True, slots=True)
class Limits:
    max_events: int
    max_bytes: int

    def __post_init__(self) -> None:
        if self.max_events < 1 or self.max_bytes < 1:
            raise ValueError(f"limits must be >= 1, got {self.max_events}, {self.max_bytes}")


class Item:
    """One record to send: the stored bytes, or a narrowed copy of the transaction."""

    __slots__ = ("scn", "_stored", "_txn", "_changed", "_record")

    def __init__(
        self, scn: SCN, stored: bytes, txn: Transaction | None = None, changed: bool = False
    ) -> None:
        self.scn = scn
        self._stored = stored
        self._txn = txn
        self._changed = changed
        self._record: bytes | None = None if changed else stored

    @property
    def changed(self) -> bool:
        return self._changed

    def record(self) -> bytes:
        """The codec record to send: the stored one unless the selection changed it."""
        if self._record is None:
            assert self._txn is not None
            self._record = encode_transaction(self._txn)
        return self._record

    def transaction(self) -> Transaction:
        if self._txn is None:
            self._txn = decode_transaction(self._stored)[0]
        return self._txn


def select(group: Sequence[Record], selection: Selection) -> list[Item]:
    """The records to send for one stored transaction (its records, in order)."""
    if selection.refuses_markers:
        _refuse_markers(group)
    if selection.passes_everything:
        return [Item(r.scn, r.payload) for r in group]
    whole = _whole(group, selection)
    if whole is not None:
        return whole
    txns = [decode_transaction(r.payload)[0] for r in group]
    if selection.skip_drc and any(t.drc_originated for t in txns):
        return []
    kept: list[Item] = []
    for record, txn in zip(group, txns, strict=True):
        narrowed = selection.narrow(txn)
        # The last fragment closes the transaction for the subscriber: sent once any was.
        if (
            narrowed.changes
            or narrowed.ddl
            or narrowed.rows_omitted
            or (kept and narrowed.last_fragment)
        ):
            kept.append(Item(record.scn, record.payload, narrowed, narrowed is not txn))
    return kept


def _refuse_markers(records: Sequence[Record]) -> None:
    for record in records:
        if rows_omitted(record.payload):
            raise RowsOmitted(record.scn)


def _whole(group: Sequence[Record], selection: Selection) -> list[Item] | None:
    """The common case without decoding rows: [] for a DRC-originated transaction to skip,
    every record as stored when each has row changes, all of matching tables, and no DDL.
    None otherwise (or for anything odd): :func:`select` decodes and decides."""
    try:
        peeks = [peek_tables(r.payload) for r in group]
    except CorruptRecordError:
        return None
    if selection.skip_drc and any(drc for drc, _tables, _ddl in peeks):
        return []
    match = selection.tables.matches
    for _drc, tables, ddl in peeks:
        if ddl or not tables or not all(match(db, table) for db, table in tables):
            return None
    return [Item(r.scn, r.payload) for r in group]


def transactions(records: Sequence[Record]) -> Iterator[Sequence[Record]]:
    """Split records (whole transactions, as read_after returns them) into transactions."""
    start = 0
    for i, record in enumerate(records):
        if not record.more:
            yield records[start : i + 1]
            start = i + 1
    if start != len(records):
        raise ValueError(f"records end inside the transaction at SCN {records[start].scn}")


class BatchBuilder:
    """Accumulates selected transactions from successive reads until the batch is full."""

    def __init__(self, selection: Selection, limits: Limits, after: SCN) -> None:
        self.selection = selection
        self.limits = limits
        self.items: list[Item] = []
        self.next = after
        self.transactions = 0
        self.bytes = 0
        self.examined = 0  # records looked at, sent or not
        self._overflow = False

    @property
    def full(self) -> bool:
        return (
            self._overflow
            or self.transactions >= self.limits.max_events
            or self.bytes >= self.limits.max_bytes
        )

    def add(self, records: Sequence[Record]) -> None:
        """Take whole transactions from ``records`` (which follow ``next``) until full."""
        if records and self.selection.passes_everything and self._add_all(records):
            return
        for group in transactions(records):
            if self.full:
                return
            if group[0].scn <= self.next:
                raise ValueError(f"records at {group[0].scn} do not follow {self.next}")
            items = select(group, self.selection)
            if items and not self._fits(items):
                self._overflow = True
                return
            self.examined += len(group)
            self.next = group[-1].scn

    def _add_all(self, records: Sequence[Record]) -> bool:
        """No filter, and all of ``records`` fits: take them in one step (the hot path of
        followers and unfiltered subscribers); False to go transaction by transaction."""
        if records[0].scn <= self.next or records[-1].more:
            return False  # let the general path raise its precise error
        count = sum(1 for r in records if not r.more)
        size = sum(len(r.payload) for r in records)
        limits = self.limits
        fits = (
            self.transactions + count <= limits.max_events and self.bytes + size <= limits.max_bytes
        )
        if self.full or not (fits or (count == 1 and not self.transactions)):
            return False
        if self.selection.refuses_markers:
            _refuse_markers(records)
        self.items.extend(Item(r.scn, r.payload) for r in records)
        self.transactions += count
        self.bytes += size
        self.examined += len(records)
        self.next = records[-1].scn
        return True

    def _fits(self, items: list[Item]) -> bool:
        size = sum(len(item.record()) for item in items)
        limits = self.limits
        over = self.transactions + 1 > limits.max_events or self.bytes + size > limits.max_bytes
        if self.transactions and over:
            return False
        self.items.extend(items)
        self.transactions += 1
        self.bytes += size
        return True
