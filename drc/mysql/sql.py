"""SQL text for a server, and the values bound to it. Pure: strings and tuples out, no I/O.

Rules every statement here keeps:

- Identifiers are quoted with backticks, a backtick inside a name doubled (```a``b```). The
  session's sql_mode is pinned without ANSI_QUOTES (:data:`SESSION_SQL_MODE`), so backticks are
  always identifier quotes. An account (``user@host``) is two of them (:func:`account`).
- Values are bound: every value is a ``%s`` placeholder and travels in ``params``. The text is
  therefore a pymysql format string, so a ``%`` inside a name is doubled too.
- :func:`literal` is the one function that writes a value into SQL text. It runs where a
  placeholder cannot go: the sink's pipelined statements are sent as text (drc.mysql.session
  renders their params with the session's escaping), and a trigger body is stored as text
  (written without a session: text as hex digits, which read the same under any sql_mode).
  The rows a snapshot copies are rendered by the origin server itself (drc.snapshot.rows), never
  by Python.
- Values are adapted (:func:`adapt`, which is drc.core.values.bound) from DRC's value types
  to what pymysql binds exactly (an aware datetime becomes naive UTC: the session's time_zone
  is UTC).

Statements (``t`` = `schema`.`table`)::

    upsert        INSERT INTO t (c1, c2) VALUES (%s, %s), ... ON DUPLICATE KEY UPDATE
                  c1 = VALUES(c1), c2 = VALUES(c2)
    insert        INSERT INTO t (c1, c2) VALUES (%s, %s), ...   (tables without a primary key)
    update        UPDATE t SET c1 = %s, c2 = %s WHERE <match>
    add to        UPDATE t SET c1 = %s, c2 = c2, n = n + %s WHERE <match>   (counter columns)
    delete        DELETE FROM t WHERE <match>
    match by key  k = %s  |  k IN (%s, %s)  |  (k1 = %s AND k2 = %s) OR (...)
    whole row     c1 <=> %s AND c2 <=> %s ... LIMIT 1   (NULL-safe: a NULL matches a NULL)

Matching a stored row: every value compared with a column, in every lookup (by key, whole
row, the conflict probes, tombstones, verify), is bound by :func:`row_values`, the one rule
for it. It exists for FLOAT: the column holds a single-precision value, which the server
widens to double to compare, while the captured value is the shortest decimal naming the
single (0.1 for 0.1f), whose double is another number (0.1 != 0.10000000149011612). So a
FLOAT column's value is bound as the exact double of its single, which compares equal;
DOUBLE, DECIMAL and every other type bind exactly as they are (:func:`adapt`). Which columns
are FLOAT comes from the target's definition (:func:`float_columns`), never from the value.

Reading a row that is looked up or written again: the text protocol gives a FLOAT six
significant digits (0.333333 for 0.33333334f), which names another single. Such reads select
each FLOAT column as a double (:func:`read_columns`: ``f + 0e0``), which the rule binds as it
is; :func:`read_values` gives it the captured form where a read row meets captured ones (the
conflict probes' local row).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from drc.core.values import BOUND_AS_IS, bound, shortest_single, single_precision

# No ANSI_QUOTES (backticks stay the only identifier quote), no strict mode or NO_ZERO_DATE
# (zero dates the source accepted are accepted), NO_AUTO_VALUE_ON_ZERO (an id 0 stays 0).
SESSION_SQL_MODE = "NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION"
SESSION_TIME_ZONE = "+00:00"  # TIMESTAMP values are captured in UTC


@dataclass(frozen=True, slots=True)
class Statement:
    """SQL text with ``%s`` placeholders and the values to bind, in order."""

    sql: str
    params: tuple[Any, ...]

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle and copy by constructor: compiled (drc.native), a frozen class refuses the
        # attribute-by-attribute restore they default to
        return Statement, (self.sql, self.params)


def quote(name: str) -> str:
    """A backtick-quoted identifier for SQL run without parameters (DDL)."""
    return "`" + name.replace("`", "``") + "`"


def account(user: str, host: str) -> str:
    """An account as SQL names it where no placeholder can go (``DEFINER=``): ```u`@`h```."""
    return quote(user) + "@" + quote(host)


def literal(value: Any, escape: Callable[[Any], str] | None = None) -> str:
    """``value`` as a literal in SQL text: the one function that writes a value there.

    ``escape``: the session's (pymysql's Connection.escape, which quotes and escapes as the
    server's NO_BACKSLASH_ESCAPES flag says, bytes as ``_binary'...'``), so the text is what
    pymysql itself would send; ints, NULL, finite decimals and naive datetimes take fast paths
    whose text has no quote or backslash to escape. Without a session (text stored for later,
    e.g. a trigger body), a string is ``_utf8mb4 X'6869'``: only hex digits stand between the
    quotes, so no quote, backslash or ``;`` in it can end the literal early, whatever the
    sql_mode of the session that runs it. Allowed wherever an expression is, not where the
    grammar wants a plain string (``COMMENT '...'``): DRC writes no untrusted text there."""
    kind = type(value)
    if kind is int:
        return str(value)
    if value is None:
        return "NULL"
    if kind is str and escape is not None:  # the commonest value after int
        return escape(value)
    if kind is Decimal and value.is_finite():
        return format(value, "f")
    if kind is dt.datetime and value.tzinfo is None:
        return "'" + value.isoformat(" ") + "'"  # digits, '-', ':', '.', ' ' only
    if escape is not None:
        return escape(value)
    if kind is str:
        return "_utf8mb4 X'" + value.encode("utf-8").hex() + "'"
    raise TypeError(f"no literal for a {kind.__name__} without a session to escape it")


def render(statement: Statement, escape: Callable[[Any], str]) -> str:
    """``statement``'s text with its values written in by :func:`literal` with the session's
    ``escape``: exactly what pymysql sends for ``execute(statement.sql, statement.params)``
    (drc.mysql.session.Session.text; here so that the loop is compiled, drc.native)."""
    return statement.sql % tuple([literal(v, escape) for v in statement.params])


# Statement texts depend only on names and counts, and a channel writes the same few shapes
# over and over: they are built once and cached (bounded: names come from the stream).
_cached = lru_cache(maxsize=4096)


@_cached
def ident(name: str) -> str:
    """A backtick-quoted identifier inside a parameterised statement (``%`` doubled)."""
    return quote(name).replace("%", "%%")


@_cached
def table_name(schema: str, table: str) -> str:
    return f"{ident(schema)}.{ident(table)}"


adapt = bound  # the value pymysql should bind for a DRC column value (drc.core.values)
_AS_IS = BOUND_AS_IS  # most values: bound as they are, without a call per value


def _placeholders(count: int) -> str:
    return "(" + ", ".join(["%s"] * count) + ")"


def upsert(
    schema: str, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> Statement:
    """One multi-row INSERT that updates every column of a row whose key is already there."""
    return Statement(_upsert_text(schema, table, tuple(columns), len(rows)), _row_params(rows))


@_cached
def _upsert_text(schema: str, table: str, columns: tuple[str, ...], count: int) -> str:
    update = ", ".join(f"{c} = VALUES({c})" for c in map(ident, columns))
    return f"{_insert_text(schema, table, columns, count)} ON DUPLICATE KEY UPDATE {update}"


def insert(
    schema: str, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> Statement:
    """A plain multi-row INSERT (tables without a primary key: identical rows are kept)."""
    return Statement(_insert_text(schema, table, tuple(columns), len(rows)), _row_params(rows))


@_cached
def _insert_text(schema: str, table: str, columns: tuple[str, ...], count: int) -> str:
    cols = ", ".join(ident(c) for c in columns)
    values = ", ".join([_placeholders(len(columns))] * count)
    return f"INSERT INTO {table_name(schema, table)} ({cols}) VALUES {values}"


def _row_params(rows: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
    return tuple([v if type(v) in _AS_IS else adapt(v) for row in rows for v in row])


def update(
    schema: str, table: str, columns: Sequence[str], values: Sequence[Any], where: Statement
) -> Statement:
    sql = _update_text(schema, table, tuple(columns), where.sql)
    return Statement(
        sql, tuple([v if type(v) in _AS_IS else adapt(v) for v in values]) + where.params
    )


@_cached
def _update_text(schema: str, table: str, columns: tuple[str, ...], where: str) -> str:
    assignments = ", ".join(f"{ident(c)} = %s" for c in columns)
    return f"UPDATE {table_name(schema, table)} SET {assignments} WHERE {where}"


def add_to(
    schema: str,
    table: str,
    assigned: Sequence[tuple[str, Any]],
    kept: Sequence[str],
    added: Sequence[tuple[str, Any]],
    where: Statement,
) -> Statement:
    """An update that sets ``assigned`` columns, assigns ``kept`` ones their own value (so no
    ``ON UPDATE`` default moves them) and adds an amount to each ``added`` column."""
    text = _add_text(
        schema, table, tuple(c for c, _ in assigned), tuple(kept), tuple(c for c, _ in added),
        where.sql,
    )  # fmt: skip
    values = [adapt(v) for _, v in assigned] + [adapt(v) for _, v in added]
    return Statement(text, tuple(values) + where.params)


@_cached
def _add_text(
    schema: str,
    table: str,
    assigned: tuple[str, ...],
    kept: tuple[str, ...],
    added: tuple[str, ...],
    where: str,
) -> str:
    parts = [f"{ident(c)} = %s" for c in assigned]
    parts += [f"{ident(c)} = {ident(c)}" for c in kept]
    parts += [f"{ident(c)} = {ident(c)} + %s" for c in added]
    return f"UPDATE {table_name(schema, table)} SET {', '.join(parts)} WHERE {where}"


def delete(schema: str, table: str, where: Statement) -> Statement:
    return Statement(f"DELETE FROM {table_name(schema, table)} WHERE {where.sql}", where.params)


def by_keys(key: Sequence[str], keys: Sequence[Sequence[Any]], floats: frozenset[str]) -> Statement:
    """Match rows by primary key values (one or many keys, one or many key columns);
    ``floats``: see :func:`row_values`."""
    if floats:
        params = tuple([v for k in keys for v in row_values(key, k, floats)])
    elif len(keys) == 1 and len(keys[0]) == 1:  # an update's or a delete's one-column key
        value = keys[0][0]
        params = (value if type(value) in _AS_IS else adapt(value),)
    else:
        params = tuple([v if type(v) in _AS_IS else adapt(v) for k in keys for v in k])
    return Statement(_by_keys_text(tuple(key), len(keys)), params)


@_cached
def _by_keys_text(key: tuple[str, ...], count: int) -> str:
    if len(key) == 1:
        column = ident(key[0])
        if count == 1:
            return f"{column} = %s"
        return f"{column} IN {_placeholders(count)}"
    one = "(" + " AND ".join(f"{ident(c)} = %s" for c in key) + ")"
    return " OR ".join([one] * count)


def whole_row(
    columns: Sequence[str], row: Sequence[Any], floats: frozenset[str]
) -> tuple[str, tuple[Any, ...]]:
    """NULL-safe equality on every column, for at most one row (``floats``: see
    :func:`row_values`)."""
    return f"{same_row(tuple(columns))} LIMIT 1", row_values(columns, row, floats)


def row_values(
    columns: Sequence[str], row: Sequence[Any], floats: frozenset[str]
) -> tuple[Any, ...]:
    """Values of ``columns`` bound for comparison with a stored row: the one matching rule
    (module docstring). ``floats``: the lower-case names of the FLOAT columns, whose values
    are bound as the exact double of their single-precision value."""
    if not floats:
        return tuple([v if type(v) in _AS_IS else adapt(v) for v in row])
    return tuple(
        single_precision(v) if type(v) is float and c.lower() in floats else adapt(v)
        for c, v in zip(columns, row, strict=True)
    )


@_cached
def same_row(columns: tuple[str, ...]) -> str:
    """``c1 <=> %s AND c2 <=> %s ...``: NULL-safe equality on every column."""
    return " AND ".join(f"{ident(c)} <=> %s" for c in columns)


def by_whole_row(columns: Sequence[str], row: Sequence[Any], floats: frozenset[str]) -> Statement:
    return Statement(*whole_row(columns, row, floats))


def float_columns(columns: Sequence[str], data_types: Sequence[str]) -> frozenset[str]:
    """The lower-case names of the FLOAT columns, from information_schema.COLUMNS.DATA_TYPE
    (a FLOAT(p) with p > 24 is a DOUBLE there)."""
    return frozenset(
        c.lower() for c, t in zip(columns, data_types, strict=True) if t.lower() == "float"
    )


_INTEGER_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}


def value_bounds(data_type: str, column_type: str) -> tuple[int | Decimal, int | Decimal] | None:
    """The least and greatest value an integer or DECIMAL column holds, from
    information_schema.COLUMNS (DATA_TYPE, COLUMN_TYPE); None for any other type."""
    kind, full = data_type.lower(), column_type.lower()
    bits = _INTEGER_BITS.get("int" if kind == "integer" else kind)
    if bits is not None:
        if "unsigned" in full:
            return 0, (1 << bits) - 1
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if kind in ("decimal", "numeric"):
        digits = full[full.find("(") + 1 : full.find(")")].split(",") if "(" in full else ["10"]
        precision, scale = int(digits[0]), int(digits[1]) if len(digits) > 1 else 0
        greatest = Decimal(10) ** (precision - scale) - Decimal(1).scaleb(-scale)
        least = Decimal(0) if "unsigned" in full else -greatest
        return least, greatest
    return None


def read_column(column: str, floats: frozenset[str]) -> str:
    """``column`` as an expression whose value keeps its precision: a FLOAT column is read as
    the double it holds (module docstring)."""
    return f"({ident(column)} + 0e0)" if column.lower() in floats else ident(column)


def read_columns(columns: Sequence[str], floats: frozenset[str]) -> str:
    """A SELECT list of ``columns`` by :func:`read_column`, each under its own name."""
    return ", ".join(
        f"{read_column(c, floats)} AS {ident(c)}" if c.lower() in floats else ident(c)
        for c in columns
    )


def read_values(
    columns: Sequence[str], row: Sequence[Any], floats: frozenset[str]
) -> tuple[Any, ...]:
    """A row read with :func:`read_columns`, its FLOAT values in the captured form."""
    if not floats:
        return tuple(row)
    return tuple(
        shortest_single(v) if type(v) is float and c.lower() in floats else v
        for c, v in zip(columns, row, strict=True)
    )
