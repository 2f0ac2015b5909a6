"""Names shared by the replicator and the apply side.

An apply channel writes its checkpoint row into ``drc.checkpoint`` inside every target transaction
it commits. That write is the loop marker: the target's own replicator flags any transaction
touching this table as DRC-originated, and channels never send such a transaction back.
"""

CHECKPOINT_SCHEMA = "drc"
CHECKPOINT_TABLE = "checkpoint"
