"""Put the fragments of large transactions back together, for consumers that want whole ones.

The stream delivers a large transaction as several Transactions sharing one SCN, numbered by
``fragment`` and ending with ``last_fragment``. A consumer that applies changes as they come
should apply a transaction only when its last fragment arrives (and resume after its SCN only
then). :func:`assemble` does that for simple consumers, at a memory cost.

Memory: assemble holds every fragment of *one* transaction at a time, i.e. up to the largest
source transaction (a million-row bulk insert is a million row images in memory). ``max_changes``
bounds that: a transaction with more row changes raises FragmentError instead of exhausting
memory; consume the fragments directly to stream such transactions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from drc.client.errors import FragmentError
from drc.core.events import Transaction

DEFAULT_MAX_CHANGES = 1_000_000


def assemble(
    transactions: Iterable[Transaction], *, max_changes: int = DEFAULT_MAX_CHANGES
) -> Iterator[Transaction]:
    """Yield each transaction whole (fragment 0, last_fragment True), in stream order.

    A complete transaction is yielded as soon as its last fragment is read, without reading
    ahead, so wrapping ``Subscriber.transactions()`` keeps its ack-after-the-batch guarantee.
    Raises FragmentError for fragments out of order, a transaction that ends without its last
    fragment, or one with more than ``max_changes`` row changes.
    """
    parts: list[Transaction] = []
    changes = 0
    for txn in transactions:
        if parts:
            _check_follows(parts[-1], txn)
        elif txn.last_fragment:
            yield txn  # the common case: not fragmented, nothing to copy
            continue
        changes += len(txn.changes)
        if changes > max_changes:
            raise FragmentError(
                f"transaction {txn.scn} has more than {max_changes} row changes; raise "
                "max_changes or consume its fragments one by one instead of assembling"
            )
        parts.append(txn)
        if txn.last_fragment:
            yield merge(parts)
            parts, changes = [], 0
    if parts:
        raise FragmentError(
            f"the stream ended inside transaction {parts[0].scn} after fragment "
            f"{parts[-1].fragment}, before its last fragment"
        )


def merge(parts: list[Transaction]) -> Transaction:
    """One transaction from all fragments of one SCN, in order (the last one included)."""
    last = parts[-1]
    return Transaction(
        scn=last.scn,
        server_id=last.server_id,
        gtid=last.gtid,
        timestamp=last.timestamp,
        changes=tuple(c for part in parts for c in part.changes),
        ddl=tuple(d for part in parts for d in part.ddl),
        drc_originated=any(part.drc_originated for part in parts),
        rows_omitted=any(part.rows_omitted for part in parts),
        fragment=0,
        last_fragment=True,
        gtid_position=last.gtid_position,
    )


def _check_follows(prev: Transaction, txn: Transaction) -> None:
    if txn.scn != prev.scn:
        raise FragmentError(
            f"transaction {prev.scn} stopped at fragment {prev.fragment} without its last "
            f"fragment; {txn.scn} came next"
        )
    if txn.fragment <= prev.fragment:
        raise FragmentError(
            f"fragment {txn.fragment} of {txn.scn} arrived after fragment {prev.fragment}"
        )
