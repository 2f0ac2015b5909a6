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

    def finished(self, txn: Transaction, wrote: bool) -> None:
        """The last fragment of ``txn`` was taken: the group may now record its SCN."""
        if self.checkpoint is None or txn.scn > self.checkpoint:
            self.checkpoint = txn.scn
        if wrote:
            self.complete += 1

    def consumed(self, next_scn: SCN, epoch: str) -> None:
        """A batch was taken whole: everything up to its ``next`` is accounted for."""
        if self.checkpoint is None or next_scn > self.checkpoint:
            self.checkpoint = next_scn
        self.epoch = epoch

    @property
    def writes(self) -> bool:
        return bool(self.transactions)

    def full(self, limits: GroupLimits) -> bool:
        return self.complete >= limits.max_txns or self.bytes >= limits.max_bytes

    def due(self, limits: GroupLimits, now: float) -> bool:
        return self.opened_at is not None and now - self.opened_at >= limits.max_delay_s

    def remaining_s(self, limits: GroupLimits, now: float) -> float | None:
        if self.opened_at is None:
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
