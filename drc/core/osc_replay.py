"""An online schema change tool's ALTER replayed instead of its copy (``online_schema_change =
"replay"``). Pure: the transitions of the pending state; the apply side keeps the state in the
target (drc.apply.osc_pending) and runs what :func:`replay` returns.

On the datacenter where pt-online-schema-change or gh-ost runs, the tool creates a shadow table
(drc.core.online_schema_change), alters it, copies the table into it and swaps the two. A
channel replaying that elsewhere leaves the shadow out altogether and runs the tool's ALTER on
the table itself at the cut-over, in stream order::

    statement on the tool's side          here                          pending entry of t
    CREATE TABLE _t_new / _t_gho          left out                      COPYING, no ALTER
    ALTER TABLE _t_new <clauses>          left out                      + <clauses>
    rows of _t_new (copy, triggers)       left out                      -
    CREATE/DROP TRIGGER pt_osc_<db>_t_*   left out (whatever the state)  -
    CREATE/DROP TABLE _t_del (gh-ost's    left out while COPYING         -
      cut-over sentry)
    RENAME t TO _t_old, _t_new TO t       ALTER TABLE t <clauses>, one    CUT, old = _t_old
                                          per ALTER of the shadow
    DROP TABLE _t_old                     left out                      forgotten
    DROP TABLE _t_new (the tool gave up)  left out                      forgotten

Anything else naming a COPYING shadow (a rename elsewhere, TRUNCATE, a DROP of several tables,
an ALTER that is not a plain table alter, :func:`drc.core.ddl.alter_clauses`) raises
:class:`UnexpectedChange`: this side has no shadow table to run it on, and the channel stops at
it. An entry records the SCN of the last statement it reflects: a statement at or before it (a
replayed range) changes nothing again, and a cut-over seen again gives the same ALTERs (the DDL
journal knows whether they ran). One entry per table: a tool runs once at a time on a table.
gh-ost's changelog table ``_t_ghc`` is replicated like any table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from drc.core import schema_objects
from drc.core.ddl import ALTER, CREATE, DROP, alter_clauses, ddl_tables
from drc.core.events import RowChange, SchemaChange, Transaction
from drc.core.online_schema_change import NEW, OLD, cut_over, shadow_table, tool_trigger
from drc.core.scn import SCN

COPYING = "copying"  # the tool fills the shadow table; its ALTERs are recorded
CUT = "cut"  # the cut-over ran here; the old table's DROP is still to come

Key = tuple[str, str]  # (schema, table the tool alters)


@dataclass(frozen=True, slots=True)
class Pending:
    """A tool's run on ``schema.table`` as this side knows it."""

    schema: str
    table: str
    tool: str
    shadow: str
    scn: SCN  # the last statement this entry reflects
    alters: tuple[str, ...] = ()  # each ALTER's clauses, in order
    state: str = COPYING
    old: str = ""  # the original table's name after the cut-over

    @property
    def key(self) -> Key:
        return (self.schema, self.table)


@dataclass(frozen=True, slots=True)
class Alter:
    """``ALTER TABLE schema.table <clauses>``, to be written with quoted names."""

    schema: str
    table: str
    clauses: str


class UnexpectedChange(ValueError):
    """A statement on a shadow table this side left out, other than the tool's usual ones."""

    def __init__(self, entry: Pending, statement: str) -> None:
        super().__init__(
            f"{entry.tool}'s shadow table {entry.schema}.{entry.shadow} of {entry.table} "
            "was changed other than by its usual ALTER, cut-over or DROP"
        )
        self.entry = entry
        self.statement = statement


@dataclass
class Replayed:
    """What :func:`replay` makes of a transaction: its statements (``Alter`` for a cut-over),
    its row changes, and the entries it changes (None: forgotten), by key."""

    ddl: list[SchemaChange | Alter] = field(default_factory=list)
    changes: tuple[RowChange, ...] = ()
    updates: dict[Key, Pending | None] = field(default_factory=dict)


