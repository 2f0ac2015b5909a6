"""Whether a table filter selects a schema statement. Pure; the one rule capture (the
replicator's capture filter), the pull API (a subscriber's ``tables``) and apply (a channel's
tables) all use.

A statement is selected when, in order:

    it creates/alters/drops a schema object    the object's table (a trigger's) or database
    (view, routine, trigger, event)            may match (drc.core.schema_objects.kept_by)
    it names tables (drc.core.ddl.ddl_tables)  any of them matches
    it names no table                          its database may match: the one a DROP DATABASE
                                               removes, else the session's default database
                                               (CREATE DATABASE, GRANT, ...)

``own_schema=False`` (apply) never selects DRC's own objects on the target: the ``drc``
database, its objects, and the checkpoint table, whatever the filter says.
"""

from __future__ import annotations

from drc.core import schema_objects
from drc.core.ddl import ddl_tables, dropped_database
from drc.core.events import SchemaChange
from drc.core.markers import CHECKPOINT_SCHEMA, CHECKPOINT_TABLE
from drc.core.tablefilter import TableFilter


def selects_ddl(tables: TableFilter, change: SchemaChange, *, own_schema: bool = True) -> bool:
    """Whether ``tables`` selects ``change`` (see the module docstring)."""
    found = schema_objects.parse(change.statement, change.schema)
    if found is not None:  # named by its qualified name, not the session's database
        if not own_schema and found.schema == CHECKPOINT_SCHEMA:
            return False
        return schema_objects.kept_by(found, tables)
    named = ddl_tables(change)
    if named:
        return any(
            (own_schema or (db, table) != (CHECKPOINT_SCHEMA, CHECKPOINT_TABLE))
            and tables.matches(db, table)
            for db, table, _kind in named
        )
    database = dropped_database(change) or change.schema
    if not own_schema and database == CHECKPOINT_SCHEMA:
        return False
    return tables.may_match_db(database)
