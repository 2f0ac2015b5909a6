"""The exactly-once ledger of two-way tests: what a node's own capture holds of a schema."""

from __future__ import annotations

from drc.core.codec import decode_transaction
from drc.core.scn import SCN
from drc.node import Node


def stored_changes(node: Node, schema: str) -> dict[bool, int]:
    """Row changes of ``schema`` in this node's own capture (not DRC's heartbeats), split by
    DRC-originated (applied here from another datacenter) or not (written here)."""
    assert node.service is not None
    counts = {True: 0, False: 0}
    after = SCN(0, 0, 0, 0)
    while records := node.service.buffer.read_after(after, 1000, 16 << 20):
        for record in records:
            txn = decode_transaction(record.payload)[0]
            counts[txn.drc_originated] += sum(c.schema == schema for c in txn.changes)
        after = records[-1].scn
    return counts
