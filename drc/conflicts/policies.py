"""Every conflict policy, declared once in :data:`POLICIES`: its name, the settings it takes,
what the rest of DRC asks of it, and what it decides. Pure.

A new policy is one more :class:`Policy` here (and its words for users in
docs/configuration.md); no other module names a policy. The config checks
a ``[[conflicts.tables]]`` entry against its declaration (drc.conflicts.settings), the conflict
log accepts its name (drc.conflicts.log), and drc.conflicts.engine, on a conflict, hands its
``decide`` the conflict at hand (:class:`Conflict`), then writes the :data:`Choice` it returns
and logs it with the reason given here (drc.conflicts.log: DECISIONS).

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
- ``off``: no detection; the table's changes apply as they come (an entry that exempts tables
  a later, wider pattern would give a policy).

Counter columns (``delta_columns``, with lww, overwrite and keep): what a change did to such a
column is added to the local value, whichever way the policy decides the row's other columns,
so concurrent increments on every datacenter all count (drc.conflicts.counters).

Below the table: a table's policy as configured (:class:`TablePolicy`) and which table has
which (:class:`Policies`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from drc.conflicts import tombstones
from drc.conflicts.rules import (
    ConflictContext,
    Ranks,
    ResolverError,
    ResolverFn,
    Row,
    Version,
    load_resolver,
    stamp_key,
)
from drc.core.events import Op, RowChange
from drc.core.tablefilter import TablePattern
from drc.core.target_table import TargetTable, key_of
from drc.mysql import sql

# What stays: a decision of drc.conflicts.log.DECISIONS, why (one sentence for the log), and
# the resolver's own row when the decision is "custom".
Choice = tuple[str, str, Row | None]


@dataclass(frozen=True)
class Conflict:
    """The conflict at hand: what a decision may look at. Made only when a change conflicts."""

    kind: str  # drc.conflicts.log.KINDS
    policy: TablePolicy  # the table's: its timestamp column, its resolver
    table: TargetTable
    key: tuple[Any, ...]
    change: RowChange  # the incoming change
    local_row: Row | None  # the target's row for the key (None: there is none)
    # With a timestamp column (else None): the incoming change's version, and the local row's,
    # or its tombstone's when there is no row (None: neither).
    incoming: Version | None
    local: Version | None
    ranks: Ranks  # conflicts.priority
    make_context: Callable[[], ConflictContext] = field(repr=False)

    @property
    def deleting(self) -> bool:
        return self.change.op is Op.DELETE

    @property
    def row_present(self) -> bool:
        return self.local_row is not None

    @cached_property
    def context(self) -> ConflictContext:
        """What a resolver is told besides the rows; built only for a decision that asks."""
        return self.make_context()


@dataclass(frozen=True, slots=True)
class Policy:
    """One conflict policy, as the config, the engine, verify and the log see it."""

    # In the config (``policy = "..."``), the conflict log and ``drc conflicts``; at most 16
    # characters (drc.conflicts.log: the policy column).
    name: str
    # The choice on a conflict; None: the policy detects none (``off``).
    decide: Callable[[Conflict], Choice] | None
    # ``conflicts.tables.column``, the row's timestamp column. A table given one keeps
    # tombstones, so its deletes have a time too (drc.conflicts.tombstones), and its changes
    # carry versions (Conflict.incoming, Conflict.local).
    column: Literal["required", "optional", "unused"] = "unused"
    # ``conflicts.tables.resolver``, the user's ``module:function`` (Conflict.policy.resolver).
    resolver: Literal["required", "unused"] = "unused"
    # The newer version decides, ties going to the first datacenter of conflicts.priority.
    # So: the priority must list every datacenter (drc.config); a change inside a snapshot's
    # window is decided too, not written as it comes, lest an older change undo a newer local
    # write (drc.conflicts.engine); ``drc verify --repair`` keeps the newer row
    # (drc.verify.repair).
    by_version: bool = False
    # ``conflicts.tables.delta_columns``: counter columns added to, not set (a resolver
    # decides whole rows, so it takes none).
    counters: bool = False

    @property
    def detects(self) -> bool:
        return self.decide is not None


# ---------------------------------------------------------------------------- decisions


def lww(conflict: Conflict) -> Choice:
    """The newer of the incoming version and the local one."""
    incoming, local, column = conflict.incoming, conflict.local, conflict.policy.column
    assert incoming is not None and column is not None  # lww requires its column
    wins = conflict.ranks.newer(incoming, local)
    what = "deleted at" if conflict.deleting else f"{column}"
    mine = "local row"
    if local is None:
        return (
            "incoming",
            f"no local row or tombstone: the incoming {what} {_text(incoming.stamp)} wins",
            None,
        )
    if not conflict.row_present:
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


def by_resolver(conflict: Conflict) -> Choice:
    """What the user's resolver chose. ResolverError when it raised or returned something
    unusable."""
    policy, table, change = conflict.policy, conflict.table, conflict.change
    assert policy.resolver is not None
    local = None if conflict.local_row is None else dict(conflict.local_row)
    before, after = _adapted(change.before), _adapted(change.after)
    context = conflict.context
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
    bound = sql.row_values(table.primary_key, conflict.key, table.float_columns)
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


def overwrite(conflict: Conflict) -> Choice:
    return "incoming", "policy overwrite: the incoming change always wins", None


def keep(conflict: Conflict) -> Choice:
    return "local", "policy keep: the local row always wins", None


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


# ---------------------------------------------------------------------------- the policies

POLICIES: Mapping[str, Policy] = {
    p.name: p
    for p in (
        Policy("lww", lww, column="required", by_version=True, counters=True),
        Policy("resolver", by_resolver, column="optional", resolver="required"),
        Policy("overwrite", overwrite, counters=True),
        Policy("keep", keep, counters=True),
        Policy("off", None),
    )
}


# ---------------------------------------------------------------------------- tables


@dataclass(frozen=True, slots=True)
class TablePolicy:
    """A table's policy as configured: its name, timestamp column, resolver, counters."""

    name: str  # a key of POLICIES
    column: str | None = None
    resolver: ResolverFn | None = None
    resolver_name: str = ""
    delta_columns: tuple[str, ...] = ()  # counter columns (drc.conflicts.counters)
    declared: Policy = field(init=False, repr=False, compare=False)  # POLICIES[name]

    def __post_init__(self) -> None:
        declared = POLICIES[self.name]
        if not declared.detects:
            raise ValueError(f"policy {self.name} detects nothing: give the table no policy")
        object.__setattr__(self, "declared", declared)


