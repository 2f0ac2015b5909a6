"""Conflicts: write conflicts between datacenters, detected and resolved alike on every side.

Beside apply, below it: a streaming channel and a bulk catch-up executor reach these decisions
through apply's decision engine (drc.apply.engine), which plans the writes of the changes they
resolve. Nothing here imports apply; SQL text is drc.mysql.sql's. The decisions are pure; only
target.py reaches the database, through the session it is given.

    engine.py      detection: each change against the target's row for its key; the kind of
                   conflict, the resolved changes, the log entries and tombstones (start here)
    policies.py    every policy declared once: its name, the settings it takes, what the rest
                   of DRC asks of it, what it decides; which table has which (a new policy
                   goes here)
    rules.py       row versions and the lww tie-break, user resolvers and what they are told
    counters.py    counter columns (delta_columns): the amounts a change added, the write
                   that adds them, the sums' checks
    probes.py      the target rows detection reads and locks: their SQL, batched, and answers
    log.py         the drc.conflicts table: a conflict's row written, rows read back
    tombstones.py  when a row of a lww table was deleted: companion tables and triggers
    target.py      the edge: DRC's tables and triggers set up, probes run, old entries purged
    settings.py    the [conflicts] config section (drc.config loads it through this package,
                   so this file imports nothing)

The lww guard (drc.apply.lww_guard) is an apply channel and stays in apply.
"""
