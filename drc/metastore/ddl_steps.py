"""What one DDL statement records in the history: an entry per table it concerns, in statement
order. A DROP TABLE (or the old name of a RENAME) ends the table's version; the new name of a
plain RENAME gets the old columns; DROP DATABASE ends every known table of that database."""

from __future__ import annotations

from typing import NamedTuple

from drc.core import ddl
from drc.core.events import SchemaChange, TableSchema
from drc.core.scn import SCN
from drc.metastore.history import HistoryRows


class DdlStep(NamedTuple):
    db: str
    tbl: str
    kind: str  # a drc.core.ddl kind, or "ddl" for a table the statement does not name
    schema: TableSchema | None  # RENAME_TO: the columns moved from the old name


def plan(
    rows: HistoryRows, scn: SCN, change: SchemaChange, wanted: set[tuple[str, str]] | None
) -> list[DdlStep]:
    """The steps of ``change`` at ``scn``, for the (db, tbl) in ``wanted`` (None: every table
    the statement names); with none, one schema-level step under ``(change.schema, '')``.

    For a rename the old table's schema rides along to its new name, taken as the earlier
    steps of this same statement leave it (RENAME a TO tmp, b TO a, tmp TO b swaps).
    """
    parsed = ddl.ddl_tables(change)
    state: dict[tuple[str, str], TableSchema | None] = {}  # as earlier steps leave it
    steps: list[DdlStep] = []
    carried: TableSchema | None = None
    for db, tbl, kind in parsed:
        schema = None
        if kind == ddl.RENAME_FROM:
            known = (db, tbl) in state
            carried = state[db, tbl] if known else rows.schema_at(db, tbl, scn)
        elif kind == ddl.RENAME_TO:
            schema = _renamed(carried, db, tbl)
        if kind in (ddl.DROP, ddl.RENAME_FROM, ddl.RENAME_TO):
            state[db, tbl] = schema
        steps.append(DdlStep(db, tbl, kind, schema))
    if wanted is not None:
        steps = [s for s in steps if (s.db, s.tbl) in wanted]
        named = {(db, tbl) for db, tbl, _ in parsed}
        steps += [DdlStep(db, tbl, "ddl", None) for db, tbl in sorted(wanted - named)]
    dropped_db = ddl.dropped_database(change)
    if dropped_db is not None:
        for db, tbl in rows.tables():
            if db == dropped_db and rows.schema_at(db, tbl, scn) is not None:
                steps.append(DdlStep(db, tbl, ddl.DROP, None))
    return [s for s in steps if s.tbl] or [DdlStep(change.schema, "", "ddl", None)]


def record(rows: HistoryRows, scn: SCN, change: SchemaChange, steps: list[DdlStep]) -> None:
    for db, tbl, kind, carried in steps:
        ends = kind in (ddl.DROP, ddl.RENAME_FROM)
        rows.insert(db, tbl, scn, "drop" if ends else "ddl", None, change.statement)
        if kind == ddl.RENAME_TO and carried is not None:
            rows.insert(db, tbl, scn, "schema", carried, None)


def _renamed(table: TableSchema | None, db: str, tbl: str) -> TableSchema | None:
    if table is None:
        return None
    return TableSchema(db, tbl, table.columns, table.primary_key)
