"""The partition planner: a table split into key ranges of about ``chunk_rows`` rows.

It reads from one server (a pymysql connection; the caller's session, autocommit or not):

- the key to split along, from information_schema.STATISTICS and COLUMNS
  (drc.core.chunks.choose_key: primary key, else a unique NOT NULL key, else one chunk);
- the table's row estimate from index statistics (information_schema.TABLES.TABLE_ROWS);
- the boundaries: for a one-column integer key whose MIN..MAX is about as wide as the row
  estimate (dense), evenly spaced values, without reading rows; otherwise a walk of the index,
  one ``ORDER BY key LIMIT 1 OFFSET chunk_rows - 1`` per chunk, which reads the key only and
  gives exact chunk sizes whatever the gaps.

The plan is a list of :class:`drc.core.chunks.Chunk`; :func:`chunk_where` gives the SQL
predicate (with bound parameters) that selects one chunk's rows on any server with the same
key definition. Rows written after planning still fall in exactly one chunk.

    plan = plan_table(conn, "shop", "orders", chunk_rows=10_000)
    for chunk in plan.chunks:
        where = chunk_where(chunk)
        cur.execute(f"SELECT ... FROM {table_name(...)} WHERE {where.sql}", where.params)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drc.core.chunks import (
    INTEGER_TYPES,
    Chunk,
    IndexColumn,
    KeyChoice,
    choose_key,
    from_boundaries,
    integer_boundaries,
    is_dense,
    range_predicate,
)
from drc.core.errors import FatalError
from drc.core.tablefilter import TableFilter
from drc.mysql import sql

CHUNK_ROWS = 10_000
SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys", "drc")


class PlanError(FatalError):
    """A table cannot be planned (it does not exist); the message names it."""


@dataclass(frozen=True, slots=True)
class TablePlan:
    """How one table is split: the key, the chunks, and a note when it is one chunk."""

    schema: str
    table: str
    key: KeyChoice
    chunks: tuple[Chunk, ...]
    estimated_rows: int

    @property
    def index_columns(self) -> tuple[str, ...]:
        return self.key.columns

    @property
    def note(self) -> str | None:
        return self.key.note

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


def list_tables(conn: Any, tables: TableFilter) -> list[tuple[str, str]]:
    """The server's base tables the filter keeps, system schemas and ``drc`` left out."""
    marks = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
    rows = _query(conn, "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE "
                  f"TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN ({marks}) "
                  "ORDER BY TABLE_SCHEMA, TABLE_NAME", SYSTEM_SCHEMAS)  # fmt: skip
    return [(str(s), str(t)) for s, t in rows if tables.matches(str(s), str(t))]


def key_of(conn: Any, schema: str, table: str) -> KeyChoice:
    """The key ``schema.table`` is split along (drc.core.chunks.choose_key)."""
    rows = _query(conn,
        "SELECT s.INDEX_NAME, s.NON_UNIQUE, s.SEQ_IN_INDEX, s.COLUMN_NAME, c.IS_NULLABLE, "
        "c.DATA_TYPE, s.SUB_PART FROM information_schema.STATISTICS s JOIN "
        "information_schema.COLUMNS c ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = "
        "s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME WHERE s.TABLE_SCHEMA = %s AND "
        "s.TABLE_NAME = %s ORDER BY s.INDEX_NAME, s.SEQ_IN_INDEX", (schema, table))  # fmt: skip
    columns = [
        IndexColumn(
            str(r[0]),
            int(r[1]) == 0,
            int(r[2]),
            str(r[3]),
            r[4] == "YES",
            str(r[5]),
            r[6] is not None,
        )  # fmt: skip
        for r in rows
    ]
    return choose_key(columns)


