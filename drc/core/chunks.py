"""Key-range chunks of a table, for bulk work (snapshot copy, verify). Pure: no I/O.

A table is split along one index whose values are unique and never NULL (the primary key, else
a unique key over NOT NULL columns) into chunks of consecutive key ranges::

    chunk 0          chunk 1            ...   chunk n
    (-inf, b0]       (b0, b1]                 (b_{n-1}, +inf)

``lower`` is exclusive, ``upper`` inclusive, ``None`` unbounded; every row falls in exactly one
chunk, rows inserted later included. The boundaries are key values read from the server, so
they compare on each side with that server's collation and types; both sides of a comparison
must therefore define the key alike (verify checks that).

A composite key compares as a row value, ``(a, b) > (x, y)``, but MariaDB does not use an index
for a row-value comparison, so it is written out with a leading single-column bound the range
optimizer can use::

    a >= x AND (a > x OR (a = x AND b > y))

Key types the planner does not split (their values do not round-trip exactly as bound
parameters, or do not order as the index does: FLOAT, BIT, ENUM, SET, text and blob prefixes,
JSON, spatial types) make the table one chunk, with a note saying why; so does a table with no
usable key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# DATA_TYPE names (information_schema.COLUMNS) whose values bind back exactly and order as the
# index orders them.
SPLITTABLE_TYPES = frozenset({
    "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric",
    "double", "char", "varchar", "binary", "varbinary", "date", "datetime", "timestamp",
    "time", "year",
})  # fmt: skip
INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})


@dataclass(frozen=True, slots=True)
class Chunk:
    """Rows of ``schema.table`` whose ``index_columns`` lie in (``lower``, ``upper``]."""

    schema: str
    table: str
    index_columns: tuple[str, ...]
    lower: tuple[Any, ...] | None
    upper: tuple[Any, ...] | None
    estimated_rows: int
    number: int = 0  # the chunk's place in its table's plan

    @property
    def whole_table(self) -> bool:
        return self.lower is None and self.upper is None

    def label(self) -> str:
        return f"{self.schema}.{self.table}#{self.number}"


@dataclass(frozen=True, slots=True)
class IndexColumn:
    """One row of information_schema.STATISTICS joined with COLUMNS."""

    index: str
    unique: bool
    seq: int
    column: str
    nullable: bool
    data_type: str
    prefix: bool  # SUB_PART: only a prefix of the column is indexed


@dataclass(frozen=True, slots=True)
class KeyChoice:
    """The index a table is split along (``columns`` empty: none), and why not if not."""

    index: str | None
    columns: tuple[str, ...]
    types: tuple[str, ...]
    note: str | None = None  # set when the table is one chunk

    @property
    def splittable(self) -> bool:
        return self.note is None


def choose_key(columns: Iterable[IndexColumn]) -> KeyChoice:
    """The primary key, else the unique NOT NULL key with the fewest columns (then by name)."""
    indexes: dict[str, list[IndexColumn]] = {}
    for col in columns:
        indexes.setdefault(col.index, []).append(col)
    usable = {
        name: sorted(cols, key=lambda c: c.seq)
        for name, cols in indexes.items()
        if cols[0].unique and not any(c.nullable or c.prefix for c in cols)
    }
    if not usable:
        return KeyChoice(None, (), (), "no primary key or unique key over NOT NULL columns: "
                         "the table is one chunk")  # fmt: skip
    name = "PRIMARY" if "PRIMARY" in usable else min(usable, key=lambda n: (len(usable[n]), n))
    cols = usable[name]
    names = tuple(c.column for c in cols)
    types = tuple(c.data_type.lower() for c in cols)
    odd = [
        f"{c.column} ({c.data_type})" for c in cols if c.data_type.lower() not in SPLITTABLE_TYPES
    ]
    note = None
    if odd:
        note = f"key {name} has a column the planner cannot split on: {', '.join(odd)}; one chunk"
    return KeyChoice(name, names, types, note)


def range_predicate(
    quoted: Sequence[str], lower: Sequence[Any] | None, upper: Sequence[Any] | None
) -> tuple[str, tuple[Any, ...]]:
    """``(key) > lower AND (key) <= upper`` over the quoted column names, expanded so the
    server uses the index; ``("1 = 1", ())`` for an unbounded range. The text has ``%s``
    placeholders for the values returned with it."""
    parts: list[str] = []
    params: list[Any] = []
    if lower is not None:
        text, values = _bound(quoted, lower, ">", ">")
        parts.append(text)
        params.extend(values)
    if upper is not None:
        text, values = _bound(quoted, upper, "<", "<=")
        parts.append(text)
        params.extend(values)
    if not parts:
        return "1 = 1", ()
    return " AND ".join(parts), tuple(params)


def _bound(
    quoted: Sequence[str], value: Sequence[Any], strict: str, last: str
) -> tuple[str, list[Any]]:
    """``(c1, .., cn) strict-or-equal value``: the last column compares with ``last``
    (inclusive upper, exclusive lower), the ones before it strictly or equal."""
    if len(value) != len(quoted):
        raise ValueError(f"a bound of {len(value)} values for a key of {len(quoted)} columns")
    if len(quoted) == 1:
        return f"{quoted[0]} {last} %s", [value[0]]
    alternatives: list[str] = []
    params: list[Any] = [value[0]]  # the leading bound the range optimizer uses
    for i in range(len(quoted)):
        equal = [f"{quoted[j]} = %s" for j in range(i)]
        op = last if i == len(quoted) - 1 else strict
        alternatives.append("(" + " AND ".join([*equal, f"{quoted[i]} {op} %s"]) + ")")
        params.extend([*value[:i], value[i]])
    lead = ">=" if strict == ">" else "<="
    return f"{quoted[0]} {lead} %s AND ({' OR '.join(alternatives)})", params


def key_equals(quoted: Sequence[str]) -> str:
    """``c1 = %s AND c2 = %s``: one row by its key."""
    return " AND ".join(f"{q} = %s" for q in quoted)


def from_boundaries(
    schema: str,
    table: str,
    columns: Sequence[str],
    boundaries: Sequence[tuple[Any, ...]],
    rows_each: int,
    lower: tuple[Any, ...] | None = None,
    upper: tuple[Any, ...] | None = None,
) -> list[Chunk]:
    """Chunks (lower, b0], (b0, b1], ..., (b_last, upper] from sorted inner boundaries."""
    edges: list[tuple[Any, ...] | None] = [lower, *boundaries, upper]
    return [
        Chunk(schema, table, tuple(columns), edges[i], edges[i + 1], rows_each, i)
        for i in range(len(edges) - 1)
    ]


def integer_boundaries(low: int, high: int, pieces: int) -> list[tuple[int]]:
    """``pieces - 1`` evenly spaced inner boundaries of the integer range [low, high]; for a
    dense integer key this splits the rows evenly without reading them."""
    if pieces <= 1 or high <= low:
        return []
    span = high - low + 1
    pieces = min(pieces, span)
    found = [low + span * i // pieces - 1 for i in range(1, pieces)]
    return [(b,) for b in sorted(set(found)) if low <= b < high]


def is_dense(low: int, high: int, rows: int, slack: float = 2.0) -> bool:
    """Whether integer keys low..high hold about ``rows`` rows with few gaps, so an arithmetic
    split is even (index statistics may be off by half; ``slack`` allows for that)."""
    return rows > 0 and (high - low + 1) <= rows * slack


def renumber(chunks: Sequence[Chunk], start: int = 0) -> list[Chunk]:
    return [
        Chunk(c.schema, c.table, c.index_columns, c.lower, c.upper, c.estimated_rows, start + i)
        for i, c in enumerate(chunks)
    ]


def follows(first: Chunk, second: Chunk) -> bool:
    """Whether ``second`` starts where ``first`` ends (same table and key, adjacent ranges),
    so the two can be checksummed as one range."""
    return (
        (first.schema, first.table, first.index_columns)
        == (second.schema, second.table, second.index_columns)
        and first.upper is not None
        and first.upper == second.lower
    )


def merged(chunks: Sequence[Chunk]) -> Chunk:
    """One chunk covering adjacent ``chunks`` (see :func:`follows`), numbered as the first."""
    first, last = chunks[0], chunks[-1]
    rows = sum(c.estimated_rows for c in chunks)
    return Chunk(first.schema, first.table, first.index_columns, first.lower, last.upper, rows,
                 first.number)  # fmt: skip


def take_adjacent(chunks: Sequence[Chunk], start: int, most: int) -> list[Chunk]:
    """Up to ``most`` chunks from ``chunks[start]`` on, each following the one before."""
    taken = [chunks[start]]
    for chunk in chunks[start + 1 : start + max(1, most)]:
        if not follows(taken[-1], chunk):
            break
        taken.append(chunk)
    return taken


def split_even(items: Sequence[Any], pieces: int) -> list[list[Any]]:
    """``items`` cut into at most ``pieces`` consecutive slices of near-equal length."""
    pieces = max(1, min(pieces, len(items)))
    bounds = [len(items) * i // pieces for i in range(pieces + 1)]
    return [list(items[bounds[i] : bounds[i + 1]]) for i in range(pieces)]


class Stride:
    """How many adjacent chunks the next checksum query covers, adapted like
    pt-table-checksum's chunk size: a query that took under half of ``target_s`` doubles
    the stride (up to ``most``), one over ``target_s`` halves it. Big strides make few
    queries while the sides agree; a differing stride is compared chunk by chunk."""

    def __init__(self, target_s: float, most: int = 64) -> None:
        self.target_s, self.most, self.size = target_s, most, 1

    def observe(self, seconds: float, size: int) -> None:
        if seconds > self.target_s:
            self.size = max(1, size // 2)
        elif seconds < self.target_s / 2 and size >= self.size:
            self.size = min(self.most, size * 2)
