"""Row changes -> the writes that apply them idempotently, grouped where order allows. Pure.

Idempotency: applying a change whose effect is already on the target converges instead of
failing, so a replayed SCN range changes nothing (the checkpoint makes replays rare: only an
operator rewinding it causes one). Each fix is counted (:class:`Effects`):

    change   write                                    when the row is not as expected
    insert   upsert: INSERT .. ON DUPLICATE KEY       key already there: every column is set
             UPDATE every column                      (a "duplicate insert", counted when the
                                                      existing row differed)
    update   UPDATE .. WHERE key = before key         no row matched: insert the after image
                                                      ("missing update"); the after key taken
                                                      by another row: delete the before row and
                                                      upsert the after image
    counter  UPDATE .. SET n = n + amount WHERE key   no row matched: insert the after image
    update   (drc.core.events.CounterUpdate, made      ("missing update"; not expected: conflict
             by conflict resolution)                   detection found and locked the row)
    delete   DELETE .. WHERE key IN (...)             fewer rows deleted than asked: a counted
                                                      no-op ("missing delete")

Affected-row counts are *matched* rows (the session connects with CLIENT.FOUND_ROWS), so an
update that finds the row already at its after image is not mistaken for a missing row.

Tables without a primary key (``no_primary_key``): "refuse" raises NoPrimaryKeyError naming the
table; "match_whole_row" applies each change exactly as the row event did, so the target ends
with the same *multiset* of rows as the source (identical rows are common in log tables):

    insert   INSERT (plain: an identical row already there is another row, kept)
    update   UPDATE .. WHERE every column <=> before LIMIT 1   no row matched: insert the after
                                                               image ("missing update")
    delete   DELETE .. WHERE every column <=> before LIMIT 1   none matched: "missing delete"

Such a table gets no replay idempotency: the checkpoint commits with the writes, so a change is
applied exactly once, and a rewound channel would insert a keyless row again. A keyless table
with a UNIQUE key that refuses an insert has diverged from the source: the channel stops
(TargetDivergedError) rather than guess which row is meant.

Grouping (:class:`Planner`): inserts into the same table with the same columns become one
multi-row upsert (a plain multi-row INSERT for a keyless table), deletes from the same keyed
table one multi-key delete, bounded by rows and bytes; each update stays a statement of its
own. A change joins the latest batch of its shape across other writes of the transaction only
where key order allows (drc.apply.shapes: no write it passes touches a row it touches by any
unique key, keyless tables and tables with triggers or foreign keys keep stream order), so each
row's writes run in stream order and the counts above stay exact per row.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from drc.apply import shapes
from drc.apply.effects import Effects
from drc.core.events import CounterUpdate, Op, RowChange
from drc.core.target_errors import MissingColumnError, NoPrimaryKeyError, TargetDivergedError
from drc.core.target_table import TargetTable, key_of
from drc.mysql import sql
from drc.mysql.errors import DuplicateKey

NoPrimaryKey = Literal["refuse", "match_whole_row"]
# The ops as constants: an enum member looked up on its class costs a descriptor call each time.
_INSERT: Final = Op.INSERT
_UPDATE: Final = Op.UPDATE
_DELETE: Final = Op.DELETE
MAX_ROWS_PER_STATEMENT = 1000
MAX_BYTES_PER_STATEMENT = 4 << 20  # well under max_allowed_packet (16 MB by default)


@dataclass(frozen=True, slots=True)
class Upsert:
    table: TargetTable
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __reduce__(self) -> tuple[Any, ...]:  # as drc.mysql.sql.Statement's
        return Upsert, (self.table, self.columns, self.rows)

    def statement(self) -> sql.Statement:
        return sql.upsert(self.table.schema, self.table.table, self.columns, self.rows)


@dataclass(frozen=True, slots=True)
class Insert:
    """Rows of a table without a primary key: always inserted, identical rows included."""

    table: TargetTable
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]

    def __reduce__(self) -> tuple[Any, ...]:  # as drc.mysql.sql.Statement's
        return Insert, (self.table, self.columns, self.rows)

    def statement(self) -> sql.Statement:
        return sql.insert(self.table.schema, self.table.table, self.columns, self.rows)


@dataclass(frozen=True, slots=True)
class Update:
    table: TargetTable
    columns: tuple[str, ...]
    values: tuple[Any, ...]
    match: sql.Statement
    insert: Upsert | Insert  # the after image, written if no row matched
    delete_before: Delete | None  # set when the key changes: frees it if the after key is taken
    counters: CounterUpdate | None = None  # adds to its counter columns instead

    def __reduce__(self) -> tuple[Any, ...]:  # as drc.mysql.sql.Statement's
        return Update, (
            self.table,
            self.columns,
            self.values,
            self.match,
            self.insert,
            self.delete_before,
            self.counters,
        )

    def statement(self) -> sql.Statement:
        t, counters = self.table, self.counters
        if counters is not None:
            after = counters.after
            assert after is not None
            assigned = [(c, after[c]) for c in counters.assigned]
            return sql.add_to(
                t.schema, t.table, assigned, counters.kept, counters.added, self.match
            )
        return sql.update(t.schema, t.table, self.columns, self.values, self.match)


@dataclass(frozen=True, slots=True)
class Delete:
    table: TargetTable
    match: sql.Statement
    count: int

    def __reduce__(self) -> tuple[Any, ...]:  # as drc.mysql.sql.Statement's
        return Delete, (self.table, self.match, self.count)

    def statement(self) -> sql.Statement:
        return sql.delete(self.table.schema, self.table.table, self.match)


Write = Upsert | Insert | Update | Delete
Executor = Callable[[sql.Statement], int]  # runs a statement, returns matched/affected rows


def settled(write: Write, affected: int) -> Effects | None:
    """The effects of ``write`` from its affected-row count, when no fallback is needed.

    None for an update that matched no row: its fallback must run right after it, before any
    later statement, so a batch that ran it must be rolled back and re-run with :func:`run`.
    """
    if isinstance(write, Update):
        return Effects(1) if affected else None
    if isinstance(write, Upsert):
        # Affected = 1 per inserted row, 1 per identical existing row, 2 per changed one.
        return Effects(len(write.rows), duplicate_inserts=max(0, affected - len(write.rows)))
    if isinstance(write, Insert):
        return Effects(len(write.rows))
    return Effects(write.count, missing_deletes=max(0, write.count - affected))


def run(write: Write, execute: Executor) -> Effects:
    """Apply one write with its idempotent fallbacks (see the module docstring)."""
    if isinstance(write, Update):
        return _run_update(write, execute)
    try:
        affected = execute(write.statement())
    except DuplicateKey as exc:
        if isinstance(write, Insert):
            raise _diverged(write.table, exc) from exc
        raise
    effects = settled(write, affected)
    assert effects is not None
    return effects


def _run_update(write: Update, execute: Executor) -> Effects:
    try:
        affected = execute(write.statement())
    except DuplicateKey:
        if write.delete_before is None:
            raise
        # The new key is already taken (a replay): the after image wins, the before row goes.
        execute(write.delete_before.statement())
        execute(write.insert.statement())
        return Effects(1, duplicate_inserts=1)
    if affected:
        return Effects(1)
    try:
        execute(write.insert.statement())
    except DuplicateKey as exc:
        if isinstance(write.insert, Insert):
            raise _diverged(write.table, exc) from exc
        raise
    return Effects(1, missing_updates=1)


def _diverged(table: TargetTable, exc: DuplicateKey) -> TargetDivergedError:
    return TargetDivergedError(
        f"{table.name} has no primary key, and a UNIQUE key of the target refused a row the "
        f"source inserted ({exc}): the target's rows differ from the source's. Compare the "
        "table on both sides and fix the target (or give the table a primary key); nothing "
        "after the last checkpoint was applied"
    )


class Planner:
    """Turns row changes into writes, batched by shape where key order allows (drc.apply.shapes).

    ``add`` returns the writes that are complete (batches closed at the front); ``finish``
    returns the rest. Call ``finish`` before committing.
    """

    def __init__(
        self,
        no_primary_key: NoPrimaryKey = "refuse",
        max_rows: int = MAX_ROWS_PER_STATEMENT,
        max_bytes: int = MAX_BYTES_PER_STATEMENT,
        window: int = shapes.WINDOW,
    ) -> None:
        self._no_pk = no_primary_key
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._batches: shapes.Batches[Write | _Run] = shapes.Batches(window)
        self._fitting: set[tuple[int, tuple[str, ...]]] = set()  # (id(table), columns) checked
        self._names: dict[int, Hashable] = {}  # id(table) -> shapes.table_key

    def fits(self, change: RowChange, table: TargetTable) -> bool:
        """Whether ``table`` has every column ``change`` writes (checked once per shape)."""
        return self._fits(change, table, tuple(change.row))

    def _fits(self, change: RowChange, table: TargetTable, columns: tuple[str, ...]) -> bool:
        key = (id(table), columns)
        if key in self._fitting:
            return True
        if table.missing(columns) or _lacks_key(change, table):
            return False
        self._fitting.add(key)
        return True

    def add(self, change: RowChange, table: TargetTable) -> list[Write]:
        op, after = change.op, change.after
        image = after if after is not None else change.before
        assert image is not None
        columns = tuple(image)  # the image's columns: once per change, used for every check
        if not self._fits(change, table, columns):
            _missing_column(change, table)
        keyed = bool(table.primary_key)
        if not keyed and self._no_pk == "refuse":
            raise NoPrimaryKeyError(
                f"{table.name} has no primary key and this channel has no_primary_key = "
                '"refuse": add a primary key to the table, or set no_primary_key = '
                '"match_whole_row" for the channel; nothing after the last checkpoint '
                "was applied"
            )
        batches = self._batches
        name = self._names.get(id(table))
        if name is None:
            name = self._names[id(table)] = shapes.table_key(table)
        keys = shapes.touched_keys(change, table, name)
        barrier = table.keeps_order
        if op is _UPDATE or not keyed and op is _DELETE:
            write = (
                _keyed_update(change, table, columns) if keyed else _whole_row_write(change, table)
            )
            position = batches.place(write, None)
        else:
            # the session's cached table object: a table read again is another shape
            shape = (op, id(table), columns if op is _INSERT else ())
            found = batches.open_batch(shape, keys, barrier)
            run_ = None if found is None else batches.item(found)
            if isinstance(run_, _Run) and not run_.full(self._max_rows, self._max_bytes):
                assert found is not None
                run_.add(image, table)
                position = found
            else:
                position = batches.place(_Run.start(op, image, columns, table), shape)
        batches.touched(keys, position, barrier)
        ready = batches.ready()
        return [_written(item) for item in ready] if ready else []

    def finish(self) -> list[Write]:
        return [_written(item) for item in self._batches.drain()]


class _Run:
    """Inserts (same table and columns) or deletes (same table) being merged."""

    def __init__(self, op: Op, table: TargetTable, columns: tuple[str, ...]) -> None:
        self.op = op
        self.inserts = op is _INSERT
        self.table = table
        self.columns = columns
        self.rows: list[tuple[Any, ...]] = []
        self.bytes = 0

    @classmethod
    def start(
        cls, op: Op, image: Mapping[str, Any], columns: tuple[str, ...], table: TargetTable
    ) -> _Run:
        """A run of ``op`` starting with a change's row ``image`` (``columns``: its names)."""
        run_ = cls(op, table, columns if op is _INSERT else table.primary_key)
        run_.add(image, table)
        return run_

    def full(self, max_rows: int, max_bytes: int) -> bool:
        return len(self.rows) >= max_rows or self.bytes >= max_bytes

    def add(self, image: Mapping[str, Any], table: TargetTable) -> None:
        """A change's row image: the after image of an insert, the before image of a delete."""
        row = tuple(image.values()) if self.inserts else key_of(table, image)
        self.rows.append(row)
        self.bytes += _size(row)

    def write(self) -> Write:
        if self.inserts and not self.table.primary_key:
            return Insert(self.table, self.columns, tuple(self.rows))
        if self.inserts:
            return Upsert(self.table, self.columns, tuple(self.rows))
        t = self.table
        return Delete(t, sql.by_keys(t.primary_key, self.rows, t.float_columns), len(self.rows))


