"""The target's side of each copied table: created from the origin's definition, or checked
against it, before any row is copied.

- Missing on the target: created from the origin's ``SHOW CREATE TABLE`` (its database too)
  on a skip_replication session, so the creation is not echoed back.
- Present: it must have the origin's columns (name and type, in order) and primary key, and
  hold no row (a snapshot does not merge into existing data); otherwise the table is skipped
  with the reason (:class:`Skip`).

The channel's conflict setup (drc.conflicts.target: tombstone tables and triggers for
tables with a timestamp column) then runs before any row arrives, so the table never takes a
local write without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drc.apply.sink import TargetSession
from drc.mysql.sql import Statement, quote, table_name
from drc.snapshot import origin


class Skip(Exception):
    """A table the snapshot leaves out, and why (printed as a named skip)."""


@dataclass(frozen=True, slots=True)
class Shape:
    """What must agree between the sides: columns (name, COLUMN_TYPE) and primary key."""

    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]

    def difference(self, other: Shape) -> str | None:
        """Why ``other`` (the target's) differs from this one (the origin's), None if not."""
        mine, theirs = dict(self.columns), dict(other.columns)
        for name, kind in self.columns:
            if name not in theirs:
                return f"the target has no column {name}"
            if theirs[name].lower() != kind.lower():
                return f"column {name} is {theirs[name]} on the target, {kind} on the origin"
        extra = [n for n, _ in other.columns if n not in mine]
        if extra:
            return f"the target has columns the origin lacks: {', '.join(extra)}"
        if [n for n, _ in self.columns] != [n for n, _ in other.columns]:
            return "the columns are in another order on the target"
        if self.primary_key != other.primary_key:
            return (f"the primary key is ({', '.join(other.primary_key)}) on the target, "
                    f"({', '.join(self.primary_key)}) on the origin")  # fmt: skip
        return None


_SHAPE = (
    "SELECT c.COLUMN_NAME, c.COLUMN_TYPE, k.ORDINAL_POSITION FROM information_schema.COLUMNS c "
    "LEFT JOIN information_schema.KEY_COLUMN_USAGE k ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND "
    "k.TABLE_NAME = c.TABLE_NAME AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = "
    "'PRIMARY' WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME = %s ORDER BY c.ORDINAL_POSITION"
)


def shape(rows: Sequence[tuple[Any, ...]]) -> Shape | None:
    if not rows:
        return None
    key = sorted((int(r[2]), str(r[0])) for r in rows if r[2] is not None)
    return Shape(tuple((str(r[0]), str(r[1])) for r in rows), tuple(n for _, n in key))


def origin_shape(conn: Any, schema: str, table: str) -> Shape:
    found = shape(origin.query(conn, Statement(_SHAPE, (schema, table)), "reading a table"))
    if found is None:
        raise Skip(f"the origin has no table {schema}.{table}")
    return found


def origin_definition(conn: Any, schema: str, table: str) -> str:
    rows = origin.query(
        conn, Statement(f"SHOW CREATE TABLE {quote(schema)}.{quote(table)}", ()),
        f"reading the definition of {schema}.{table}",
    )  # fmt: skip
    return str(rows[0][1])


def prepare(
    session: TargetSession, source: Shape, definition: str, target: tuple[str, str],
    resuming: bool,
) -> str:  # fmt: skip
    """Make sure the target table exists and may be copied into; what was done, or Skip."""
    schema, table = target
    found = shape(session.query(Statement(_SHAPE, target), "reading"))
    session.commit()
    if found is None:
        session.run_setup(
            [f"CREATE DATABASE IF NOT EXISTS {quote(schema)}", f"USE {quote(schema)}",
             _renamed(definition, table)],
            f"creating {schema}.{table}",
        )  # fmt: skip
        return "created from the origin's definition"
    why = source.difference(found)
    if why is not None:
        raise Skip(f"{schema}.{table} differs between the sides: {why}. Make the definitions "
                   "equal (or drop the target's empty table to have it created), then run "
                   "the snapshot again")  # fmt: skip
    if not resuming and session.query(
        Statement(f"SELECT 1 FROM {table_name(schema, table)} LIMIT 1", ()), "reading"
    ):
        session.commit()
        raise Skip(f"{schema}.{table} already holds rows on the target: a snapshot copies into "
                   "an empty table. Empty it (TRUNCATE) if the origin's rows should replace "
                   "them, or leave it out of --tables")  # fmt: skip
    session.commit()
    return "exists with the same definition"


def _renamed(definition: str, table: str) -> str:
    """SHOW CREATE TABLE's text for the target's table name (map_tables)."""
    head, sep, rest = definition.partition("(")
    if not sep or not head.upper().startswith("CREATE TABLE"):
        raise Skip(f"unexpected SHOW CREATE TABLE text for {table}: {definition[:60]!r}")
    return f"CREATE TABLE IF NOT EXISTS {quote(table)} (" + rest
