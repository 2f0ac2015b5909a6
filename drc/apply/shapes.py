"""Which writes of one target transaction may be merged across others: batches by shape. Pure.

The planner (drc.apply.plan.Planner) gives each row change a *shape* (inserts into one table
with the same columns; deletes from one keyed table; an update has none: it is a statement of
its own) and the *keys* it touches. A change joins the latest open batch of its shape, which
moves it earlier, past every write placed after that batch, when key order allows:

- Keys. A change touches the primary key values of its before and after images. Strings are
  compared folded (case, accents, trailing spaces), so two values a collation may call equal
  always collide here: folding only ever blocks a move. A change may not pass a write that
  touches one of its keys: a batch remembers the latest position holding each key, so the
  check is one lookup per key.
- Tables with UNIQUE secondary keys: every change touches one key for the whole table, so the
  table keeps stream order (consecutive changes of one shape still merge). Their images could
  say which unique values collide, but only as the source had them: in a replay (a snapshot's
  converging window, a rewind) a target row may hold a unique value its image does not show,
  and an insert moved ahead of the write that frees it would fail where the changes one by one
  succeed (found by the property test of tests/unit/test_apply_shapes.py).
- Keyless tables (no primary key, matched by whole row) touch one key for the whole table: no
  change of such a table passes another change of it, so the table keeps stream order.
- Tables whose writes may be seen by other rows (``TargetTable.keeps_order``: a trigger that
  fires for DRC's writes, or a foreign key to or from the table) are barriers: their change
  joins a batch only if that batch is the last one (plain neighbours), and nothing placed after
  it moves before it. The server lists a trigger only to a user with TRIGGER on its table: the
  apply user sees every trigger with TRIGGER granted (a trigger it cannot see is not a barrier).
- DDL never reaches a planner: a group is committed before a schema change is applied.
- Conflict-resolved changes (drc.conflicts) come in stream order after their resolution; the
  key rule keeps each one in order with every other change to its keys.

So any two writes touching one row run in stream order, each statement finds what it would
have found one by one, and its affected-row count (so :class:`drc.apply.plan.Effects`) is the
same: a multi-row upsert or delete counts per row, in row order.

A batch is *closed* once a later batch of its shape exists, or a barrier follows it. Closed
batches at the front are handed out as they close (the sink sends them while the rest is
planned); ``window`` bounds how many placed writes wait behind an open one.
"""

from __future__ import annotations

import unicodedata
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

from drc.core.events import RowChange
from drc.core.target_table import TargetTable, values_of

B = TypeVar("B")
# The key every change of a table with UNIQUE secondary keys touches (see the module doc).
UNIQUE_KEYS = "unique keys"
# Placed writes kept waiting behind the oldest open batch at most: about one of the sink's
# pipelined chunks (drc.apply.sink.WriteBatch), so the first chunk goes out while the rest of a
# large group is planned; closing a batch that early costs a statement per window.
WINDOW = 200


class Batches(Generic[B]):
    """Writes and open batches (``B``) in write order, indexed by shape and by key."""

    def __init__(self, window: int = WINDOW) -> None:
        self._window = window
        self._pending: deque[tuple[B, Hashable | None]] = deque()  # (item, its shape)
        self._first = 0  # position of _pending[0]
        self._floor = 0  # nothing joins a batch placed before it
        self._latest: dict[Hashable, tuple[int, B]] = {}  # shape -> its latest batch
        self._last: dict[Hashable, int] = {}  # key -> latest position touching it

    def open_batch(self, shape: Hashable, keys: Iterable[Hashable], barrier: bool) -> int | None:
        """The position of the batch a change of ``shape`` touching ``keys`` may join."""
        found = self._latest.get(shape)
        if found is None:
            return None
        position = found[0]
        if position < self._floor or (barrier and position != self._first + len(self._pending) - 1):
            return None
        last = self._last
        for key in keys:
            if last.get(key, -1) > position:
                return None
        return position

    def item(self, position: int) -> B:
        return self._pending[position - self._first][0]

    def place(self, item: B, shape: Hashable | None) -> int:
        """Place a write (``shape`` None) or a new batch after everything placed so far."""
        position = self._first + len(self._pending)
        self._pending.append((item, shape))
        if shape is not None:
            self._latest[shape] = (position, item)
        return position

    def touched(self, keys: Iterable[Hashable], position: int, barrier: bool) -> None:
        """Record that the change placed at ``position`` touches ``keys``."""
        last = self._last
        for key in keys:
            last[key] = position
        if barrier:
            self._floor = max(self._floor, position)

    def ready(self) -> list[B]:
        """The closed writes and batches at the front, in write order."""
        pending = self._pending
        if len(pending) > self._window:  # close the oldest batch
            self._floor = max(self._floor, self._first + 1)
        out: list[B] = []
        while pending:
            item, shape = pending[0]
            if shape is not None and self._first >= self._floor:
                found = self._latest.get(shape)
                if found is not None and found[0] == self._first:
                    break  # still open
            pending.popleft()
            if shape is not None and self._latest.get(shape, (-1,))[0] == self._first:
                del self._latest[shape]
            self._first += 1
            out.append(item)
        return out

    def drain(self) -> list[B]:
        """Everything placed, in write order; the batches start afresh."""
        out = [item for item, _ in self._pending]
        self._first += len(self._pending)
        self._floor = self._first
        self._pending.clear()
        self._latest.clear()
        self._last.clear()
        return out


def touched_keys(change: RowChange, table: TargetTable, name: Hashable) -> list[Hashable]:
    """The keys ``change`` touches (see the module docstring); ``name``: the table's, the same
    however it is spelled (``table_key``)."""
    key = table.primary_key
    if not key:
        return [name]
    keys: list[Hashable] = [(name, UNIQUE_KEYS)] if table.unique_keys else []
    seen = None
    for image in (change.before, change.after):
        if image is None:
            continue
        values = values_of(key, image)
        if values == seen:
            continue
        seen = values
        if len(values) != 1 or type(values[0]) is not int:
            values = tuple([_fold(v) for v in values])
        keys.append((name, 0, values))
    return keys


def table_key(table: TargetTable) -> Hashable:
    return (table.schema.lower(), table.table.lower())


def _fold(value: Any) -> Any:
    """A value as the loosest collation could compare it: equal under any collation -> equal
    here (some values unequal under theirs become equal: that only blocks a move)."""
    kind = type(value)
    if kind is str:
        text = value.casefold().rstrip(" ")
        if not text.isascii():
            decomposed = unicodedata.normalize("NFKD", text)
            text = "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
        return text
    if kind is bytes:
        return value.lower().rstrip(b" ")
    return value
