"""Checksums of rows computed by the server, and what two sides' row lists say. Pure.

Both servers of a comparison compute the same SQL over their rows, so only counts and
checksums cross the network (pt-table-checksum's idea)::

    row hash     CRC32(CONCAT_WS('#', v1, v2, ..., CONCAT(ISNULL(c1), ISNULL(c2), ...)))
                 (ISNULL flags of the nullable columns only, as pt-table-checksum does)
    chunk        COUNT(*), COALESCE(BIT_XOR(row hash), 0) over the chunk's key range

where ``vN`` is the column as text: a character column cast to BINARY (its bytes, so columns
of different collations mix without error, and a collation that calls 'a' and 'A' equal still
tells them apart), any other column as the server prints it (numbers, DECIMAL with its scale,
temporal values with their fractional digits, FLOAT/DOUBLE in the server's shortest
round-trip form, BIT and binary strings as bytes). CONCAT_WS skips NULLs, so the ISNULL flags
make a NULL differ from an empty string. Equal rows hash alike on both sides when the two
table definitions are the same (drc.verify compares them first) and both sessions use the
same time_zone (TIMESTAMP is printed in it): DRC's sessions use UTC.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# DATA_TYPE names whose values are character strings (cast to BINARY in the row hash).
TEXT_TYPES = frozenset({
    "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json",
})  # fmt: skip

MISSING = "missing"  # on the source, not on the target
EXTRA = "extra"  # on the target, not on the source
DIFFERENT = "different"  # on both, not equal
KINDS = (MISSING, EXTRA, DIFFERENT)


def row_hash(
    quoted: Sequence[str], types: Sequence[str], nullable: Sequence[bool] | None = None
) -> str:
    """The row hash expression over the quoted columns (``types``: their DATA_TYPE;
    ``nullable``: which may hold NULL, all when not given). Measured on 1M rows of five
    columns, the string conversions cost most of it: COUNT(*) alone takes about a quarter of
    the time, CRC32 of the key alone a half; MD5 instead of CRC32 doubles it."""
    values = [
        f"CAST({q} AS BINARY)" if t.lower() in TEXT_TYPES else q
        for q, t in zip(quoted, types, strict=True)
    ]
    flagged = [q for q, n in zip(quoted, nullable or [True] * len(quoted), strict=True) if n]
    if flagged:
        values.append("CONCAT(" + ", ".join(f"ISNULL({q})" for q in flagged) + ")")
    return f"CRC32(CONCAT_WS('#', {', '.join(values)}))"


def chunk_sum(table: str, hash_expr: str, where: str) -> str:
    """``SELECT COUNT(*), checksum`` of the rows of ``table`` (quoted) matching ``where``."""
    return f"SELECT COUNT(*), COALESCE(BIT_XOR({hash_expr}), 0) FROM {table} WHERE {where}"


def row_sums(table: str, key: Sequence[str], hash_expr: str, where: str) -> str:
    """``SELECT key..., hash`` per row in key order (a keyless table: ``hash, COUNT(*)``
    per distinct hash, the rows as a multiset)."""
    if not key:
        return f"SELECT {hash_expr} AS h, COUNT(*) FROM {table} WHERE {where} GROUP BY h"
    cols = ", ".join(key)
    return f"SELECT {cols}, {hash_expr} FROM {table} WHERE {where} ORDER BY {cols}"


@dataclass(frozen=True, slots=True)
class Difference:
    """One row that is not the same on both sides: its key (a keyless table: its row hash)."""

    kind: str
    key: tuple[Any, ...]
    repair: str | None = None  # what --repair does (or would do) about it, e.g. target:upsert


def compare_sums(
    source: Mapping[tuple[Any, ...], int], target: Mapping[tuple[Any, ...], int]
) -> list[Difference]:
    """Rows by key -> hash on each side: the keys missing, extra or different, in key order
    of the source then the target."""
    found = [
        Difference(MISSING if key not in target else DIFFERENT, key)
        for key, value in source.items()
        if target.get(key) != value
    ]
    found += [Difference(EXTRA, key) for key in target if key not in source]
    return found


def compare_multisets(source: Mapping[int, int], target: Mapping[int, int]) -> list[Difference]:
    """A keyless table's rows as hash -> count on each side: one MISSING per row the target
    lacks, one EXTRA per row too many, keyed by the row hash."""
    found: list[Difference] = []
    for value in sorted(set(source) | set(target)):
        gap = source.get(value, 0) - target.get(value, 0)
        kind = MISSING if gap > 0 else EXTRA
        found += [Difference(kind, (value,))] * abs(gap)
    return found


@dataclass
class TableReport:
    """What verify found in one table (``differences`` confirmed; ``unsettled`` kept changing
    through every recheck, so neither equal nor confirmed different)."""

    source: str
    target: str
    rows: int = 0
    chunks: int = 0
    chunks_differing: int = 0
    seconds: float = 0.0
    differences: list[Difference] = field(default_factory=list)
    unsettled: list[Difference] = field(default_factory=list)
    repaired: int = 0
    skipped: str | None = None  # why the table was not compared
    note: str | None = None  # e.g. the planner's: one chunk, no usable key

    def counts(self) -> dict[str, int]:
        return {kind: sum(1 for d in self.differences if d.kind == kind) for kind in KINDS}


def first_keys(differences: Iterable[Difference], limit: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for diff in differences:
        if len(out) >= limit:
            break
        entry: dict[str, Any] = {"kind": diff.kind, "key": [_plain(v) for v in diff.key]}
        if diff.repair is not None:
            entry["repair"] = diff.repair
        out.append(entry)
    return out


def _plain(value: Any) -> Any:
    """A key value as JSON shows it: numbers and strings as they are, bytes as hex, others as
    text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    return str(value)
