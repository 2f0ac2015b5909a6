"""No hand-built string literal and no multi-statement connection anywhere in drc/ (issue #12).

A value written between quotes by hand breaks as soon as it holds a quote or a backslash (a
table named ``x\\';CREATE DATABASE pwn;#`` once ran as SQL on a target). Values are bound as
parameters; where SQL text must hold one (a trigger body), drc.mysql.sql.literal writes it.
This walks every module of drc/ with ``ast`` and fails on a new site of any of these shapes:

    f"... '{value}' ..."             a quote right before a formatted value
    "'" + value,  value + "'"        concatenating a quote and a value
    text.replace("'", ...)           hand escaping (also of '"' and '\\')
    "'{}'".format(...), "'%s'" % x   the same through format and %
    escape_string                    pymysql's backslash-only escaping, blind to sql_mode
    CLIENT.MULTI_STATEMENTS          a second statement hidden in a value would run
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import drc

ROOT = Path(drc.__file__).parent
QUOTES = ("'", '"')

# (module, function) -> why a quote around a value is right there. Nothing else may have one.
ALLOWED = {
    ("mysql/sql.py", "literal"): "the one literal: a naive datetime's isoformat, hex digits",
    ("api/metrics.py", "_labels"): "Prometheus text format, not SQL",
    ("api/metrics.py", "_escape_label"): "Prometheus text format, not SQL",
    ("api/metrics.py", "_escape_help"): "Prometheus text format, not SQL",
    ("sandbox/demo.py", "write_configs"): "a TOML file of sandbox names, not SQL",
    ("replicator/binlog/events.py", "_xid"): "an XA id in hex digits, compared, never sent",
}


def _text(node: ast.AST) -> str | None:
    """The value of a string constant, else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _shape(node: ast.AST) -> str | None:
    """The hand-built-literal shape ``node`` has, if any."""
    if isinstance(node, ast.JoinedStr):
        for before, value in zip(node.values, node.values[1:], strict=False):
            text = _text(before)
            if text is not None and text.endswith(QUOTES) and isinstance(value, ast.FormattedValue):
                return "a formatted value right after a quote"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None and left.endswith(QUOTES) and right is None:
            return "a quote + a value"
        if right is not None and right.startswith(QUOTES) and left is None:
            return "a value + a quote"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        if any(q + "%" in (_text(node.left) or "") for q in QUOTES):
            return "% formatting between quotes"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = _text(node.args[0]) if node.args else None
        if node.func.attr == "replace" and first in ("'", '"', "\\"):
            return "escaping by hand with replace"
        if node.func.attr == "format":
            if any(q + "{" in (_text(node.func.value) or "") for q in QUOTES):
                return "str.format between quotes"
    name = node.name if isinstance(node, ast.alias) else getattr(node, "id", None)
    name = name or getattr(node, "attr", None)
    if name == "escape_string":
        return "escape_string (blind to NO_BACKSLASH_ESCAPES)"
    if name == "MULTI_STATEMENTS":
        return "a multi-statement connection"
    return None


def literal_sites(source: str) -> list[tuple[str, int, str]]:
    """(enclosing function, line, shape) of every hand-built literal in ``source``."""
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        shape = _shape(node)
        if shape is not None:
            found.append((function, getattr(node, "lineno", 0), shape))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return found


def _all_sites() -> dict[tuple[str, str], list[str]]:
    sites: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        for function, line, shape in literal_sites(path.read_text()):
            sites.setdefault((module, function), []).append(f"drc/{module}:{line}: {shape}")
    return sites


def test_no_module_of_drc_builds_a_literal_by_hand_or_allows_multi_statements() -> None:
    sites = _all_sites()
    unexpected = [line for key, lines in sites.items() if key not in ALLOWED for line in lines]
    assert not unexpected, (
        "bind the value as a %s parameter, or write it with drc.mysql.sql.literal:\n"
        + "\n".join(unexpected)
    )


def test_every_allowed_site_is_still_there() -> None:
    assert set(ALLOWED) <= set(_all_sites()), "remove stale entries from ALLOWED"


@pytest.mark.parametrize(
    "source",
    [
        # drc/apply/tombstones.py before the fix of issue #12
        "def create_table(schema, table):\n"
        "    comment = f'DRC tombstones of {schema}.{table}'.replace(\"'\", \"''\")\n"
        "    return f\"CREATE TABLE t (a INT) COMMENT='{comment}'\"\n",
        "def _string(text):\n    return \"'\" + text.replace('\\\\', '\\\\\\\\') + \"'\"\n",
        "def q(v):\n    return \"WHERE a = '{}'\".format(v)\n",
        "def q(v):\n    return \"WHERE a = '%s'\" % v\n",
        "def q(v):\n    return f'WHERE a = \"{v}\"'\n",
        "from pymysql.converters import escape_string\n",
        "flags = CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS\n",
    ],
)
def test_the_walk_finds_each_shape(source: str) -> None:
    assert literal_sites(source)


def test_the_walk_lets_quoted_identifiers_and_bound_values_pass() -> None:
    source = (
        "def q(name):\n"
        "    return Statement(f'SELECT `x` FROM {ident(name)} WHERE a = %s', (name,))\n"
        "def t(name):\n    return literal(name)\n"
    )
    assert literal_sites(source) == []
