"""Row filter predicates: parsed by hand (never eval), checked with their position, evaluated
with SQL's three-valued logic."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.core.rowfilter import RowFilterError, parse


@pytest.mark.parametrize(
    ("text", "row", "passes"),
    [
        ("region = 'eu'", {"region": "eu"}, True),
        ("region = 'eu'", {"region": "us"}, False),
        ("region != 'eu'", {"region": "us"}, True),
        ("region <> 'eu'", {"region": "eu"}, False),
        ("n < 3", {"n": 2}, True),
        ("n <= 2", {"n": Decimal("2.0")}, True),
        ("n > 2.5", {"n": 3}, True),
        ("n >= -1", {"n": -2}, False),
        ("n > 1.5", {"n": 1.75}, True),
        ("n IN (1, 2, 3)", {"n": 2}, True),
        ("n not in (1, 2)", {"n": 3}, True),
        ("n NOT IN (1, 2)", {"n": 1}, False),
        ("x IS NULL", {"x": None}, True),
        ("x is not null", {"x": None}, False),
        ("flag = TRUE", {"flag": 1}, True),
        ("flag = false", {"flag": 1}, False),
        ("`order-id` = 7", {"order-id": 7}, True),
        ("name = 'it''s'", {"name": "it's"}, True),
        ("b = 'ab'", {"b": b"ab"}, True),
        ("at >= '2024-01-01'", {"at": datetime.datetime(2024, 3, 1, 12)}, True),
        ("at < '2024-01-01'", {"at": datetime.date(2023, 12, 31)}, True),
        ("a = 1 OR b = 1 AND c = 1", {"a": 1, "b": 0, "c": 0}, True),  # AND binds tighter
        ("(a = 1 OR b = 1) AND c = 1", {"a": 1, "b": 0, "c": 0}, False),
        ("NOT NOT a = 1", {"a": 1}, True),
        ("n = '1'", {"n": 1}, False),  # a string never matches a number
        ("s = 1", {"s": "1"}, False),
    ],
)
def test_a_predicate_passes_exactly_the_rows_it_describes(
    text: str, row: dict[str, object], passes: bool
) -> None:
    assert parse(text).passes(row) is passes


@pytest.mark.parametrize(
    "text",
    [
        "x = 1",  # NULL = 1: unknown
        "NOT x = 1",  # NOT unknown: unknown
        "x = NULL",
        "x != 1",
        "n NOT IN (2, NULL)",  # SQL: never true when the list holds NULL
        "x IN (1, 2)",
        "x = 1 OR n = 5",
        "NOT (x = 1 AND n = 1)",  # unknown AND true: unknown
    ],
)
def test_null_makes_a_comparison_unknown_and_an_unknown_row_does_not_pass(text: str) -> None:
    assert parse(text).passes({"x": None, "n": 1}) is False


def test_unknown_or_true_passes_and_unknown_and_false_is_false() -> None:
    row = {"x": None, "n": 1}
    assert parse("x = 1 OR n = 1").passes(row)
    assert parse("NOT (x = 1 AND n = 2)").passes(row)


def test_a_predicate_knows_the_columns_it_names() -> None:
    predicate = parse("a = 1 AND (B IS NULL OR `c d` IN ('x'))")
    assert predicate.columns == {"a", "B", "c d"}
    assert predicate.unknown_columns(["A", "b"]) == ["c d"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a =", "expected a number, a 'string' or NULL at position 4, got the end"),
        ("a = 1 b", "expected AND, OR or the end at position 7, got 'b'"),
        ("a = 'x", "unterminated ' at position 5"),
        ("(a = 1", "expected ')' at position 7, got the end"),
        ("a IN 1", "expected '(' after IN at position 6, got '1'"),
        ("1 = a", "expected a column name, NOT or '(' at position 1, got '1'"),
        ("a == 1", "at position 4, got '='"),
        ("a IS 1", "expected NULL at position 6, got '1'"),
        ("a", "expected a comparison"),
        ("a = 1; DROP TABLE t", "unexpected ';' at position 6"),
        ("__import__('os')", "expected a comparison"),
        ("", "expected a column name"),
    ],
)
def test_a_mistake_says_where_and_what_was_expected(text: str, message: str) -> None:
    with pytest.raises(RowFilterError) as caught:
        parse(text)
    assert message in str(caught.value)


def test_evaluating_a_column_the_row_lacks_raises_key_error() -> None:
    with pytest.raises(KeyError):
        parse("missing = 1").passes({"id": 1})


@given(st.integers(-1000, 1000), st.integers(-1000, 1000))
def test_comparisons_agree_with_python(value: int, literal: int) -> None:
    for op, expect in (
        ("=", value == literal),
        ("!=", value != literal),
        ("<", value < literal),
        ("<=", value <= literal),
        (">", value > literal),
        (">=", value >= literal),
    ):
        assert parse(f"v {op} {literal}").passes({"v": value}) is expect


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20))
def test_any_string_literal_round_trips(text: str) -> None:
    quoted = "'" + text.replace("'", "''") + "'"
    assert parse(f"s = {quoted}").passes({"s": text})


_atoms = st.sampled_from(["a = 1", "b IS NULL", "a IN (1, 2)", "b > 0"])


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(_atoms)
    op = draw(st.sampled_from(["AND", "OR", "NOT"]))
    if op == "NOT":
        return f"NOT ({draw(_expressions(depth - 1))})"
    return f"({draw(_expressions(depth - 1))}) {op} ({draw(_expressions(depth - 1))})"


@given(_expressions(), st.sampled_from([None, 0, 1, 2]), st.sampled_from([None, -1, 1]))
def test_not_of_a_predicate_passes_where_it_fails_unless_unknown(
    text: str, a: int | None, b: int | None
) -> None:
    row = {"a": a, "b": b}
    passes, negated = parse(text).passes(row), parse(f"NOT ({text})").passes(row)
    assert not (passes and negated)  # never both; neither when unknown
