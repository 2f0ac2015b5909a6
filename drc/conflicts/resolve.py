"""How a conflict is resolved: the four policies, each a choice between the two rows. Pure.

drc.conflicts.engine detects a conflict and asks here which row stays; it then writes the
choice and logs it with the reason given here (drc.conflicts.log: DECISIONS).

- ``lww``: the newer version wins. A row's version is ``(its timestamp column, datacenter
  rank)``; a delete's is ``(when it was deleted, rank)``, taken from its tombstone
  (drc.conflicts.tombstones: the origin's delete trigger writes it in the deleting transaction,
  so it travels with the delete; a delete without one is dated by derived_delete_stamp). Equal
  timestamps go to the datacenter listed first in ``conflicts.priority``; the target's row
  counts as written by this datacenter, a tombstone by the datacenter it names. A delete is
  never undone by an older update, and an older delete never removes a newer row.
- ``resolver``: ``module:function(local, before, after, context)`` returns the row to keep (a
  mapping with the same key) or None to delete it. An exception stops the channel; the change
  is not skipped, it is decided again after a restart.
- ``overwrite`` (incoming wins) and ``keep`` (local wins). Given to both sides they swap rows;
  ``keep`` on one datacenter with ``overwrite`` on the other makes the first the authority.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from drc.conflicts.rules import (
    ConflictContext,
    Ranks,
    ResolverError,
    Row,
    TablePolicy,
    Version,
    stamp_key,
)
from drc.core.events import Op, RowChange
from drc.core.target_table import TargetTable, key_of
from drc.mysql import sql

# What stays: a decision of drc.conflicts.log.DECISIONS, why (one sentence for the log), and
# the resolver's own row when the decision is "custom".
Choice = tuple[str, str, Row | None]


def fixed(policy: str) -> Choice:
    """``overwrite`` or ``keep``: the same side always wins."""
    if policy == "overwrite":
        return "incoming", "policy overwrite: the incoming change always wins", None
    return "local", "policy keep: the local row always wins", None


def lww(
    incoming: Version,
    local: Version | None,
    ranks: Ranks,
    *,
    column: str,
    deleting: bool,
    row_present: bool,
) -> Choice:
    """The newer of the incoming version and the local one (the row's, or its tombstone's
    when ``row_present`` is false; None: neither)."""
    wins = ranks.newer(incoming, local)
    what = "deleted at" if deleting else f"{column}"
    mine = "local row"
    if local is None:
        return (
            "incoming",
            f"no local row or tombstone: the incoming {what} {_text(incoming.stamp)} wins",
            None,
        )
    if not row_present:
        mine = f"local delete (by {local.datacenter})"
        theirs = f"{mine} at {_text(local.stamp)}"
    else:
        theirs = f"{mine} {column} {_text(local.stamp)}"
    if stamp_key(incoming.stamp) == stamp_key(local.stamp):
        winner = incoming.datacenter if wins else local.datacenter
        reason = (
            f"equal timestamps {_text(incoming.stamp)}: {winner} comes first in conflicts.priority"
        )
    elif wins:
        reason = f"incoming {what} {_text(incoming.stamp)} is newer than the {theirs}"
    else:
        reason = f"the {theirs} is newer than the incoming {what} {_text(incoming.stamp)}"
    return ("incoming" if wins else "local"), reason, None


def by_resolver(
    policy: TablePolicy,
    table: TargetTable,
    key: tuple[Any, ...],
    change: RowChange,
    local: dict[str, Any] | None,
    context: ConflictContext,
) -> Choice:
    """What the user's resolver chose for the conflict on ``key`` (``local``: the target's row,
    None when there is none). ResolverError when it raised or returned something unusable."""
    assert policy.resolver is not None
    before, after = _adapted(change.before), _adapted(change.after)
    try:
        result = policy.resolver(local, before, after, context)
    except Exception as exc:
        raise ResolverError(
            f"conflict resolver {policy.resolver_name} failed on {table.name} key "
            f"{context.key} at SCN {context.scn}: {type(exc).__name__}: {exc}. The channel "
            "stopped without applying it; fix the resolver and restart"
        ) from exc
    name = policy.resolver_name
    if result is None:
        if local is None:
            return "local", f"resolver {name} chose no row, and there is none", None
        if change.op is Op.DELETE:
            return "incoming", f"resolver {name} chose the incoming delete", None
        return "delete", f"resolver {name} chose to delete the row", None
    if not isinstance(result, Mapping):
        raise ResolverError(
            f"conflict resolver {name} returned {type(result).__name__} for {table.name} "
            f"key {context.key}: it must return a row (a mapping) or None for a delete"
        )
    bound = sql.row_values(table.primary_key, key, table.float_columns)
    if _matched_key(table, result) != bound:
        raise ResolverError(
            f"conflict resolver {name} returned a row with another primary key for "
            f"{table.name} key {context.key}: it must keep the key"
        )
    if local is not None and dict(result) == local:
        return "local", f"resolver {name} kept the local row", None
    if after is not None and dict(result) == after:
        return "incoming", f"resolver {name} chose the incoming row", None
    return "custom", f"resolver {name} wrote its own row", result


def _adapted(row: Row | None) -> dict[str, Any] | None:
    return None if row is None else {k: sql.adapt(v) for k, v in row.items()}


def _matched_key(table: TargetTable, row: Row) -> tuple[Any, ...] | None:
    """The key of ``row`` as a lookup binds it (drc.mysql.sql.row_values)."""
    try:
        return sql.row_values(table.primary_key, key_of(table, row), table.float_columns)
    except KeyError:
        return None


def _text(value: Any) -> str:
    if isinstance(value, dt.datetime):
        return value.isoformat(" ", timespec="microseconds" if value.microsecond else "seconds")
    return "NULL" if value is None else str(value)