def replay(entries: Mapping[Key, Pending], txn: Transaction) -> Replayed:
    """``txn`` as a replaying side applies it, given the pending ``entries`` before it."""
    now = dict(entries)
    out = Replayed()
    for change in txn.ddl:
        for key, entry in _statement(now, change, txn.scn, out.ddl).items():
            out.updates[key] = entry
            if entry is None:
                now.pop(key, None)
            else:
                now[key] = entry
    copying = {(e.schema, e.shadow) for e in now.values() if e.state == COPYING}
    out.changes = tuple(c for c in txn.changes if (c.schema, c.table) not in copying)
    return out


def _statement(
    entries: Mapping[Key, Pending], change: SchemaChange, scn: SCN, ddl: list[SchemaChange | Alter]
) -> dict[Key, Pending | None]:
    """The entries ``change`` changes; what it leaves to run is appended to ``ddl``."""
    found = schema_objects.parse(change.statement, change.schema)
    if found is not None and found.kind == schema_objects.TRIGGER:
        if tool_trigger(found.schema, found.name) is None:
            ddl.append(change)
        return {}
    cut = cut_over(change)
    if cut is not None:
        entry = entries.get((cut.schema, cut.table))
        if entry is None or entry.shadow != cut.shadow:
            ddl.append(change)  # a run this side did not see begin: as the tool's side did
            return {}
        ddl.extend(Alter(entry.schema, entry.table, clauses) for clauses in entry.alters)
        if entry.state == CUT:  # seen again: the DDL journal knows whether they ran
            return {}
        return {entry.key: replace(entry, state=CUT, old=cut.old, scn=scn)}
    named = ddl_tables(change)
    mine = [(s, t, k, e) for s, t, k in named if (e := _entry_naming(entries, s, t)) is not None]
    if not mine:
        return _unnamed(entries, change, scn, named, ddl)
    schema, table, kind, entry = mine[0]
    if entry.scn >= scn:  # reflected already (a range replayed)
        return {}
    if len(named) == 1 and entry.state == CUT and kind == DROP:
        return {entry.key: None}  # the old table's DROP
    if (
        len(named) == 1
        and entry.state == COPYING
        and table != entry.shadow
        and kind
        in (
            CREATE,
            DROP,
        )
    ):
        return {}  # gh-ost's cut-over sentry, _t_del
    if len(named) == 1 and entry.state == COPYING and kind == DROP:
        return {entry.key: None}  # the tool gave up: nothing of it exists here
    if len(named) == 1 and kind == CREATE and table == entry.shadow:
        return _begun(change, scn, schema, table)  # the tool started over
    if len(named) == 1 and kind == ALTER and entry.state == COPYING:
        clauses = alter_clauses(change)
        if clauses is not None:
            return {entry.key: replace(entry, alters=(*entry.alters, clauses[2]), scn=scn)}
    if entry.state == CUT:  # the old table in another statement: the tool's side's business
        ddl.append(change)
        return {entry.key: None}
    raise UnexpectedChange(entry, change.statement)


def _unnamed(
    entries: Mapping[Key, Pending],
    change: SchemaChange,
    scn: SCN,
    named: list[tuple[str, str, str]],
    ddl: list[SchemaChange | Alter],
) -> dict[Key, Pending | None]:
    """A statement naming no entry's shadow or old table: a shadow's CREATE begins an entry
    (replacing one of the same table whose old table was never dropped)."""
    if len(named) == 1 and named[0][2] == CREATE:
        schema, table, _ = named[0]
        known = shadow_table(table)
        if known is not None and known.role == NEW:
            entry = entries.get((schema, known.table))
            if entry is not None and entry.scn >= scn:
                return {}
            return _begun(change, scn, schema, table)
    ddl.append(change)
    return {}


def _begun(change: SchemaChange, scn: SCN, schema: str, shadow: str) -> dict[Key, Pending | None]:
    known = shadow_table(shadow)
    assert known is not None
    return {(schema, known.table): Pending(schema, known.table, known.tool, shadow, scn)}


def _entry_naming(entries: Mapping[Key, Pending], schema: str, table: str) -> Pending | None:
    """The entry whose shadow or gh-ost sentry (the old table's name, while copying) or old
    table (once cut) ``schema.table`` is."""
    known = shadow_table(table)
    if known is None:
        return None
    entry = entries.get((schema, known.table))
    if entry is None:
        return None
    if entry.state == COPYING and (table == entry.shadow or known.role == OLD):
        return entry
    if entry.state == CUT and table == entry.old:
        return entry
    return None
