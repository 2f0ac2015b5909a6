"""A table of the database apply writes into, as information_schema describes it. Pure.

Apply's planner (drc.apply.plan), conflict handling (drc.conflicts), bulk catch-up and the
target session that reads it all speak of target tables in these terms, so it sits in the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class TargetTable:
    """A target table as information_schema describes it (names in the target's spelling)."""

    schema: str
    table: str
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    float_columns: frozenset[str] = frozenset()  # lower-case names (drc.mysql.sql.row_values)
    unique_keys: tuple[tuple[str, ...], ...] = ()  # UNIQUE keys besides the primary key
    # Its writes must keep stream order against every other write of the transaction: a
    # trigger fires for DRC's writes (one not guarded by @drc_apply), or a foreign key
    # refers to it or from it (drc.apply.shapes).
    keeps_order: bool = False
    # (lower-case name, least value, greatest value) of each integer and DECIMAL column: a
    # counter column (drc.conflicts: delta_columns) is added to, and a sum beyond them is an
    # error DRC reports rather than one the server would clamp.
    bounds: tuple[tuple[str, Any, Any], ...] = ()

    def missing(self, names: Sequence[str]) -> list[str]:
        """Columns of ``names`` the table lacks (MySQL column names are case-insensitive)."""
        have = {c.lower() for c in self.columns}
        return [n for n in names if n.lower() not in have]

    def bounds_of(self, column: str) -> tuple[Any, Any] | None:
        """The least and greatest value ``column`` holds (None: not an integer or DECIMAL)."""
        wanted = column.lower()
        return next(((lo, hi) for c, lo, hi in self.bounds if c == wanted), None)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.table}"


def key_of(table: TargetTable, image: Mapping[str, Any]) -> tuple[Any, ...]:
    """The primary key values of a row image, in the table's key order."""
    return values_of(table.primary_key, image)


def values_of(columns: Sequence[str], image: Mapping[str, Any]) -> tuple[Any, ...]:
    """The values of ``columns`` in a row image (names matched case-insensitively)."""
    try:
        if len(columns) == 1:  # most keys: no list, no loop
            return (image[columns[0]],)
        return tuple([image[k] for k in columns])
    except KeyError:  # the source spells a key column with another case
        folded = {name.lower(): value for name, value in image.items()}
        return tuple(folded[k.lower()] for k in columns)
