"""Which partition a row change of a span goes to, and the order within it. Pure.

Every change of one (table, primary key) goes to one partition, so the partition can reduce it
to the key's net change (drc.core.reduce) and decide it against the target's row alone. An
update that moves a key is split first into a delete of the old key and an insert of the new
one, each routed by its own key. A table without a primary key goes whole to one partition,
where its changes stay in SCN order, unreduced. DRC's tombstone rows (which the conflict engine
reads to date a delete, drc.conflicts.tombstones) go unreduced with the key they date. The changes
of tables given as ``unreduced`` (those with a conflict policy, drc.catchup.executor) are routed
by their key but not reduced: they stay as they came, in SCN order.

The partition is a CRC-32 of the key's msgpack encoding (drc.core.codec), the same in every
process and on every host (Python's ``hash`` of a str is not), so a re-run routes alike.
Changes travel as drc.core.reduce entries; their position is :func:`position`: the record's
SCN bytes, its fragment and the change's place in it, which sorts in stream order.

:class:`Router` routes and reduces one contiguous slice of the stream at once (each key once
per slice, its partition computed once); :class:`NetKeys` gives the key a partition reduces by.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from drc.conflicts import tombstones
from drc.core.events import Row, RowChange, Transaction
from drc.core.markers import is_tombstone_table
from drc.core.reduce import (
    AFTER,
    BEFORE,
    POSITION,
    SCHEMA,
    SCN_,
    TABLE,
    TIMESTAMP,
    Entry,
    Nets,
    key_getter,
    moved_position,
    op_of,
)  # fmt: skip
from drc.core.scn import SCN
from drc.core.value_codec import encode_key

Keys = Mapping[tuple[str, str], Sequence[str]]  # target table -> primary key columns


def partition_of(parts: Sequence[Any], partitions: int) -> int:
    return zlib.crc32(encode_key(list(parts))) % partitions


def position(scn: bytes, fragment: int, index: int) -> bytes:
    """Where a change is in the stream, as bytes that sort in stream order."""
    return scn + fragment.to_bytes(4, "big") + index.to_bytes(4, "big")


def key_columns(primary_keys: Keys, schema: str, table: str) -> Sequence[str]:
    """The columns a table's changes are reduced by: none for a keyless or tombstone table."""
    return () if is_tombstone_table(schema, table) else primary_keys.get((schema, table), ())


KeyOf = Callable[[Row], tuple[Any, ...]] | None  # None: the table's changes are kept as they came


class NetKeys:
    """The key each entry is reduced by, per table (drc.core.reduce.key_getter); None for the
    tables in ``unreduced``."""

    def __init__(self, primary_keys: Keys, unreduced: Collection[tuple[str, str]] = ()) -> None:
        self.primary_keys = primary_keys
        self.unreduced = frozenset(unreduced)
        self._getters: dict[tuple[str, str], KeyOf] = {}

    def getter(self, schema: str, table: str) -> KeyOf:
        try:
            return self._getters[(schema, table)]
        except KeyError:
            pass
        columns = key_columns(self.primary_keys, schema, table)
        found = key_getter((schema, table), columns) if columns else None
        self._getters[(schema, table)] = found
        return found

    def __call__(self, entry: Entry) -> tuple[Any, ...] | None:
        table = (entry[SCHEMA], entry[TABLE])
        if table in self.unreduced:
            return None
        key = self.getter(*table)
        if key is None:
            return None
        return key(entry[AFTER] if entry[AFTER] is not None else entry[BEFORE])


class Router:
    """One slice's changes (target names, in stream order), reduced per key (but those of the
    ``unreduced`` tables) and routed."""

    def __init__(
        self, primary_keys: Keys, partitions: int, unreduced: Collection[tuple[str, str]] = ()
    ) -> None:
        self.primary_keys = primary_keys
        self.partitions = partitions
        self.parts: dict[int, Nets] = {}
        self.added = 0
        self._keys = NetKeys(primary_keys)
        self._unreduced = frozenset(unreduced)
        self._part_of: dict[Any, int] = {}

    def add(self, position: bytes, scn: bytes, timestamp: int, schema: str, table: str,
            before: Any, after: Any) -> None:  # fmt: skip
        self.added += 1
        entry = [position, scn, timestamp, schema, table, before, after]
        key_of = self._keys.getter(schema, table)
        if key_of is None:
            self._add(self._kept_partition(entry), None, entry)
            return
        key = key_of(after if after is not None else before)
        reduce = not (self._unreduced and (schema, table) in self._unreduced)
        if before is not None and after is not None:
            old = key_of(before)
            if old != key:  # the key moves: a delete of the old one, an insert of the new
                self._add(self.partition(old), old if reduce else None, [*entry[:AFTER], None])
                entry[POSITION], entry[BEFORE] = moved_position(position), None
        self._add(self.partition(key), key if reduce else None, entry)

    def _add(self, part: int, key: Any, entry: Entry) -> None:
        nets = self.parts.get(part)
        if nets is None:
            nets = self.parts[part] = Nets()
        nets.add(key, entry)

    def partition(self, key: Any) -> int:
        part = self._part_of.get(key)
        if part is None:
            part = self._part_of[key] = partition_of(key, self.partitions)
        return part

    def _kept_partition(self, entry: Entry) -> int:
        schema, table = entry[SCHEMA], entry[TABLE]
        if is_tombstone_table(schema, table):  # with the key it dates the delete of
            row = entry[AFTER] if entry[AFTER] is not None else entry[BEFORE]
            return _tombstone_partition(row, self)
        return self.partition((schema, table))


def _tombstone_partition(row: Mapping[str, Any], router: Router) -> int:
    """A tombstone row goes where the changes of the row it dates go (its key columns are the
    table's, its table the origin's names: a table renamed by map_tables falls back to the
    delete's own time, as a missing tombstone does)."""
    table = (str(row.get(tombstones.COL_SCHEMA)), str(row.get(tombstones.COL_TABLE)))
    columns = router.primary_keys.get(table, ())
    if not columns or any(column not in row for column in columns):
        return router.partition(table)
    return router.partition((*table, *(row[column] for column in columns)))


def route(txn: Transaction, router: Router) -> None:
    """Add every row change of ``txn`` (a fragment, after the chain) to ``router``."""
    scn = txn.scn.to_bytes()
    for index, c in enumerate(txn.changes):
        at = position(scn, txn.fragment, index)
        router.add(at, scn, txn.timestamp, c.schema, c.table, c.before, c.after)


def transactions(entries: Sequence[Entry]) -> Iterator[Transaction]:
    """Reduced entries (in SCN order) as the engine takes them: one Transaction per run of
    changes sharing an SCN, with its commit time (conflict log entries and lww need both)."""
    run: list[Entry] = []
    for entry in entries:
        if run and run[0][SCN_] != entry[SCN_]:
            yield _transaction(run)
            run = []
        run.append(entry)
    if run:
        yield _transaction(run)


def _transaction(run: list[Entry]) -> Transaction:
    first = run[0]
    changes = tuple(RowChange(e[SCHEMA], e[TABLE], op_of(e), e[BEFORE], e[AFTER]) for e in run)
    return Transaction(SCN.from_bytes(first[SCN_]), 0, None, first[TIMESTAMP], changes)