def estimated_rows(conn: Any, schema: str, table: str) -> int:
    """The table's row count by index statistics (PlanError if there is no such table)."""
    rows = _query(conn, "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE "
                  "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table))  # fmt: skip
    if not rows:
        raise PlanError(f"there is no table {schema}.{table} on the server the plan reads")
    return int(rows[0][0] or 0)


def plan_table(conn: Any, schema: str, table: str, chunk_rows: int = CHUNK_ROWS) -> TablePlan:
    """``schema.table`` split into chunks of about ``chunk_rows`` rows (see the module doc)."""
    if chunk_rows < 1:
        raise ValueError("chunk_rows must be at least 1")
    estimate = estimated_rows(conn, schema, table)
    key = key_of(conn, schema, table)
    if not key.splittable:
        whole = Chunk(schema, table, key.columns, None, None, estimate, 0)
        return TablePlan(schema, table, key, (whole,), estimate)
    bounds = _dense_boundaries(conn, schema, table, key, estimate, chunk_rows)
    if bounds is None:
        bounds = walk_boundaries(conn, schema, table, key.columns, chunk_rows)
        estimate = max(estimate, len(bounds) * chunk_rows)
    each = max(1, estimate // (len(bounds) + 1))
    chunks = from_boundaries(schema, table, key.columns, bounds, each)
    return TablePlan(schema, table, key, tuple(chunks), estimate)


def plan_tables(
    conn: Any, tables: Sequence[tuple[str, str]], chunk_rows: int = CHUNK_ROWS
) -> list[TablePlan]:
    return [plan_table(conn, schema, table, chunk_rows) for schema, table in tables]


def chunk_where(chunk: Chunk) -> sql.Statement:
    """The predicate selecting ``chunk``'s rows: ``1 = 1`` for a whole table."""
    quoted = [sql.ident(c) for c in chunk.index_columns]
    text, params = range_predicate(quoted, chunk.lower, chunk.upper)
    return sql.Statement(text, tuple(sql.adapt(v) for v in params))


def order_by(chunk: Chunk) -> str:
    """``ORDER BY`` text of the chunk's key (empty for a keyless table)."""
    if not chunk.index_columns:
        return ""
    return " ORDER BY " + ", ".join(sql.ident(c) for c in chunk.index_columns)


def walk_boundaries(
    conn: Any,
    schema: str,
    table: str,
    columns: Sequence[str],
    chunk_rows: int,
    lower: tuple[Any, ...] | None = None,
    upper: tuple[Any, ...] | None = None,
) -> list[tuple[Any, ...]]:
    """The key of every ``chunk_rows``-th row in (lower, upper], walking the index: the inner
    boundaries of chunks of exactly ``chunk_rows`` rows (the last one fewer, maybe none)."""
    quoted = [sql.ident(c) for c in columns]
    found: list[tuple[Any, ...]] = []
    after = lower
    while True:
        text, params = range_predicate(quoted, after, upper)
        rows = _query(conn,
            f"SELECT {', '.join(quoted)} FROM {sql.table_name(schema, table)} WHERE {text} "
            f"ORDER BY {', '.join(quoted)} LIMIT 1 OFFSET {int(chunk_rows) - 1}",
            tuple(sql.adapt(v) for v in params))  # fmt: skip
        if not rows:
            return found
        after = tuple(rows[0])
        found.append(after)


def _dense_boundaries(
    conn: Any, schema: str, table: str, key: KeyChoice, estimate: int, chunk_rows: int
) -> list[tuple[Any, ...]] | None:
    """Evenly spaced boundaries of a dense one-column integer key, None if it is not one."""
    if len(key.columns) != 1 or key.types[0] not in INTEGER_TYPES or estimate < chunk_rows:
        return None
    column = sql.ident(key.columns[0])
    rows = _query(conn, f"SELECT MIN({column}), MAX({column}) FROM "
                  f"{sql.table_name(schema, table)}", ())  # fmt: skip
    low, high = rows[0] if rows else (None, None)
    if low is None or high is None or not is_dense(int(low), int(high), estimate):
        return None
    pieces = math.ceil((int(high) - int(low) + 1) / chunk_rows)
    return list(integer_boundaries(int(low), int(high), pieces))


def _query(conn: Any, text: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(text, tuple(params))
        return [tuple(r) for r in cur.fetchall()]
