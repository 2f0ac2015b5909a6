"""Row filters: a small predicate language on a row image's column values.

A channel's ``row_filters`` (drc.apply.rowstages) and a subscriber's ``rows`` pull parameter
(drc.api.pullquery) give tables a predicate such as::

    region = 'eu' AND (status IN ('active', 'trial') OR credit >= 100) AND deleted_at IS NULL

Grammar (keywords are case-insensitive; a column is a bare name or a `back-quoted` one)::

    expr       := or
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | primary
    primary    := "(" expr ")" | column test
    test       := cmp literal | "IS" ["NOT"] "NULL" | ["NOT"] "IN" "(" literal ("," literal)* ")"
    cmp        := "=" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    literal    := number | 'string' ('' for a quote) | "NULL" | "TRUE" | "FALSE"

It is parsed once, at config load, by a hand-written tokenizer and recursive-descent parser
(never Python ``eval``); a mistake raises :class:`RowFilterError` with its position. Evaluation
follows SQL's three-valued logic: a comparison with NULL is unknown, and a row passes only
when the predicate is true, as in a WHERE clause.

Values compare as the stream carries them (drc.core.values): numbers with numbers (int,
Decimal, float alike), strings with text, bytes with the literal's UTF-8 bytes, dates and
times with their ISO text (``created >= '2024-01-01'``). A literal of another kind than the
value (a string for a number column) never matches. TRUE and FALSE are 1 and 0, as in MySQL.

:func:`filtered` is what a change becomes for a reader holding only the rows a predicate
passes; :class:`PerTable` picks a table's entry from a ``{"db.table" pattern: ...}`` map.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Generic, TypeVar

from drc.core.errors import ConfigError
from drc.core.events import Op, Row, RowChange
from drc.core.tablefilter import TableFilter

__all__ = [
    "PerTable",
    "Predicate",
    "RowFilterColumnError",
    "RowFilterError",
    "filtered",
    "parse",
]


class RowFilterError(ValueError):
    """A predicate that does not parse; says where and what was expected."""


class RowFilterColumnError(ConfigError):
    """A predicate names a column a table's changes do not carry (found when one arrives):
    fatal, so a channel stops (or holds for an operator) until its config is corrected."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
    | (?P<string>'(?:[^']|'')*')
    | (?P<quoted>`(?:[^`]|``)+`)
    | (?P<op><=|>=|!=|<>|=|<|>|\(|\)|,)
    | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = frozenset({"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"})


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # number, string, column, op, keyword, end
    text: str
    value: Any
    at: int  # 0-based offset in the text


def _tokens(text: str) -> list[_Token]:
    found: list[_Token] = []
    at = 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            found.append(_Token("end", "", None, at))
            return found
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            if text[at] in "'`":
                raise RowFilterError(f"unterminated {text[at]} at position {at + 1}")
            raise RowFilterError(f"unexpected {text[at]!r} at position {at + 1}")
        kind = match.lastgroup or ""
        raw = match.group(kind)
        start = match.start(kind)
        found.append(_token(kind, raw, start))
        at = match.end()


def _token(kind: str, raw: str, at: int) -> _Token:
    if kind == "number":
        return _Token("number", raw, _number(raw), at)
    if kind == "string":
        return _Token("string", raw, raw[1:-1].replace("''", "'"), at)
    if kind == "quoted":
        return _Token("column", raw, raw[1:-1].replace("``", "`"), at)
    if kind == "word" and raw.upper() in _KEYWORDS:
        return _Token("keyword", raw.upper(), raw.upper(), at)
    if kind == "word":
        return _Token("column", raw, raw, at)
    return _Token("op", raw, raw, at)


def _number(raw: str) -> int | Decimal:
    try:
        return int(raw)
    except ValueError:
        try:
            return Decimal(raw)
        except InvalidOperation as exc:  # the pattern admits only numbers; kept for safety
            raise RowFilterError(f"{raw!r} is not a number") from exc


