"""Recognise what online schema change tools make: shadow tables, their triggers, the cut-over.

pt-online-schema-change and gh-ost alter a table ``t`` without locking it: they create an
empty altered copy (pt-osc ``_t_new``, gh-ost ``_t_gho``), fill it by copying ``t`` in chunks
while they carry over concurrent writes (pt-osc: triggers ``pt_osc_<db>_<t>_ins/upd/del``;
gh-ost: its own binlog reader, with a changelog table ``_t_ghc``), then swap the two with one
``RENAME TABLE t TO _t_old, _t_new TO t`` (gh-ost: ``_t_del``, ``_t_gho``) and drop the old one.

A channel with ``online_schema_change = "replay"`` replicates the logical ALTER instead of the
copy traffic (drc.core.osc_replay; docs/operations.md, "Online schema change tools"): it
recognises the shadow table by these, leaves out its rows and triggers and runs the ALTER on
the target table at the cut-over.
Names alone are a hint (a user may call a table ``_orders_new``); :func:`cut_over` is the
certain sign, a rename that swaps a table with its own shadow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from drc.core.ddl import RENAME_FROM, RENAME_TO, ddl_tables
from drc.core.events import SchemaChange

PT_OSC = "pt-online-schema-change"
GH_OST = "gh-ost"

NEW = "new"  # the altered copy being filled, the table's definition after the cut-over
OLD = "old"  # the original table once the cut-over renamed it away, dropped after
CHANGELOG = "changelog"  # gh-ost's heartbeat and state table

# pt-osc prefixes one more "_" while the name is taken; gh-ost's --timestamp-old-table puts a
# timestamp before "_del".
_PT_OSC_TABLE = re.compile(r"_+(?P<table>.+)_(?P<suffix>new|old)", re.DOTALL)
_GH_OST_TABLE = re.compile(r"_(?P<table>.+?)(?:_\d{14})?_(?P<suffix>gho|ghc|del)", re.DOTALL)
_ROLES = {"new": NEW, "old": OLD, "gho": NEW, "ghc": CHANGELOG, "del": OLD}
_TRIGGER_EVENTS = {"ins": "INSERT", "upd": "UPDATE", "del": "DELETE"}


@dataclass(frozen=True)
class Shadow:
    """A table an online schema change tool made for ``table`` (same database)."""

    tool: str
    role: str
    table: str


@dataclass(frozen=True)
class ToolTrigger:
    """A trigger pt-online-schema-change put on ``table`` to carry ``event`` rows over."""

    tool: str
    table: str
    event: str


@dataclass(frozen=True)
class CutOver:
    """``RENAME TABLE t TO old, shadow TO t``: ``shadow`` takes ``table``'s place."""

    tool: str
    schema: str
    table: str
    shadow: str
    old: str


def shadow_table(name: str) -> Shadow | None:
    """The tool, role and original table a shadow table's name says, else None."""
    for pattern, tool in ((_PT_OSC_TABLE, PT_OSC), (_GH_OST_TABLE, GH_OST)):
        match = pattern.fullmatch(name)
        if match is not None:
            return Shadow(tool, _ROLES[match["suffix"]], match["table"])
    return None


def tool_trigger(schema: str, name: str) -> ToolTrigger | None:
    """pt-online-schema-change's ``pt_osc_<schema>_<table>_<ins|upd|del>``, else None."""
    prefix = f"pt_osc_{schema}_"
    table, _, suffix = name[len(prefix) :].rpartition("_")
    if not name.startswith(prefix) or not table or suffix not in _TRIGGER_EVENTS:
        return None
    return ToolTrigger(PT_OSC, table, _TRIGGER_EVENTS[suffix])


def cut_over(change: SchemaChange) -> CutOver | None:
    """The swap of a table with its own shadow, in one RENAME TABLE, else None."""
    named = ddl_tables(change)
    kinds = [kind for _, _, kind in named]
    if kinds != [RENAME_FROM, RENAME_TO, RENAME_FROM, RENAME_TO]:
        return None
    (schema, table, _), (to_schema, old, _), (from_schema, new, _), (back_schema, back, _) = named
    if len({schema, to_schema, from_schema, back_schema}) != 1 or back != table:
        return None
    old_shadow, new_shadow = shadow_table(old), shadow_table(new)
    if old_shadow is None or new_shadow is None or old_shadow.tool != new_shadow.tool:
        return None
    if (old_shadow.role, new_shadow.role) != (OLD, NEW):
        return None
    if old_shadow.table != table or new_shadow.table != table:
        return None
    return CutOver(new_shadow.tool, schema, table, new, old)


def with_shadows(patterns: tuple[str, ...]) -> tuple[str, ...]:
    """``db.table`` patterns (drc.core.tablefilter) and the names of their tables' shadow and
    old tables (``db._table_new``, ``_old``; gh-ost ``_gho``, ``_del``): a channel replaying a
    tool's ALTER must see their statements and rows to leave them out, and the old table's DROP
    to forget the run. No pattern: every table already."""
    shadows = []
    for pattern in patterns:
        db, _, table = pattern.partition(".")
        shadows += [f"{db}._{table}_{suffix}" for suffix in ("new", "old", "gho", "del")]
    return tuple(dict.fromkeys((*patterns, *shadows))) if patterns else ()


def missing_shadow_hint(table: str) -> str:
    """What to tell an operator whose channel found no table ``table`` on its target, when the
    name is a tool's shadow table's: the likely cause, writes on both sides during the copy."""
    found = shadow_table(table)
    if found is None:
        return ""
    return (
        f"; {table} looks like {found.tool}'s shadow table of {found.table}: its rows arrive "
        f"after the tool's cut-over when {found.table} was written on both datacenters while "
        f"the tool copied it, and {found.table} has likely diverged (docs/operations.md, "
        "'Online schema change tools'; compare and repair it with drc verify, docs/verify.md; "
        'online_schema_change = "replay" on every datacenter\'s channels replicates the '
        "tool's ALTER instead of its copy)"
    )