class Policies:
    """Table -> policy, first matching ``[[conflicts.tables]]`` entry (None: no detection)."""

    def __init__(self, rules: Sequence[tuple[str, TablePolicy | None]]) -> None:
        self._rules = [(TablePattern.parse(p), policy) for p, policy in rules]
        self._cache: dict[tuple[str, str], TablePolicy | None] = {}

    @classmethod
    def from_config(
        cls, config: Any, load: Callable[[str], ResolverFn] = load_resolver
    ) -> Policies:
        rules: list[tuple[str, TablePolicy | None]] = []
        for entry in config.tables:
            if not POLICIES[entry.policy].detects:
                rules.append((entry.table, None))
                continue
            # The config gives a resolver only to a policy that takes one.
            fn = None if entry.resolver is None else load(entry.resolver)
            policy = TablePolicy(
                entry.policy, entry.column, fn, entry.resolver or "", tuple(entry.delta_columns)
            )
            rules.append((entry.table, policy))
        return cls(rules)

    @property
    def active(self) -> bool:
        return any(policy is not None for _, policy in self._rules)

    def get(self, schema: str, table: str) -> TablePolicy | None:
        key = (schema, table)
        if key not in self._cache:
            found = next((p for pat, p in self._rules if pat.matches(schema, table)), None)
            self._cache[key] = found if schema != tombstones.SCHEMA else None
        return self._cache[key]
