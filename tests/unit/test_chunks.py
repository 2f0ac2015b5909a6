"""Key-range chunks: key choice, range predicates, boundaries (drc.core.chunks)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from drc.core.chunks import (
    Chunk,
    IndexColumn,
    Stride,
    choose_key,
    from_boundaries,
    integer_boundaries,
    is_dense,
    merged,
    range_predicate,
    split_even,
    take_adjacent,
)


def col(index: str, seq: int, name: str, *, unique: bool = True, nullable: bool = False,
        data_type: str = "int", prefix: bool = False) -> IndexColumn:  # fmt: skip
    return IndexColumn(index, unique, seq, name, nullable, data_type, prefix)


def test_the_primary_key_is_chosen_over_unique_keys() -> None:
    key = choose_key([col("u", 1, "code"), col("PRIMARY", 1, "a"), col("PRIMARY", 2, "b")])
    assert key.index == "PRIMARY" and key.columns == ("a", "b") and key.splittable


def test_without_a_primary_key_the_narrowest_unique_not_null_key_is_chosen() -> None:
    key = choose_key([
        col("wide", 1, "x"), col("wide", 2, "y"), col("narrow", 1, "code", data_type="varchar"),
        col("nullable", 1, "n", nullable=True), col("plain", 1, "p", unique=False),
    ])  # fmt: skip
    assert (key.index, key.columns, key.types) == ("narrow", ("code",), ("varchar",))


def test_a_table_without_a_usable_key_is_one_chunk_with_a_note() -> None:
    key = choose_key([col("nullable", 1, "n", nullable=True), col("pre", 1, "t", prefix=True)])
    assert key.columns == () and not key.splittable
    assert "one chunk" in (key.note or "")


def test_a_key_type_the_planner_cannot_split_is_named() -> None:
    key = choose_key([col("PRIMARY", 1, "f", data_type="float")])
    assert not key.splittable and "f (float)" in (key.note or "")


def test_an_unbounded_range_is_everything() -> None:
    assert range_predicate(["`a`"], None, None) == ("1 = 1", ())


def test_a_single_column_range_is_lower_exclusive_upper_inclusive() -> None:
    assert range_predicate(["`a`"], (5,), (9,)) == ("`a` > %s AND `a` <= %s", (5, 9))


def test_a_composite_bound_is_expanded_with_a_leading_index_bound() -> None:
    text, params = range_predicate(["`a`", "`b`"], (1, "x"), None)
    assert text == "`a` >= %s AND ((`a` > %s) OR (`a` = %s AND `b` > %s))"
    assert params == (1, 1, 1, "x")


def _evaluate(lower: tuple[int, ...] | None, upper: tuple[int, ...] | None,
              row: tuple[int, ...]) -> bool:  # fmt: skip
    """What the generated predicate selects, evaluated in Python (ops on ints only)."""
    names = [f"c{i}" for i in range(len(row))]
    text, params = range_predicate(names, lower, upper)
    expression = text.replace(" = ", " == ").replace("AND", "and").replace("OR", "or")
    for value in params:
        expression = expression.replace("%s", repr(value), 1)
    return bool(eval(expression, {}, dict(zip(names, row, strict=True))))  # noqa: S307


@given(st.integers(1, 3), st.data())
def test_a_composite_range_selects_exactly_the_row_values_between(
    width: int, data: st.DataObject
) -> None:
    values = st.tuples(*[st.integers(0, 2)] * width)
    lower = data.draw(st.none() | values)
    upper = data.draw(st.none() | values)
    for row in itertools.product(range(3), repeat=width):
        expected = (lower is None or row > lower) and (upper is None or row <= upper)
        assert _evaluate(lower, upper, row) == expected


def test_chunks_from_boundaries_cover_everything_once() -> None:
    chunks = from_boundaries("d", "t", ["id"], [(10,), (20,)], 10)
    assert [(c.lower, c.upper, c.number) for c in chunks] == [
        (None, (10,), 0), ((10,), (20,), 1), ((20,), None, 2)]  # fmt: skip


@given(st.integers(-1000, 1000), st.integers(0, 5000), st.integers(1, 50))
def test_integer_boundaries_split_a_range_evenly(low: int, width: int, pieces: int) -> None:
    high = low + width
    bounds = [b for (b,) in integer_boundaries(low, high, pieces)]
    assert bounds == sorted(set(bounds)) and all(low <= b < high for b in bounds)
    edges = [low - 1, *bounds, high]
    sizes = [edges[i + 1] - edges[i] for i in range(len(edges) - 1)]
    assert sum(sizes) == width + 1 and max(sizes) - min(sizes) <= 1


def test_a_sparse_integer_key_is_not_dense() -> None:
    assert is_dense(1, 1000, 900) and not is_dense(1, 1_000_000, 1000) and not is_dense(1, 5, 0)


def test_adjacent_chunks_are_taken_together_up_to_a_gap_or_another_table() -> None:
    plan = from_boundaries("db", "t", ["id"], [(10,), (20,), (30,)], 10)
    other = from_boundaries("db", "u", ["id"], [(5,)], 5)
    assert take_adjacent(plan, 0, 3) == plan[:3]
    assert take_adjacent([*plan, *other], 1, 10) == plan[1:]  # stops at the next table
    assert take_adjacent([plan[0], plan[2]], 0, 5) == [plan[0]]  # (10, 20] is missing
    whole = [Chunk("db", "k", (), None, None, 7)]
    assert take_adjacent(whole * 2, 0, 5) == whole  # a whole-table chunk never merges
    one = merged(plan[1:3])
    assert (one.lower, one.upper, one.estimated_rows, one.number) == ((10,), (30,), 20, 1)


@given(st.lists(st.integers(), max_size=50), st.integers(1, 12))
def test_split_even_keeps_order_and_sizes_within_one(items: list[int], pieces: int) -> None:
    parts = split_even(items, pieces)
    assert [x for p in parts for x in p] == items
    assert len(parts) <= max(1, pieces)
    if items:
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_the_stride_grows_while_queries_are_quick_and_shrinks_when_slow() -> None:
    stride = Stride(target_s=1.0, most=8)
    for expected in (2, 4, 8, 8):
        stride.observe(0.1, stride.size)
        assert stride.size == expected
    stride.observe(0.7, 8)  # between half and the target: kept
    assert stride.size == 8
    stride.observe(3.0, 8)
    assert stride.size == 4
    stride.observe(0.1, 1)  # a lone chunk (a table's last) says nothing about bigger strides
    assert stride.size == 4
