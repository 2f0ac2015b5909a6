"""Names shared by the replicator and the apply side.

An apply channel writes its checkpoint row into ``drc.checkpoint`` inside every target transaction
it commits. That write is the loop marker: the target's own replicator flags any transaction
touching this table as DRC-originated, and channels never send such a transaction back.
"""

CHECKPOINT_SCHEMA = "drc"
CHECKPOINT_TABLE = "checkpoint"
# A parallel channel's parts (drc.apply.applied_set) commit without the checkpoint row: their
# row in this table marks them instead.
APPLIED_PARTS_TABLE = "applied_parts"


def is_marker_table(schema: str, table: str) -> bool:
    """A table only apply channels write, so a transaction writing it is DRC-originated."""
    return schema == CHECKPOINT_SCHEMA and table in (CHECKPOINT_TABLE, APPLIED_PARTS_TABLE)


# Tombstone tables (drc.conflicts.tombstones): an application's delete of a row in a
# last-writer-wins table also writes ``drc.tomb_*`` through a trigger. The replicator always
# captures those rows, whatever its table filter, because the other datacenters need them to
# order that delete.
TOMBSTONE_PREFIX = "tomb_"


def is_tombstone_table(schema: str, table: str) -> bool:
    return schema == CHECKPOINT_SCHEMA and table.startswith(TOMBSTONE_PREFIX)


# The heartbeat row (drc.core.heartbeat): each replicator upserts its datacenter's row every
# second on a plain session. Captured whatever the table filter, never applied as user data.
HEARTBEAT_TABLE = "heartbeat"


def is_heartbeat_table(schema: str, table: str) -> bool:
    return schema == CHECKPOINT_SCHEMA and table == HEARTBEAT_TABLE


def always_captured(schema: str, table: str) -> bool:
    """DRC's own rows the other datacenters need, captured whatever the table filter."""
    return is_tombstone_table(schema, table) or is_heartbeat_table(schema, table)
