"""Grouping source transactions into one target transaction. Pure.

A group collects what the filter chain left of consecutive source transactions, in SCN order,
and is committed as ONE target transaction together with the checkpoint row. It is closed at a
transaction boundary only, when any bound is reached::

    max_txns_per_commit       complete source transactions in the group
    max_bytes_per_commit_mb   estimated row-image bytes in the group
    max_commit_delay_ms       since the group's first transaction arrived
    caught up                 the stream has nothing more right now (latency first)

A large source transaction (fragments sharing one SCN, the last flagged ``last_fragment``) has
all its fragments in the same group: the group cannot close before its last fragment, so the
source transaction is applied atomically, as on the source. That also keeps it from being split
into several target transactions, each of which would be one more DRC-originated transaction
for the other side to recognise (the split-transaction echo of Otter issue #986).

Unless it is large: once the fragments a group holds of an unfinished source transaction pass
:data:`STREAM_PIECE_ROWS` row changes or the group's ``max_bytes``, they are written into an
open target transaction as one piece (drc.apply.streamed), and so is each later piece of that
size, the last one committed with the checkpoint: still one target transaction, but the channel
never holds more of it than one piece (:meth:`Group.piece_due`, :meth:`Group.take_tail`).

``checkpoint`` is the SCN the commit records: the last complete transaction, or the ``next`` of
a fully consumed batch (past transactions the server filtered out), whichever is later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drc.core.events import Transaction
from drc.core.scn import SCN

# A group with nothing to write is committed (to move the checkpoint) only across this much of
# the source binlog, or a binlog file or source change. Moving it on every skipped transaction
# would be a loop of its own: each checkpoint write is a skipped, DRC-originated transaction on
# the other side, whose channel would write a checkpoint, and so on forever.
IDLE_CHECKPOINT_BYTES = 4 << 20

# A source transaction whose fragments in the group hold more row changes than this (or more
# estimated bytes than the group's max_bytes) is written piece by piece, each piece about this
# size: held whole, a million-row transaction cost the channel ~0.6 kB per row of memory.
STREAM_PIECE_ROWS = 20_000


@dataclass(frozen=True, slots=True)
class GroupLimits:
    max_txns: int = 500
    max_bytes: int = 8 << 20
    max_delay_s: float = 0.1


@dataclass
class Group:
    transactions: list[Transaction] = field(default_factory=list)
    complete: int = 0  # complete source transactions with something to write
    rows: int = 0
    bytes: int = 0
    opened_at: float | None = None
    checkpoint: SCN | None = None
    epoch: str | None = None
    # The last batch ended inside this source transaction (split pages, drc.client.subscriber):
    # the group may not close before its last fragment, whatever its delay.
    inside: SCN | None = None

    def add(self, txn: Transaction, now: float) -> None:
        """Queue what the chain left of one fragment (or whole transaction) for writing."""
        if self.opened_at is None:
            self.opened_at = now
        self.transactions.append(txn)
        self.rows += len(txn.changes)
        self.bytes += estimate_bytes(txn)

    def drop(self, scn: SCN) -> None:
        """Forget the fragments taken of the unfinished source transaction ``scn``."""
        kept = [t for t in self.transactions if t.scn != scn]
        if len(kept) != len(self.transactions):
            self.transactions = kept
            self.rows = sum(len(t.changes) for t in kept)
            self.bytes = sum(estimate_bytes(t) for t in kept)

    def tail(self, scn: SCN) -> list[Transaction]:
        """The fragments of the unfinished source transaction ``scn`` the group holds (they
        come after every other transaction of the group)."""
        start = len(self.transactions)
        while start and self.transactions[start - 1].scn == scn:
            start -= 1
        return self.transactions[start:]

    def piece_due(self, scn: SCN, limits: GroupLimits) -> bool:
        """Whether the fragments held of the unfinished ``scn`` make a piece to write now."""
        tail = self.tail(scn)
        rows = sum(len(t.changes) for t in tail)
        return rows >= STREAM_PIECE_ROWS or sum(map(estimate_bytes, tail)) >= limits.max_bytes

    def take_tail(self, scn: SCN) -> list[Transaction]:
        """Take the fragments of ``scn`` out of the group (a piece written apart)."""
        tail = self.tail(scn)
        if tail:
            del self.transactions[len(self.transactions) - len(tail) :]
            self.rows -= sum(len(t.changes) for t in tail)
            self.bytes -= sum(map(estimate_bytes, tail))
        if not self.transactions:
            self.opened_at = None
        return tail

    def finished(self, txn: Transaction, wrote: bool) -> None:
        """The last fragment of ``txn`` was taken: the group may now record its SCN."""
        if self.checkpoint is None or txn.scn > self.checkpoint:
            self.checkpoint = txn.scn
        if wrote:
            self.complete += 1

    def consumed(self, next_scn: SCN, epoch: str, within: int = 0) -> bool:
        """A batch was taken whole: everything up to its ``next`` is accounted for; False if
        it ended inside the transaction at ``next`` (``within`` > 0), which is then no
        position to record."""
        self.epoch = epoch
        self.inside = next_scn if within else None
        if within:
            return False
        if self.checkpoint is None or next_scn > self.checkpoint:
            self.checkpoint = next_scn
        return True

    @property
    def writes(self) -> bool:
        return bool(self.transactions)

    def full(self, limits: GroupLimits) -> bool:
        return self.complete >= limits.max_txns or self.bytes >= limits.max_bytes

    def due(self, limits: GroupLimits, now: float) -> bool:
        opened = self.opened_at
        return opened is not None and self.inside is None and now - opened >= limits.max_delay_s

    def remaining_s(self, limits: GroupLimits, now: float) -> float | None:
        if self.opened_at is None or self.inside is not None:
            return None
        return max(0.0, limits.max_delay_s - (now - self.opened_at))

    def clear(self) -> None:
        """Forget the written transactions; the position (checkpoint, epoch) stays."""
        self.transactions = []
        self.complete = self.rows = self.bytes = 0
        self.opened_at = None


def worth_saving(saved: SCN, position: SCN) -> bool:
    """Whether moving the checkpoint without writing anything else is worth a transaction."""
    if position <= saved:
        return False
    if (position.change_id, position.log_index) != (saved.change_id, saved.log_index):
        return True
    return position.log_pos - saved.log_pos >= IDLE_CHECKPOINT_BYTES


def estimate_bytes(txn: Transaction) -> int:
    """Row bytes, roughly: strings and bytes by length, 8 for any other value; one image per
    change (the after image, or the before image of a delete)."""
    total = 0
    for change in txn.changes:
        values = change.row.values()
        total += 8 * len(values)
        for value in values:
            if type(value) is str or type(value) is bytes:
                total += len(value)
    return total