# A node evaluates a row to True, False or None (unknown: SQL's NULL).
Node = Callable[[Mapping[str, Any]], bool | None]


@dataclass(frozen=True, slots=True)
class Predicate:
    """A parsed predicate: ``passes(row)`` is True only where it is true for the row."""

    text: str
    columns: frozenset[str]  # every column it names
    _node: Node

    def passes(self, row: Mapping[str, Any]) -> bool:
        """Whether the row image passes; KeyError for a column the image lacks."""
        return self._node(row) is True

    def unknown_columns(self, known: Any) -> list[str]:
        """The columns named here that ``known`` (names, compared case-insensitively) lacks."""
        have = {str(name).lower() for name in known}
        return sorted(c for c in self.columns if c.lower() not in have)


def parse(text: str) -> Predicate:
    """Parse a predicate; RowFilterError with the position of the first mistake."""
    parser = _Parser(text)
    node = parser.expression()
    parser.expect_end()
    if not parser.columns:
        raise RowFilterError("the predicate names no column")
    return Predicate(text, frozenset(parser.columns), node)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.columns: set[str] = set()

    @property
    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def accept(self, kind: str, text: str) -> bool:
        if self.peek.kind == kind and self.peek.text == text:
            self.at += 1
            return True
        return False

    def fail(self, expected: str) -> RowFilterError:
        token = self.peek
        got = "the end" if token.kind == "end" else repr(token.text)
        return RowFilterError(f"expected {expected} at position {token.at + 1}, got {got}")

    def expect_end(self) -> None:
        if self.peek.kind != "end":
            raise self.fail("AND, OR or the end")

    def expression(self) -> Node:
        node = self.conjunction()
        while self.accept("keyword", "OR"):
            node = _or(node, self.conjunction())
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.accept("keyword", "AND"):
            node = _and(node, self.negation())
        return node

    def negation(self) -> Node:
        if self.accept("keyword", "NOT"):
            return _not(self.negation())
        return self.primary()

    def primary(self) -> Node:
        if self.accept("op", "("):
            node = self.expression()
            if not self.accept("op", ")"):
                raise self.fail("')'")
            return node
        if self.peek.kind != "column":
            raise self.fail("a column name, NOT or '('")
        column = self.take().value
        self.columns.add(column)
        return self.test(column)

    def test(self, column: str) -> Node:
        token = self.peek
        if token.kind == "op" and token.text in _COMPARISONS:
            self.take()
            return _compare(column, _COMPARISONS[token.text], self.literal())
        if self.accept("keyword", "IS"):
            negated = self.accept("keyword", "NOT")
            if not self.accept("keyword", "NULL"):
                raise self.fail("NULL")
            return _is_null(column, negated)
        negated = self.accept("keyword", "NOT")
        if self.accept("keyword", "IN"):
            return _in(column, self.literals(), negated)
        raise self.fail("a comparison (= != <> < <= > >=), IS [NOT] NULL or [NOT] IN (...)")

    def literals(self) -> list[Any]:
        if not self.accept("op", "("):
            raise self.fail("'(' after IN")
        values = [self.literal()]
        while self.accept("op", ","):
            values.append(self.literal())
        if not self.accept("op", ")"):
            raise self.fail("',' or ')'")
        return values

    def literal(self) -> Any:
        token = self.peek
        if token.kind in ("number", "string"):
            return self.take().value
        if token.kind == "keyword" and token.text in _CONSTANTS:
            self.take()
            return _CONSTANTS[token.text]
        raise self.fail("a number, a 'string' or NULL")


_CONSTANTS: dict[str, Any] = {"NULL": None, "TRUE": 1, "FALSE": 0}
_COMPARISONS: dict[str, Callable[[int], bool]] = {
    "=": lambda c: c == 0,
    "!=": lambda c: c != 0,
    "<>": lambda c: c != 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}


