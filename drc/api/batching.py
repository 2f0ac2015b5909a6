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

Split pages (the pull's ``split``): the position is (``next``, ``within``), ``within`` > 0
inside the transaction at ``next``, its first ``within`` stored records examined (sent or
filtered out). The first transaction of a batch that does not fit ``max_bytes`` on its own is
cut after the records that fit (at least one), and counts as one against ``max_events``; a
later one that does not fit, or that a read cut, waits for the next batch. Each piece is
filtered like a whole transaction (``drops`` and ``whole`` per piece are safe: a stored
transaction's flags are the same on every fragment), and the rule above about the last
fragment cannot see earlier batches: a transaction the batch began inside always has its last
fragment sent (possibly empty), unless dropped whole. A transaction filtered out over several
reads moves the position on, so scanning it is bounded per read too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from drc.api.pullquery import Limits, Selection
from drc.core.codec import decode_transaction, encode_transaction, peek_tables, rows_omitted
from drc.core.errors import CorruptRecordError
from drc.core.events import Transaction
from drc.core.range_filter import Barrier
from drc.core.scn import SCN
from drc.eventbuffer.reader import SOURCE_SEGMENT, Record


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
    group: Sequence[Record],
    selection: Selection,
    previous: SCN | None = None,
    keep_last: bool = False,
) -> list[Item]:
    """The records to send for one stored transaction (its records, in order; with split
    pages a piece of it); ``previous`` is the SCN examined before it; ``keep_last``: its last
    fragment is sent even if nothing else of the piece is (its earlier records went out before).
    Raises Barrier (a group range's, see Selection.ranges)."""
    return [item for _index, item in picked(group, selection, previous, keep_last)]


def picked(
    group: Sequence[Record],
    selection: Selection,
    previous: SCN | None = None,
    keep_last: bool = False,
) -> list[tuple[int, Item]]:
    """:func:`select`'s items, each with the index in ``group`` of the record it is."""
    if selection.refuses_markers:
        _refuse_markers(group)
    if selection.passes_everything:
        return [(i, Item(r.scn, r.payload)) for i, r in enumerate(group)]
    try:
        whole = selection.whole([peek_tables(r.payload) for r in group])
    except CorruptRecordError:
        whole = None  # decoding says what is wrong
    if whole is not None:
        return [(i, Item(r.scn, r.payload)) for i, r in enumerate(group)] if whole else []
    txns = [decode_transaction(r.payload)[0] for r in group]
    if selection.drops(txns):
        return []
    kept: list[tuple[int, Item]] = []
    for index, (record, txn) in enumerate(zip(group, txns, strict=True)):
        narrowed = selection.narrow(txn, previous)
        # The last fragment closes the transaction for the subscriber: sent once any was.
        if (
            narrowed.changes
            or narrowed.ddl
            or narrowed.rows_omitted
            or ((kept or keep_last) and narrowed.last_fragment)
        ):
            kept.append((index, Item(record.scn, record.payload, narrowed, narrowed is not txn)))
    return kept


def _refuse_markers(records: Sequence[Record]) -> None:
    for record in records:
        if rows_omitted(record.payload):
            raise RowsOmitted(record.scn)


def transactions(records: Sequence[Record], split: bool = False) -> Iterator[Sequence[Record]]:
    """Split records (whole transactions, as read_after returns them; with ``split`` the last
    may be the first part of one, the first the rest of one) into transactions."""
    start = 0
    for i, record in enumerate(records):
        if not record.more:
            yield records[start : i + 1]
            start = i + 1
    if start != len(records):
        if not split:
            raise ValueError(f"records end inside the transaction at SCN {records[start].scn}")
        yield records[start:]


class BatchBuilder:
    """Accumulates selected transactions from successive reads until the batch is full.

    Its position is (``next``, ``within``): ``within`` > 0 only with ``split``, inside the
    transaction at ``next``, its first ``within`` stored records examined."""

    def __init__(
        self, selection: Selection, limits: Limits, after: SCN, within: int = 0, split: bool = False
    ) -> None:
        if within and not split:
            raise ValueError(f"a position inside a transaction (within={within}) needs split")
        self.selection = selection
        self.limits = limits
        self.split = split
        self.items: list[Item] = []
        self.next = after
        self.within = within
        self.transactions = 0
        self.bytes = 0
        self.examined = 0  # records looked at, sent or not
        # Not one more transaction fits (even of one byte), or one that did not fit waits for
        # the next batch. Kept up to date rather than computed: the loop over transactions
        # reads it for each.
        self.full = False
        self.barrier: Barrier | None = None  # a group range waits for other ranges here
        # Inside the transaction at ``next``: the batch began in it (its earlier records went
        # out in earlier batches), or holds records of it (counted among ``transactions``).
        self._began_inside = within > 0
        self._holds_inside = False

    def add(self, records: Sequence[Record]) -> None:
        """Take transactions from ``records`` (which follow the position) until full."""
        if records and self.selection.passes_everything and self._add_all(records):
            return
        for group in transactions(records, self.split):
            if self.full:
                return
            if self.within:
                if group[0].scn != self.next:
                    raise ValueError(f"records at {group[0].scn} do not continue {self.next}")
            elif group[0].scn <= self.next:
                raise ValueError(f"records at {group[0].scn} do not follow {self.next}")
            keep_last = bool(self.within) and (self._began_inside or self._holds_inside)
            try:
                items = picked(group, self.selection, self.next, keep_last)
            except Barrier as barrier:  # answered as it stands: nothing at or after it
                self.barrier = barrier
                self.full = True
                return
            if not self._take(group, items):
                self.full = True
                return

    def room(self) -> tuple[int, int]:
        """The most records and bytes that may still fit (what a pull that sends every stored
        record reads at once): at least one record inside a transaction the batch holds."""
        count, size = self.limits.room(self.transactions, self.bytes)
        return (max(count, 1) if self._holds_inside else count), size

    def _take(self, group: Sequence[Record], items: list[tuple[int, Item]]) -> bool:
        """Take ``group``'s ``items`` (a whole transaction, or with split a piece of one):
        all, or with split as many as fit when it is the batch's first; False when it waits
        for the next batch."""
        size = sum(len(item.record()) for _index, item in items)
        first = not self.transactions or self._holds_inside  # it is the batch's first
        count = self.transactions + (0 if self._holds_inside else 1)
        if not items or self.limits.allows(count, self.bytes + size):
            if self.split and group[-1].more and not first:
                return False  # a later transaction the read cut: it may not fit, so it waits
            self._keep(group, items, len(group), size)
            return True
        if not first:
            return False
        if not self.split or group[0].segment == SOURCE_SEGMENT:
            self._keep(group, items, len(group), size)  # the first one goes whole
            return True
        # Split: the first transaction is cut after the items that fit (at least one).
        taken = size = 0
        for _index, item in items:
            grown = size + len(item.record())
            if (taken or self.transactions) and not self.limits.allows(count, self.bytes + grown):
                break
            taken, size = taken + 1, grown
        examined = items[taken][0] if taken < len(items) else len(group)
        self._keep(group, items[:taken], examined, size)
        self.full = self.full or taken < len(items)
        return True

    def _keep(
        self, group: Sequence[Record], items: list[tuple[int, Item]], examined: int, size: int
    ) -> None:
        """Send ``items`` of ``group``, whose first ``examined`` records were looked at."""
        if items:
            self.items.extend(item for _index, item in items)
            self.transactions += 0 if self._holds_inside else 1
            self.bytes += size
        self.examined += examined
        self.next = group[-1].scn
        if examined == len(group) and not group[-1].more:
            self.within = 0
            self._began_inside = self._holds_inside = False
        else:
            self.within += examined
            self._holds_inside = self._holds_inside or bool(items)
        self._update_full()

    def _add_all(self, records: Sequence[Record]) -> bool:
        """No filter, and all of ``records`` fits: take them in one step (the hot path of
        followers and unfiltered subscribers); False to go transaction by transaction."""
        if records[0].scn <= self.next or records[-1].more or self.within:
            return False  # let the general path raise its precise error, or cut
        count = sum(1 for r in records if not r.more)
        size = sum(len(r.payload) for r in records)
        fits = self.limits.allows(self.transactions + count, self.bytes + size)
        whole = count == 1 and not self.transactions and not self.split
        if self.full or not (fits or whole):
            return False
        if self.selection.refuses_markers:
            _refuse_markers(records)
        self.items.extend(Item(r.scn, r.payload) for r in records)
        self.transactions += count
        self.bytes += size
        self._update_full()
        self.examined += len(records)
        self.next = records[-1].scn
        return True

    def _update_full(self) -> None:
        more = 0 if self._holds_inside else 1  # one more record of it, or one more transaction
        self.full = not self.limits.allows(self.transactions + more, self.bytes + 1)
