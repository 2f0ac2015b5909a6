"""Tombstones: when each row of a ``lww`` table was deleted, so deletes take part in lww.

A deleted row leaves nothing to compare a late update with, so every ``lww`` table ``db.t`` gets
a companion table in the ``drc`` schema, created by the apply channel on start::

    drc.tomb_<hash>_<db>_<t>     (name cut to 64 characters; the hash keeps it unique)
    +-----------------+-------------------------------------------------------------------+
    | <pk columns>    | the table's primary key, same types and collations: looked up    |
    |  (primary key)  | and compared by the server exactly like the table's own keys     |
    | drc$schema      | 'db'  \\ the table the row belonged to (the origin's names), so a  |
    | drc$table       | 't'   / datacenter receiving it knows what was deleted           |
    | drc$deleted_at  | when: same family as the lww column (DATETIME(6), TIMESTAMP(6)    |
    |                 | or BIGINT milliseconds), from the deleting session's clock        |
    | drc$origin      | the datacenter that deleted it (lww ties)                        |
    +-----------------+-------------------------------------------------------------------+

Two writers, never both for one delete:

- Deletes made by applications: an ``AFTER DELETE`` trigger ``drc_tomb_<hash>`` on the table
  writes the tombstone in the deleting transaction. Its row event therefore travels with the
  delete to the other datacenters (the replicator always captures ``drc.tomb_*``), which is how
  they learn the exact time of the delete. Clock skew and ``SET TIMESTAMP`` apply to the
  trigger's ``NOW(6)`` exactly as to ``ON UPDATE CURRENT_TIMESTAMP`` columns. Two more triggers
  keep each row's time moving forward (:func:`create_triggers`).
- Deletes applied by DRC: the apply session sets ``@drc_apply = 1``, which the trigger checks,
  and the channel writes the tombstone itself with the origin's time, keeping the newer of the
  old and the new one.

Tombstones older than ``conflicts.tombstone_retention_hours`` are purged by each channel. An
update delayed longer than that can bring a deleted row back. Deletes that fire no trigger
(TRUNCATE, foreign-key cascades) leave no tombstone. A delete on a table the trigger is missing
on (not made yet, or refused) is dated from the captured delete instead, the same way by its
own datacenter's lww guard, which writes the tombstone there, and by every receiving channel
(drc.conflicts.rules.derived_delete_stamp).

Privileges: TRIGGER on the lww tables and CREATE/INSERT/DELETE on ``drc.*`` for the apply user.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drc.core.markers import TOMBSTONE_PREFIX, is_tombstone_table
from drc.mysql.sql import Statement, by_keys, ident, literal, quote, table_name
from drc.mysql.sql import upsert as upsert_rows

__all__ = ["is_tombstone_table"]

SCHEMA = "drc"
COL_SCHEMA = "drc$schema"
COL_TABLE = "drc$table"
COL_DELETED_AT = "drc$deleted_at"
COL_ORIGIN = "drc$origin"
PURGE_BATCH = 5000
# COMMENT takes only a plain string literal, so it names no table: a name there could end it
# (issue #12). The table's own name and its drc$schema/drc$table columns say whose it is. It
# still names this module by its first home: tables already made carry that text.
COMMENT = "'DRC tombstones (drc.apply.tombstones)'"


def _digest(schema: str, table: str) -> str:
    return hashlib.sha1(f"{schema}.{table}".encode()).hexdigest()[:10]


def name(schema: str, table: str) -> str:
    """The companion table of ``schema.table`` (in the drc schema)."""
    # MariaDB refuses a name ending in a space, which the cut may leave
    return f"{TOMBSTONE_PREFIX}{_digest(schema, table)}_{schema}_{table}"[:64].rstrip(" ")


def trigger_names(schema: str, table: str) -> tuple[str, str, str]:
    """(after delete, before insert, before update) trigger names."""
    digest = _digest(schema, table)
    return f"drc_tomb_{digest}", f"drc_ins_{digest}", f"drc_upd_{digest}"


@dataclass(frozen=True, slots=True)
class StampType:
    """How the companion table stores a deletion time comparable with the lww column, and
    the smallest step of that column (a change must move it by at least that much)."""

    data_type: str  # information_schema's DATA_TYPE of drc$deleted_at: datetime|timestamp|bigint
    now_sql: str  # the trigger's "now" in that type
    step_sql: str  # "+ <step>" in the column's unit

    @classmethod
    def of(cls, data_type: str, precision: int | None, column: str, table: str) -> StampType:
        kind = data_type.lower()
        step = f"+ INTERVAL {10 ** (6 - (precision or 0))} MICROSECOND"
        if kind in ("datetime", "timestamp"):
            return cls(kind, "NOW(6)", step)
        if kind == "bigint":
            return cls(kind, "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)", "+ 1")
        raise ValueError(
            f"lww column {column!r} of {table} is {data_type}: use DATETIME(3..6), TIMESTAMP(3..6) "
            "or a BIGINT of milliseconds since the epoch"
        )

    @property
    def integer(self) -> bool:
        return self.data_type == "bigint"

    @property
    def type_sql(self) -> str:
        return "BIGINT" if self.integer else f"{self.data_type.upper()}(6)"

    @property
    def column_sql(self) -> str:
        """The column definition of drc$deleted_at (a TIMESTAMP must not default to now)."""
        default = " DEFAULT NULL" if self.data_type == "timestamp" else ""
        return f"{self.type_sql} NULL{default}"


@dataclass(frozen=True, slots=True)
class KeyColumn:
    name: str
    definition: str  # COLUMN_TYPE with character set and collation, as information_schema says


def create_table(schema: str, table: str, key: Sequence[KeyColumn], stamp: StampType) -> str:
    columns = [f"{quote(c.name)} {c.definition} NOT NULL" for c in key]
    columns += [
        f"{quote(COL_SCHEMA)} VARCHAR(64) NOT NULL",
        f"{quote(COL_TABLE)} VARCHAR(64) NOT NULL",
        f"{quote(COL_DELETED_AT)} {stamp.column_sql}",
        f"{quote(COL_ORIGIN)} VARCHAR(64) NOT NULL",
        f"PRIMARY KEY ({', '.join(quote(c.name) for c in key)})",
        f"KEY ({quote(COL_DELETED_AT)})",
    ]
    return (
        f"CREATE TABLE IF NOT EXISTS {quote(SCHEMA)}.{quote(name(schema, table))} "
        f"({', '.join(columns)}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT={COMMENT}"
    )


def drop_table(schema: str, table: str) -> str:
    return f"DROP TABLE IF EXISTS {quote(SCHEMA)}.{quote(name(schema, table))}"


def create_triggers(
    schema: str,
    table: str,
    key: Sequence[str],
    column: str,
    stamp: StampType,
    datacenter: str,
) -> list[str]:
    """The triggers of a lww table; DRC's own sessions (``@drc_apply``) skip all three.

    - after delete: record the tombstone, at least one step after the deleted row's time;
    - before insert: a key deleted before is inserted at least one step after its tombstone;
    - before update: a row's time never goes back (a clock behind the row's last writer
      would otherwise make a later change lose to an older concurrent one, and the sides
      would diverge).

    So along every row's history, on every datacenter, time never decreases, which is what
    lets the newest version win the same way everywhere. The triggers name only the key and
    the timestamp column, so other columns may be added or dropped freely.
    """
    on = f"{quote(schema)}.{quote(table)}"
    delete, insert, update = (f"{quote(schema)}.{quote(n)}" for n in trigger_names(schema, table))
    companion = f"{quote(SCHEMA)}.{quote(name(schema, table))}"
    ts = quote(column)
    when = f"GREATEST({stamp.now_sql}, OLD.{ts} {stamp.step_sql})"
    tomb_columns = [quote(k) for k in key] + [
        quote(c) for c in (COL_SCHEMA, COL_TABLE, COL_DELETED_AT, COL_ORIGIN)
    ]
    values = [f"OLD.{quote(k)}" for k in key]
    values += [literal(schema), literal(table), when, literal(datacenter)]
    updates = ", ".join(f"{c} = VALUES({c})" for c in tomb_columns[len(key) :])
    match = " AND ".join(f"{quote(k)} = NEW.{quote(k)}" for k in key)
    return [
        f"CREATE OR REPLACE TRIGGER {delete} AFTER DELETE ON {on} FOR EACH ROW "
        f"IF @drc_apply IS NULL THEN INSERT INTO {companion} ({', '.join(tomb_columns)}) "
        f"VALUES ({', '.join(values)}) ON DUPLICATE KEY UPDATE {updates}; END IF",
        f"CREATE OR REPLACE TRIGGER {insert} BEFORE INSERT ON {on} FOR EACH ROW BEGIN "
        f"DECLARE deleted_at {stamp.type_sql} DEFAULT NULL; "
        f"IF @drc_apply IS NULL THEN SET deleted_at = (SELECT {quote(COL_DELETED_AT)} "
        f"FROM {companion} WHERE {match}); IF NEW.{ts} <= deleted_at THEN "
        f"SET NEW.{ts} = deleted_at {stamp.step_sql}; END IF; END IF; END",
        f"CREATE OR REPLACE TRIGGER {update} BEFORE UPDATE ON {on} FOR EACH ROW "
        f"IF @drc_apply IS NULL AND NEW.{ts} < OLD.{ts} THEN "
        f"SET NEW.{ts} = OLD.{ts} {stamp.step_sql}; END IF",
    ]


def lookup(
    schema: str, table: str, key: Sequence[str], values: Sequence[Any], floats: frozenset[str]
) -> Statement:
    """The tombstone of one key, locked: (deleted_at, origin) or no row (``floats``: the
    table's FLOAT columns; the companion's key columns have the same types)."""
    match = by_keys(key, [values], floats)
    return Statement(
        f"SELECT {ident(COL_DELETED_AT)}, {ident(COL_ORIGIN)} FROM "
        f"{table_name(SCHEMA, name(schema, table))} WHERE {match.sql} FOR UPDATE",
        match.params,
    )


def upsert(
    schema: str, table: str, key: Sequence[str], rows: Sequence[tuple[Sequence[Any], Any, str]]
) -> Statement:
    """Record deletions ``(key values, deleted_at, origin)``, keeping the newer of two."""
    columns = [*key, COL_SCHEMA, COL_TABLE, COL_DELETED_AT, COL_ORIGIN]
    values = [(*k, schema, table, when, origin) for k, when, origin in rows]
    plain = upsert_rows(SCHEMA, name(schema, table), columns, values)
    head, _, _ = plain.sql.partition(" ON DUPLICATE KEY UPDATE ")
    at, origin = ident(COL_DELETED_AT), ident(COL_ORIGIN)
    newer = f"VALUES({at}) > {at} OR {at} IS NULL"
    return Statement(
        f"{head} ON DUPLICATE KEY UPDATE {origin} = IF({newer}, VALUES({origin}), {origin}), "
        f"{at} = IF({newer}, VALUES({at}), {at})",
        plain.params,
    )


def purge(schema: str, table: str, stamp: StampType, retention_s: int) -> Statement:
    """Delete up to PURGE_BATCH tombstones older than the retention (run until it deletes 0)."""
    at = ident(COL_DELETED_AT)
    if stamp.integer:
        limit = "(UNIX_TIMESTAMP(NOW(3)) - %s) * 1000"
    else:
        limit = "NOW(6) - INTERVAL %s SECOND"
    return Statement(
        f"DELETE FROM {table_name(SCHEMA, name(schema, table))} WHERE {at} < {limit} "
        f"LIMIT {PURGE_BATCH}",
        (retention_s,),
    )