def _written(item: Write | _Run) -> Write:
    return item.write() if isinstance(item, _Run) else item


def _keyed_update(change: RowChange, table: TargetTable, columns: tuple[str, ...]) -> Update:
    """``columns``: the after image's names."""
    before, after = change.before, change.after
    assert before is not None and after is not None
    old_key, new_key = key_of(table, before), key_of(table, after)
    values = tuple(after.values())
    insert = Upsert(table, columns, (values,))
    match = sql.by_keys(table.primary_key, [old_key], table.float_columns)
    free = Delete(table, match, 1) if old_key != new_key else None
    counters = change if isinstance(change, CounterUpdate) else None
    return Update(table, columns, values, match, insert, free, counters)


def _whole_row_write(change: RowChange, table: TargetTable) -> Write:
    """An update or delete of exactly one row equal to the before image (keyless tables)."""
    after = change.after
    before = change.before
    assert before is not None
    match = sql.by_whole_row(tuple(before), tuple(before.values()), table.float_columns)
    if change.op is _DELETE:
        return Delete(table, match, 1)
    assert after is not None
    insert = Insert(table, tuple(after), (tuple(after.values()),))
    return Update(table, tuple(after), tuple(after.values()), match, insert, None)


def _lacks_key(change: RowChange, table: TargetTable) -> list[str]:
    """Key columns the change's image lacks (an excluded key column), names case-insensitive."""
    have = {name.lower() for name in change.row}
    return [k for k in table.primary_key if k.lower() not in have]


def _missing_column(change: RowChange, table: TargetTable) -> None:
    lacking = _lacks_key(change, table)
    if lacking:
        raise MissingColumnError(
            f"changes to {table.name} carry no {', '.join(map(repr, lacking))}, a column of its "
            "primary key: a channel's exclude_columns must not name a key column; remove it "
            "there (nothing after the last checkpoint was applied)"
        )
    missing = table.missing(list(change.row))
    if missing:
        raise MissingColumnError(
            f"target table {table.name} has no column {missing[0]!r}"
            + (f" (nor {', '.join(map(repr, missing[1:]))})" if missing[1:] else "")
            + ", which the source writes: add it to the target table, or map it with "
            "map_columns; nothing after the last checkpoint was applied"
        )


def _size(row: tuple[Any, ...]) -> int:
    size = 8 * len(row)
    for value in row:
        kind = type(value)
        if kind is str or kind is bytes:
            size += len(value)
    return size
