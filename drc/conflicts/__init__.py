"""Conflicts: write conflicts between datacenters detected and resolved the same way everywhere.

Beside apply, below it: an apply channel (drc.apply) and a bulk catch-up feed their decision
engine (drc.apply.engine) through this package; nothing here imports apply but SQL text
(drc.apply.sql, until the MySQL package of issue 25, item 4, takes it). The decisions are pure;
only target.py reaches the database, through the session it is given.

    engine.py      detection: each change against the target's row for its key -> kind
                   of conflict, its resolution, the log entries and tombstones (start here)
    rules.py       table policies, user resolvers, row versions and the lww tie-break
    log.py         the drc.conflicts table: its rows written and read back
    tombstones.py  when a row of a lww table was deleted: companion tables and triggers
    target.py      the edge: DRC's tables and triggers set up, probes run, old entries purged
"""
