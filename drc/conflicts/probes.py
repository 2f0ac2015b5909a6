"""Probes: the target rows conflict detection reads, and what they were found to be.

Pure SQL text and parsing; the caller runs the statements (drc.apply.sink.TargetSession.probe,
through drc.conflicts.target.ConflictTarget.probe) in the apply transaction, before anything is
written. A :class:`Probe` names one key of a table with a policy and the incoming images of that
key; its :class:`Observed` says whether the target has a row there, which images the row equals
(decided by the server with ``<=>`` per column, FLOAT columns bound in single precision:
drc.mysql.sql.row_values, so no value is compared across two type systems), the row itself, and
the key's tombstone (drc.conflicts.tombstones) for policies with a timestamp column.

:class:`ProbePlan` batches them: one locking SELECT per table for up to PROBES_PER_STATEMENT
keys, one for their tombstones, instead of one or two per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drc.conflicts import tombstones
from drc.conflicts.rules import Row, Version
from drc.core.target_table import TargetTable
from drc.mysql import sql


@dataclass(frozen=True, slots=True)
class Probe:
    """A target row to read (and lock) before deciding, with the images to compare it with."""

    table: TargetTable
    key: tuple[Any, ...]
    images: tuple[Row, ...]
    tombstone: bool

    def statements(self) -> list[sql.Statement]:
        t = self.table
        match = sql.by_keys(t.primary_key, [self.key], t.float_columns)
        flags: list[str] = []
        params: list[Any] = []
        for image in self.images:
            text, values = sql.whole_row(tuple(image), tuple(image.values()), t.float_columns)
            flags.append(f"({text.removesuffix(' LIMIT 1')})")
            params.extend(values)
        name = sql.table_name(t.schema, t.table)
        select = sql.Statement(
            f"SELECT {', '.join(flags) or '1'}, {_row(t)} FROM {name} WHERE {match.sql} "
            "FOR UPDATE", tuple(params) + match.params,
        )  # fmt: skip
        if not self.tombstone:
            return [select]
        stone = tombstones.lookup(t.schema, t.table, t.primary_key, self.key, t.float_columns)
        return [select, stone]


def _row(table: TargetTable) -> str:
    """The SELECT list of a probed row: ``t.*``, or with FLOAT columns each column by name,
    FLOATs read as doubles (drc.mysql.sql.read_columns: the row's key and values are
    matched and written again)."""
    if not table.float_columns:
        return f"{sql.table_name(table.schema, table.table)}.*"
    return sql.read_columns(table.columns, table.float_columns)


def _row_read(table: TargetTable, names: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(names, sql.read_values(names, values, table.float_columns), strict=True))


@dataclass(frozen=True, slots=True)
class Observed:
    """What a probe found: the row (None: no row), which images it equals, the tombstone."""

    row: dict[str, Any] | None
    same: tuple[bool, ...]
    tombstone: Version | None = None


def observe(probe: Probe, results: Sequence[tuple[list[str], list[tuple[Any, ...]]]]) -> Observed:
    """Read a probe's result sets (from :meth:`Probe.statements`, in order)."""
    names, rows = results[0]
    tombstone = None
    if probe.tombstone and results[1][1]:
        stamp, origin = results[1][1][0]
        tombstone = Version(stamp, origin)
    if not rows:
        return Observed(None, (False,) * len(probe.images), tombstone)
    width = max(1, len(probe.images))
    flags = tuple(bool(v) for v in rows[0][: len(probe.images)])
    return Observed(_row_read(probe.table, names[width:], rows[0][width:]), flags, tombstone)


PROBES_PER_STATEMENT = 500  # < SLOT
MAX_FLAGS = 50  # distinct images of one key a batched probe reports on: mask * SLOT fits a BIGINT
SLOT = 1024

Results = Sequence[tuple[list[str], list[tuple[Any, ...]]]]


