"""Catch-up's pure steps: the reduction to net changes per key, and the split at DDL."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.reduce import (
    Change,
    DdlStep,
    Span,
    changes_of,
    plan_steps,
    reduce_changes,
    split_transactions,
)
from drc.core.scn import SCN

KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("db", "t"): ("id",),
    ("db", "pair"): ("a", "b"),
    ("db", "bag"): (),
}


def scn(pos: int) -> SCN:
    return SCN(1, 7, 1, pos)


def at(pos: int, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Change:
    table = "t"
    return Change(scn(pos), pos, RowChange("db", table, Op(op), before, after))


def test_insert_then_delete_of_a_row_made_in_the_span_is_nothing() -> None:
    changes = [
        at(1, "insert", None, {"id": 1, "v": "a"}),
        at(2, "delete", {"id": 1, "v": "a"}, None),
    ]
    assert reduce_changes(changes, KEYS) == []


def test_repeated_updates_keep_the_first_before_and_the_last_after_image() -> None:
    rows = [{"id": 1, "v": str(n)} for n in range(5)]
    changes = [at(n + 1, "update", rows[n], rows[n + 1]) for n in range(4)]
    [net] = reduce_changes(changes, KEYS)
    assert net == Change(scn(4), 4, RowChange("db", "t", Op.UPDATE, rows[0], rows[4]))


def test_insert_then_updates_is_one_insert_of_the_last_image() -> None:
    changes = [
        at(1, "insert", None, {"id": 1, "v": "a"}),
        at(2, "update", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
    ]
    [net] = reduce_changes(changes, KEYS)
    assert (net.change.op, net.change.after, net.scn) == (Op.INSERT, {"id": 1, "v": "b"}, scn(2))


def test_update_then_delete_is_a_delete_of_the_first_before_image() -> None:
    changes = [
        at(1, "update", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
        at(2, "delete", {"id": 1, "v": "b"}, None),
    ]
    [net] = reduce_changes(changes, KEYS)
    assert (net.change.op, net.change.before) == (Op.DELETE, {"id": 1, "v": "a"})


def test_delete_then_insert_of_the_same_key_is_an_update() -> None:
    changes = [
        at(1, "delete", {"id": 1, "v": "a"}, None),
        at(2, "insert", None, {"id": 1, "v": "z"}),
    ]
    [net] = reduce_changes(changes, KEYS)
    assert (net.change.op, net.change.before, net.change.after) == (
        Op.UPDATE,
        {"id": 1, "v": "a"},
        {"id": 1, "v": "z"},
    )


def test_an_update_that_moves_the_key_deletes_the_old_key_before_inserting_the_new() -> None:
    changes = [at(1, "update", {"id": 1, "v": "a"}, {"id": 2, "v": "a"})]
    out = reduce_changes(changes, KEYS)
    assert [(c.change.op, c.change.row["id"]) for c in out] == [(Op.DELETE, 1), (Op.INSERT, 2)]


def test_a_keyless_table_is_kept_as_it_came_in_scn_order() -> None:
    bag = [Change(scn(n), n, RowChange("db", "bag", Op.INSERT, None, {"v": 1})) for n in (1, 2, 3)]
    keyed = at(4, "update", {"id": 1, "v": "a"}, {"id": 1, "v": "b"})
    assert reduce_changes([*bag, keyed], KEYS) == [*bag, keyed]


def test_an_unchanged_single_change_is_passed_through_as_is() -> None:
    change = at(3, "insert", None, {"id": 9, "v": "x"})
    assert reduce_changes([change], KEYS) == [change]


def test_a_table_without_a_known_key_is_refused() -> None:
    change = Change(scn(1), 1, RowChange("db", "other", Op.INSERT, None, {"id": 1}))
    with pytest.raises(ValueError, match="db.other"):
        reduce_changes([change], KEYS)


def test_a_row_lacking_a_key_column_is_refused() -> None:
    with pytest.raises(ValueError, match="lacks primary key column"):
        reduce_changes([at(1, "insert", None, {"v": "x"})], KEYS)


def test_output_is_in_order_of_each_keys_last_change() -> None:
    changes = [
        at(1, "update", {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
        at(2, "update", {"id": 2, "v": "a"}, {"id": 2, "v": "b"}),
        at(3, "update", {"id": 1, "v": "b"}, {"id": 1, "v": "c"}),
    ]
    assert [c.scn for c in reduce_changes(changes, KEYS)] == [scn(2), scn(3)]


# -- the invariant, on random histories -------------------------------------------------------

State = dict[tuple[str, str], Any]  # keyed: {key: row}; keyless: Counter of row items


def _key(table: tuple[str, str], row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row[c] for c in KEYS[table])


def _frozen(row: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(row.items()))


def apply_strictly(state: State, changes: Iterable[Change]) -> State:
    """Apply as a database would, asserting every before-image matches the row it changes."""
    out: State = {t: (Counter(rows) if not KEYS[t] else dict(rows)) for t, rows in state.items()}
    for item in changes:
        c = item.change
        table = (c.schema, c.table)
        rows = out[table]
        if not KEYS[table]:
            if c.before is not None:
                assert rows[_frozen(c.before)] > 0, f"no row {c.before} to change"
                rows[_frozen(c.before)] -= 1
            if c.after is not None:
                rows[_frozen(c.after)] += 1
            continue
        if c.before is not None:
            assert rows.pop(_key(table, c.before), None) == c.before, f"{c.before} not there"
        if c.after is not None:
            assert _key(table, c.after) not in rows, f"duplicate key {c.after}"
            rows[_key(table, c.after)] = c.after
    return {t: (+rows if isinstance(rows, Counter) else rows) for t, rows in out.items()}


@st.composite
def histories(draw: st.DrawFn) -> tuple[State, list[Change]]:
    """A random start state and a valid history of changes on it (a few hot keys, key moves,
    deletes and re-inserts, a keyless table with identical rows)."""
    ids = st.integers(0, 6)
    values = st.sampled_from("abc")
    state: State = {
        ("db", "t"): {},
        ("db", "pair"): {},
        ("db", "bag"): Counter(),
    }
    for i in draw(st.sets(ids, max_size=5)):
        state["db", "t"][(i,)] = {"id": i, "v": draw(values)}
    for a, b in draw(st.sets(st.tuples(ids, ids), max_size=4)):
        state["db", "pair"][(a, b)] = {"a": a, "b": b, "v": draw(values)}
    for _ in range(draw(st.integers(0, 3))):
        state["db", "bag"][_frozen({"v": draw(values)})] += 1
    start = apply_strictly(state, [])
    live = apply_strictly(state, [])
    changes: list[Change] = []
    pos = 10
    for _ in range(draw(st.integers(0, 40))):
        pos += draw(st.sampled_from((0, 0, 7)))  # several changes may share a transaction
        table = draw(st.sampled_from(sorted(KEYS)))
        change = _random_change(draw, table, live[table], ids, values)
        if change is None:
            continue
        item = Change(scn(pos), pos, change)
        live = apply_strictly(live, [item])
        changes.append(item)
    return start, changes


def _random_change(
    draw: st.DrawFn, table: tuple[str, str], rows: Any, ids: Any, values: Any
) -> RowChange | None:
    op = draw(st.sampled_from(("insert", "update", "update", "delete")))
    db, name = table
    if not KEYS[table]:
        present = [dict(row) for row in sorted(rows.elements())]
        after = {"v": draw(values)}
        if op == "insert" or not present:
            return RowChange(db, name, Op.INSERT, None, after)
        before = draw(st.sampled_from(present))
        return RowChange(db, name, Op(op), before, after if op == "update" else None)

    def fresh() -> dict[str, Any] | None:
        cols = KEYS[table]
        key = tuple(draw(ids) for _ in cols)
        if key in rows:
            return None
        return {**dict(zip(cols, key, strict=True)), "v": draw(values)}

    if op == "insert" or not rows:
        row = fresh()
        return None if row is None else RowChange(db, name, Op.INSERT, None, row)
    before = rows[draw(st.sampled_from(sorted(rows)))]
    if op == "delete":
        return RowChange(db, name, Op.DELETE, before, None)
    if draw(st.booleans()):
        moved = fresh()
        if moved is not None:
            return RowChange(db, name, Op.UPDATE, before, moved)
    return RowChange(db, name, Op.UPDATE, before, {**before, "v": draw(values)})


@settings(max_examples=400, deadline=None)
@given(histories())
def test_reduced_changes_end_in_the_state_serial_apply_reaches(
    history: tuple[State, list[Change]],
) -> None:
    start, changes = history
    reduced = reduce_changes(changes, KEYS)
    # apply_strictly also proves every reduced before-image is the row the target holds.
    assert apply_strictly(start, reduced) == apply_strictly(start, changes)
    keyed = [c for c in reduced if KEYS[c.change.schema, c.change.table]]
    keys = Counter(
        (c.change.table, _key((c.change.schema, c.change.table), c.change.row)) for c in keyed
    )
    assert all(n == 1 for n in keys.values()), "one net change per key"
    assert [c.scn for c in reduced] == sorted(c.scn for c in reduced)


# -- splitting at DDL -------------------------------------------------------------------------


def txn(pos: int, ddl: bool = False) -> Transaction:
    change = RowChange("db", "t", Op.INSERT, None, {"id": pos})
    return Transaction(
        scn(pos),
        7,
        None,
        pos,
        () if ddl else (change,),
        (SchemaChange("db", "ALTER TABLE t ADD c INT"),) if ddl else (),
    )


def test_transactions_split_at_every_ddl_in_order() -> None:
    txns = [txn(1), txn(2), txn(3, ddl=True), txn(4, ddl=True), txn(5)]
    assert list(split_transactions(txns)) == [(txns[0], txns[1]), txns[2], txns[3], (txns[4],)]


def test_changes_of_carry_their_transactions_scn_and_time() -> None:
    [only] = changes_of([txn(4)])
    assert (only.scn, only.timestamp) == (scn(4), 4)


def test_plan_steps_puts_each_ddl_between_spans() -> None:
    steps = plan_steps(scn(0), scn(100), [scn(50), scn(20), scn(200), scn(0)])
    assert steps == [
        Span(scn(0), scn(20), end_included=False),
        DdlStep(scn(20)),
        Span(scn(20), scn(50), end_included=False),
        DdlStep(scn(50)),
        Span(scn(50), scn(100), end_included=True),
    ]


def test_plan_steps_ending_at_a_ddl_has_no_span_after_it() -> None:
    assert plan_steps(scn(0), scn(20), [scn(20)]) == [
        Span(scn(0), scn(20), end_included=False),
        DdlStep(scn(20)),
    ]
    assert plan_steps(scn(5), scn(5), []) == []


def test_a_span_contains_exactly_its_scns() -> None:
    span = Span(scn(10), scn(20), end_included=False)
    assert [p for p in (10, 11, 19, 20) if span.contains(scn(p))] == [11, 19]
    assert Span(scn(10), scn(20), end_included=True).contains(scn(20))


def test_a_segment_going_on_with_the_spans_last_transaction_overlaps_it() -> None:
    """Segments of (first record, last record): a large transaction at 20 whose fragments
    fill several segments. Those after its first have 20 as the SCN before them, and hold the
    rest of its rows (catch-up once left them out of a span ending at 20: rows lost)."""
    last = Span(scn(10), scn(20), end_included=True)
    assert last.overlaps(scn(20), scn(20)) and last.overlaps(scn(15), scn(20))
    assert last.overlaps(scn(20), scn(30)) and not last.overlaps(scn(21), scn(30))
    assert not last.overlaps(scn(5), scn(10))
    before_ddl = Span(scn(10), scn(20), end_included=False)
    assert not before_ddl.overlaps(scn(20), scn(20)) and before_ddl.overlaps(scn(19), scn(25))
    assert before_ddl.overlaps(scn(11), scn(11)) and not before_ddl.overlaps(scn(1), scn(10))


def test_a_range_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="before its start"):
        plan_steps(scn(9), scn(3), [])
