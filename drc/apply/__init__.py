"""Apply: write a remote datacenter's change stream into the local database, exactly once.

    channel.py     the loop: subscribe, filter, group, write, checkpoint (start here)
    handover.py    the catch-up lease each target transaction reads; an interrupted run finished
    ddl.py         replicated DDL, each statement run exactly once (ddl_journal.py)
    actions.py     an operator's pause, skip, rewind, reload, in the channel's thread
    lease.py       the channel's lease, taken by bulk catch-up and snapshots (a catch-up's run:
                   catchup_journal.py)
    stages.py      the filter chain (loop suppression, tables, mapping, idempotency, conflicts)
    group.py       many source transactions -> one target transaction, and its bounds
    engine.py      the decisions: row changes + the target's rows -> writes, conflict log
                   (conflicts are detected and resolved by drc.conflicts, beside apply)
    plan.py        row changes -> idempotent, grouped writes
    sql.py         SQL text and bound values (pure)
    checkpoint.py  the drc.checkpoint row
    retry.py       which errors are retried, and how
    target.py      the Target protocol: what apply needs from the database it writes into
    sink.py        the pymysql adapter (the only module here that talks to the target)
    service.py     build_channel(s)(config): the composition root's apply part
    lww_guard.py   lww triggers and tombstones on the datacenter a table is created on

``python -m drc.apply --config FILE`` runs the channels of a config on their own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drc.apply.channel import ApplyChannel
    from drc.apply.service import build_channel, build_channels, default_subscriber, run_channels
    from drc.apply.sink import TargetSettings
    from drc.apply.stats import ApplyStats

# Loaded on first use: a process that needs only drc.apply.sql (a Spark worker of drc verify)
# does not pay for the channel's imports (HTTP client, conflict handling).
_HOMES = {
    "ApplyChannel": "drc.apply.channel",
    "ApplyStats": "drc.apply.stats",
    "TargetSettings": "drc.apply.sink",
    "build_channel": "drc.apply.service",
    "build_channels": "drc.apply.service",
    "default_subscriber": "drc.apply.service",
    "run_channels": "drc.apply.service",
}

__all__ = [
    "ApplyChannel",
    "ApplyStats",
    "TargetSettings",
    "build_channel",
    "build_channels",
    "default_subscriber",
    "run_channels",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'drc.apply' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