def _order(value: Any, literal: Any) -> int | None:
    """-1, 0 or 1 as value is below, equal to or above literal; None when either is NULL or
    they are of kinds that do not compare (the row does not match)."""
    if value is None or literal is None:
        return None
    if isinstance(literal, str):
        if isinstance(value, bytes | bytearray):
            literal = literal.encode()
        elif isinstance(value, datetime.datetime):
            value = value.isoformat(sep=" ")
        elif isinstance(value, datetime.date | datetime.time):
            value = value.isoformat()
        elif not isinstance(value, str):
            return None
    elif isinstance(value, bool | int | float | Decimal):
        if isinstance(value, float) or isinstance(literal, float):
            value, literal = float(value), float(literal)
    else:
        return None
    return (value > literal) - (value < literal)


def _compare(column: str, test: Callable[[int], bool], literal: Any) -> Node:
    def node(row: Mapping[str, Any]) -> bool | None:
        order = _order(row[column], literal)
        return None if order is None else test(order)

    return node


def _is_null(column: str, negated: bool) -> Node:
    return lambda row: (row[column] is None) != negated


def _in(column: str, literals: list[Any], negated: bool) -> Node:
    has_null = any(lit is None for lit in literals)

    def node(row: Mapping[str, Any]) -> bool | None:
        value = row[column]
        if value is None:
            return None
        if any(_order(value, lit) == 0 for lit in literals):
            return not negated
        return None if has_null else negated

    return node


def _not(inner: Node) -> Node:
    def node(row: Mapping[str, Any]) -> bool | None:
        result = inner(row)
        return None if result is None else not result

    return node


def _and(left: Node, right: Node) -> Node:
    def node(row: Mapping[str, Any]) -> bool | None:
        a = left(row)
        if a is False:
            return False
        b = right(row)
        if b is False:
            return False
        return None if a is None or b is None else True

    return node


def _or(left: Node, right: Node) -> Node:
    def node(row: Mapping[str, Any]) -> bool | None:
        a = left(row)
        if a is True:
            return True
        b = right(row)
        if b is True:
            return True
        return None if a is None or b is None else False

    return node


def filtered(predicate: Predicate, change: RowChange) -> RowChange | None:
    """``change`` as a target holding only the rows ``predicate`` passes must see it::

        before passes   after passes    becomes
        yes             yes             the change itself
        no              yes             INSERT of the after image   (the row moved in)
        yes             no              DELETE of the before image  (the row moved out)
        no              no              None

    RowFilterColumnError when an image lacks a column the predicate names."""
    before = change.before is not None and _passes(predicate, change, change.before)
    after = change.after is not None and _passes(predicate, change, change.after)
    if change.op is Op.UPDATE and before != after:
        if after:
            return RowChange(change.schema, change.table, Op.INSERT, None, change.after)
        return RowChange(change.schema, change.table, Op.DELETE, change.before, None)
    return change if before or after else None


def _passes(predicate: Predicate, change: RowChange, image: Row) -> bool:
    try:
        return predicate.passes(image)
    except KeyError:
        unknown = predicate.unknown_columns(image)
        raise RowFilterColumnError(
            f"the row filter of {change.schema}.{change.table} ({predicate.text!r}) names "
            f"{', '.join(map(repr, unknown))}, which the table's changes do not carry "
            f"(columns: {', '.join(image)})"
        ) from None


T = TypeVar("T")
_MAX_CACHED_TABLES = 65536


class PerTable(Generic[T]):
    """A ``{"db.table" pattern: value}`` map asked by table: the first pattern it matches."""

    def __init__(self, entries: Mapping[str, T]) -> None:
        self._entries = [(TableFilter.build([p]), v) for p, v in entries.items()]
        self._found: dict[tuple[str, str], T | None] = {}

    def __bool__(self) -> bool:
        return bool(self._entries)

    def get(self, schema: str, table: str) -> T | None:
        key = (schema, table)
        try:
            return self._found[key]
        except KeyError:
            pass
        if len(self._found) >= _MAX_CACHED_TABLES:
            self._found.clear()
        found = next((v for f, v in self._entries if f.matches(schema, table)), None)
        self._found[key] = found
        return found
