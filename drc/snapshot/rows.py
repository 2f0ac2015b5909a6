"""Rows rendered as SQL literals by the origin server itself. Pure: SQL text out, no I/O.

A chunk is copied without Python ever holding a row: the origin renders each row as the text of
a ``VALUES`` tuple and concatenates a chunk's tuples (``GROUP_CONCAT``), and the target runs
``INSERT INTO t (columns) VALUES <that text>``. Both servers do the work in C; a row is never
decoded into Python values and escaped again. Each column type gets the literal that reads
back exactly:

    type                                literal the origin writes
    integers, DECIMAL, DOUBLE, YEAR     the number (DOUBLE in its shortest exact form)
    FLOAT                               the value widened to DOUBLE (exact; the target rounds
                                        it back to the same FLOAT)
    BIT                                 the number
    binary strings, BLOBs, spatial      X'hex'
    everything else (text, temporal,    QUOTE(CONVERT(value USING utf8mb4)): quoted and
    ENUM, SET, JSON)                    escaped by the server, in the connection's charset
    NULL                                NULL

Temporal values are rendered in the session's time zone, which both sides pin to UTC.
Generated columns are left out: the target computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drc.mysql.sql import ident, quote, table_name

BINARY_TYPES = frozenset({
    "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
    "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
    "geometrycollection",
})  # fmt: skip
NUMBER_TYPES = frozenset({
    "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric",
    "double", "year",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    data_type: str  # information_schema.COLUMNS.DATA_TYPE
    generated: bool = False


def literal(column: Column) -> str:
    """The expression (origin side) giving ``column``'s value as an SQL literal."""
    c, kind = ident(column.name), column.data_type.lower()
    if kind in BINARY_TYPES:
        value = f"CONCAT('X''', HEX({c}), '''')"
    elif kind == "bit":
        value = f"CAST({c} AS UNSIGNED)"
    elif kind == "float":
        value = f"({c} + 0e0)"
    elif kind in NUMBER_TYPES:
        value = c
    else:
        value = f"QUOTE(CONVERT({c} USING utf8mb4))"
    return f"IFNULL({value}, 'NULL')"


def copied(columns: Sequence[Column]) -> list[Column]:
    """The columns a copy writes (generated columns are computed by the target)."""
    return [c for c in columns if not c.generated]


def tuple_expression(columns: Sequence[Column]) -> str:
    """``CONCAT('(', v1, ',', v2, ')')``: one row as a ``VALUES`` tuple."""
    parts = ", ',', ".join(literal(c) for c in columns)
    return f"CONCAT('(', {parts}, ')')"


def chunk_select(schema: str, table: str, columns: Sequence[Column], where: str) -> str:
    """The origin query giving (rows, their tuples joined by commas) of the rows matching
    ``where`` (a pymysql format string: ``%s`` placeholders, ``%`` in names doubled)."""
    return (
        f"SELECT COUNT(*), GROUP_CONCAT({tuple_expression(columns)} SEPARATOR ',') "
        f"FROM {table_name(schema, table)} WHERE {where}"
    )


def rows_select(schema: str, table: str, columns: Sequence[Column], where: str) -> str:
    """The same rows one tuple per result row (a chunk too big for one GROUP_CONCAT)."""
    return f"SELECT {tuple_expression(columns)} FROM {table_name(schema, table)} WHERE {where}"


def insert_prefix(schema: str, table: str, columns: Sequence[Column]) -> str:
    """``INSERT INTO t (c1, c2) VALUES `` for SQL run without parameters."""
    names = ", ".join(quote(c.name) for c in columns)
    return f"INSERT INTO {quote(schema)}.{quote(table)} ({names}) VALUES "