class ProbePlan:
    """Probes batched per table: one locking SELECT for the rows of up to
    PROBES_PER_STATEMENT keys and one for their tombstones, instead of one or two per key.

    In each, the server says which probe a row answers and, as a bit mask, which of that
    key's images the row equals: ``CASE WHEN <key i> THEN <mask> * SLOT + i``, so keys match
    by MySQL's collation rules, not Python's. A key with more distinct images than MAX_FLAGS
    is probed alone.
    """

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes = tuple(probes)
        self.statements: list[sql.Statement] = []
        self._readers: list[tuple[str, Sequence[int]]] = []  # per statement: kind, probe indexes
        self._bits: list[tuple[int, ...]] = []  # per probe: image -> bit of its mask
        self._distinct: list[list[Row]] = []
        batched: dict[tuple[str, str], list[int]] = {}
        for i, probe in enumerate(self.probes):
            distinct: list[Row] = []
            bits = []
            for image in probe.images:
                found = next((b for b, seen in enumerate(distinct) if seen == image), None)
                if found is None:
                    distinct.append(image)
                    found = len(distinct) - 1
                bits.append(found)
            self._bits.append(tuple(bits))
            self._distinct.append(distinct)
            if len(distinct) > MAX_FLAGS:
                self._alone(i)
            else:
                batched.setdefault((probe.table.schema, probe.table.table), []).append(i)
        for indexes in batched.values():
            for start in range(0, len(indexes), PROBES_PER_STATEMENT):
                self._batch(indexes[start : start + PROBES_PER_STATEMENT])

    def _alone(self, i: int) -> None:
        statements = self.probes[i].statements()
        self.statements.extend(statements)
        self._readers.append(("alone", [i]))
        if len(statements) > 1:
            self._readers.append(("alone-tombstone", [i]))

    def _batch(self, indexes: Sequence[int]) -> None:
        table = self.probes[indexes[0]].table
        key, floats = table.primary_key, table.float_columns
        keys = [sql.by_keys(key, [self.probes[i].key], floats) for i in indexes]
        answers = _case(
            [(k, self._mask(i, n)) for n, (i, k) in enumerate(zip(indexes, keys, strict=True))]
        )
        which = _case([(k, sql.Statement(str(n), ())) for n, k in enumerate(keys)])
        where = sql.by_keys(key, [self.probes[i].key for i in indexes], floats)
        name = sql.table_name(table.schema, table.table)
        self.statements.append(sql.Statement(
            f"SELECT {answers.sql} AS drc_answer, {_row(table)} FROM {name} WHERE {where.sql} "
            "FOR UPDATE", answers.params + where.params,
        ))  # fmt: skip
        self._readers.append(("rows", indexes))
        if self.probes[indexes[0]].tombstone:
            companion = sql.table_name(
                tombstones.SCHEMA, tombstones.name(table.schema, table.table)
            )
            self.statements.append(sql.Statement(
                f"SELECT {which.sql} AS drc_probe, {sql.ident(tombstones.COL_DELETED_AT)}, "
                f"{sql.ident(tombstones.COL_ORIGIN)} FROM {companion} WHERE {where.sql} "
                "FOR UPDATE", which.params + where.params,
            ))  # fmt: skip
            self._readers.append(("tombstones", indexes))

    def _mask(self, i: int, slot: int) -> sql.Statement:
        """``<bit mask of the images the row equals> * SLOT + slot``."""
        terms: list[str] = []
        params: list[Any] = []
        floats = self.probes[i].table.float_columns
        for bit, image in enumerate(self._distinct[i]):
            terms.append(f"({sql.same_row(tuple(image))}) * {(1 << bit) * SLOT}")
            params.extend(sql.row_values(tuple(image), tuple(image.values()), floats))
        return sql.Statement(" + ".join([*terms, str(slot)]), tuple(params))

    def observe(self, results: Results) -> list[Observed]:
        """What every probe found, in probe order, from the statements' result sets."""
        rows: dict[int, tuple[dict[str, Any] | None, tuple[bool, ...]]] = {}
        stones: dict[int, Version] = {}
        alone: dict[int, list[tuple[list[str], list[tuple[Any, ...]]]]] = {}
        for (kind, indexes), (names, found) in zip(self._readers, results, strict=True):
            if kind.startswith("alone"):
                alone.setdefault(indexes[0], []).append((names, found))
            elif kind == "rows":
                for values in found:
                    mask, slot = divmod(int(values[0]), SLOT)
                    i = indexes[slot]
                    flags = tuple(bool(mask >> bit & 1) for bit in self._bits[i])
                    rows[i] = (_row_read(self.probes[i].table, names[1:], values[1:]), flags)
            else:
                for n, stamp, origin in found:
                    stones[indexes[int(n)]] = Version(stamp, origin)
        out = []
        for i, probe in enumerate(self.probes):
            if i in alone:
                out.append(observe(probe, alone[i]))
                continue
            row, flags = rows.get(i, (None, (False,) * len(probe.images)))
            out.append(Observed(row, flags, stones.get(i)))
        return out


def _case(branches: Sequence[tuple[sql.Statement, sql.Statement]]) -> sql.Statement:
    """CASE WHEN <match> THEN <value> ... END."""
    parts: list[str] = []
    params: list[Any] = []
    for match, value in branches:
        parts.append(f"WHEN {match.sql} THEN {value.sql}")
        params.extend(match.params)
        params.extend(value.params)
    return sql.Statement(f"CASE {' '.join(parts)} END", tuple(params))
