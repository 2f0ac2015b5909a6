"""What one pull returns: stored records filtered by a subscriber's selection, cut into a batch.

Pure: records in, the records to send and the SCN to continue from out; no I/O, no HTTP.

The selection and the limits come from the pull's query (:class:`drc.api.pullquery.Selection`,
:class:`drc.api.pullquery.Limits`), which declares what each parameter selects or bounds; this
module applies them to whole transactions. Fragments the selection leaves empty are dropped, but
once any fragment of a transaction is kept its last fragment is sent too, possibly empty, so the
subscriber knows the transaction is complete. Kept fragments keep their stored ``fragment``
numbers, so a filtered stream may skip numbers. A transaction with nothing left is dropped; with
a filter that includes the buffer's empty progress markers (the replicator stores one for a
stretch its capture filter emptied). With no filter at all nothing is dropped: followers copy
the buffer record for record.

A record the selection leaves as it was is passed through as stored (no decode when nothing
needs filtering, no re-encode ever for an unchanged record). A transaction the selection decides
from a peek at its table names and flags (:func:`drc.core.codec.peek_tables`,
:meth:`Selection.whole`) is not decoded; like the unfiltered path, it then relies on the
buffer's frame CRC, and the subscriber's decode checks the record.

Batching counts whole transactions and their record bytes (codec bytes as sent in the records
form) against the limits, except that the first transaction is always sent whole, however big.
``next`` is the SCN of the last transaction examined, sent or dropped, so a subscriber whose
tables are quiet still moves on; it never passes a transaction that was examined but left out
because the batch was full.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from drc.api.pullquery import Limits, Selection
from drc.core.codec import decode_transaction, encode_transaction, peek_tables, rows_omitted
from drc.core.errors import CorruptRecordError
from drc.core.events import Transaction
from drc.core.range_filter import Barrier
from drc.core.scn import SCN
from drc.eventbuffer.reader import Record


class RowsOmitted(Exception):
    """A record stored without its rows at ``scn`` would be sent to a subscriber that did
    not say it takes such records."""

    def __init__(self, scn: SCN) -> None:
        super().__init__(f"the transaction at SCN {scn} is stored without its rows")
        self.scn = scn


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


def select(
    group: Sequence[Record], selection: Selection, previous: SCN | None = None
) -> list[Item]:
    """The records to send for one stored transaction (its records, in order); ``previous``
    is the SCN examined before it. Raises Barrier (a group range's, see Selection.ranges)."""
    if selection.refuses_markers:
        _refuse_markers(group)
    if selection.passes_everything:
        return [Item(r.scn, r.payload) for r in group]
    try:
        whole = selection.whole([peek_tables(r.payload) for r in group])
    except CorruptRecordError:
        whole = None  # decoding says what is wrong
    if whole is not None:
        return [Item(r.scn, r.payload) for r in group] if whole else []
    txns = [decode_transaction(r.payload)[0] for r in group]
    if selection.drops(txns):
        return []
    kept: list[Item] = []
    for record, txn in zip(group, txns, strict=True):
        narrowed = selection.narrow(txn, previous)
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
        # Not one more transaction fits (even of one byte), or one that did not fit waits for
        # the next batch. Kept up to date rather than computed: the loop over transactions
        # reads it for each.
        self.full = False
        self.barrier: Barrier | None = None  # a group range waits for other ranges here

    def add(self, records: Sequence[Record]) -> None:
        """Take whole transactions from ``records`` (which follow ``next``) until full."""
        if records and self.selection.passes_everything and self._add_all(records):
            return
        for group in transactions(records):
            if self.full:
                return
            if group[0].scn <= self.next:
                raise ValueError(f"records at {group[0].scn} do not follow {self.next}")
            try:
                items = select(group, self.selection, self.next)
            except Barrier as barrier:  # answered as it stands: nothing at or after it
                self.barrier = barrier
                self.full = True
                return
            if items and not self._fits(items):
                self.full = True
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
        fits = self.limits.allows(self.transactions + count, self.bytes + size)
        if self.full or not (fits or (count == 1 and not self.transactions)):
            return False
        if self.selection.refuses_markers:
            _refuse_markers(records)
        self.items.extend(Item(r.scn, r.payload) for r in records)
        self._count(count, size)
        self.examined += len(records)
        self.next = records[-1].scn
        return True

    def _fits(self, items: list[Item]) -> bool:
        size = sum(len(item.record()) for item in items)
        if self.transactions and not self.limits.allows(self.transactions + 1, self.bytes + size):
            return False
        self.items.extend(items)
        self._count(1, size)
        return True

    def _count(self, transactions: int, size: int) -> None:
        self.transactions += transactions
        self.bytes += size
        self.full = not self.limits.allows(self.transactions + 1, self.bytes + 1)
