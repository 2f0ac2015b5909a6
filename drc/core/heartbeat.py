"""Heartbeats and lag: what makes a channel's lag true whether or not users write.

    drc.heartbeat (datacenter VARCHAR(64) PRIMARY KEY, beat_ms BIGINT NOT NULL)

Each replicator upserts its own datacenter's row in its own source every
``[replicator] heartbeat_interval_s`` (drc.replicator.heartbeat), on a plain session: the write
is an ordinary, non-DRC-originated source transaction, captured whatever the table filter
(markers.always_captured) and served like any other. Its SCN says "everything the source
committed before ``beat_ms`` is in the stream up to here".

Apply: a channel never writes that row on its target (DRC's own tables are never applied as user
data), it only takes ``beat_ms`` as the source time of that position. Nothing is written for it
on the other side, so the other datacenter's replicator has nothing to capture: loop-free. (The
checkpoint a channel saves now and then is DRC-originated, as always, and never sent back.)

Lag of a channel = now - source time of the newest change the target has applied (committed,
or found to need no write), where a change's source time is its heartbeat's ``beat_ms``
(millisecond resolution) or else its binlog commit time (whole seconds). The time only moves
forward, so an older-looking commit time after a heartbeat cannot make the lag jump.
"""

from __future__ import annotations

from drc.core.events import Transaction
from drc.core.markers import is_heartbeat_table

COLUMN_DATACENTER = "datacenter"
COLUMN_BEAT_MS = "beat_ms"


def beat_ms(txn: Transaction) -> int | None:
    """The newest heartbeat time a transaction carries, if it writes a heartbeat row."""
    found = None
    for change in txn.changes:
        if is_heartbeat_table(change.schema, change.table) and change.after is not None:
            value = change.after.get(COLUMN_BEAT_MS)
            if isinstance(value, int) and (found is None or value > found):
                found = value
    return found


def source_time_ms(txn: Transaction) -> int:
    """When the source committed ``txn``: its heartbeat time, or its binlog commit time."""
    beat = beat_ms(txn)
    return beat if beat is not None else txn.timestamp * 1000


def lag_seconds(now_s: float, source_ms: int | None) -> float | None:
    """now - source time (never negative: clocks of two hosts differ a little); None unknown."""
    if source_ms is None:
        return None
    return max(0.0, now_s - source_ms / 1000)
