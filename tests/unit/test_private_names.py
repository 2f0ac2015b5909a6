"""No module of drc/ touches another library's private names (issue 25, 5).

A private name (``_x``, not ``__x__``) that drc/ itself never defines belongs to someone else:
reading, assigning or importing it, or naming it in getattr/setattr/hasattr, ties DRC to
internals a library may change in any release. Name-mangled names (``_Class__x``) are always
someone else's. Found with ast, over every module of drc/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import drc

ROOT = Path(drc.__file__).parent
# apply/sink.py still drives pymysql's protocol through _execute_command, _next_seq_id and
# _read_packet: being replaced by the MySQL package's own protocol layer (issue 25, 4).
NOT_YET = {"apply/sink.py"}
MANGLED = re.compile(r"^_[A-Za-z]\w*__\w+")
# Public API spelt with an underscore: os._exit, sys._getframe, namedtuple's methods.
DOCUMENTED = {"_exit", "_getframe", "_replace", "_asdict", "_fields", "_make"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(tree: ast.AST) -> set[str]:
    """Every name a module defines: functions, classes, parameters, assigned names and
    attributes, class fields."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
    return names


def _used(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every private name a module uses on something or imports."""
    used: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            used.append((node.lineno, node.attr))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            if (node.module or "").split(".")[0] != "drc":
                parts = (node.module or "").split(".") + [alias.name for alias in node.names]
                used += [(node.lineno, part) for part in parts if _private(part)]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                used += [(node.lineno, p) for p in alias.name.split(".") if _private(p)]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            used.append((node.lineno, node.args[1].value))
    return used


def foreign_private_names(paths: list[Path]) -> list[str]:
    trees = {path: ast.parse(path.read_text(), str(path)) for path in paths}
    ours: set[str] = set()
    for tree in trees.values():
        ours |= _defined(tree)
    found = []
    for path, tree in trees.items():
        for line, name in _used(tree):
            if MANGLED.match(name) or (name not in ours and name not in DOCUMENTED):
                found.append(f"{path}:{line}: {name}")
    return found


def test_no_module_of_drc_uses_another_librarys_private_names() -> None:
    modules = [p for p in sorted(ROOT.rglob("*.py")) if str(p.relative_to(ROOT)) not in NOT_YET]
    assert foreign_private_names(modules) == []


def test_the_rule_sees_each_kind_of_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from pymysql import _auth\n"
        "import pymysqlreplication._private\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._own = 1\n"
        "    def run(self, conn, reader):\n"
        "        self._own += conn._read_packet()\n"
        "        getattr(reader, '_stream_connection')\n"
        "        return reader._BinLogStreamReader__connected_stream, self.__class__\n"
    )
    found = sorted(line.split(": ", 1)[1] for line in foreign_private_names([bad]))
    assert found == [
        "_BinLogStreamReader__connected_stream", "_auth", "_private", "_read_packet",
        "_stream_connection",
    ]  # fmt: skip
