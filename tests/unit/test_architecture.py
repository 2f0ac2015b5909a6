"""The layering rules of docs/architecture.md, checked on the source with ast.

- drc.core is pure: it imports the standard library, msgpack, and other drc.core modules only.
- Driver and framework libraries are imported only by the adapters at the edges: a MySQL server
  is talked to through drc.mysql (the binlog reader and the sandbox aside), ZooKeeper by the
  group and discovery, HTTP served by drc.api, Spark started by drc.spark.
- No module uses another library's private names (``_x``, ``_Class__x``): not imported, not
  read or written on the library's modules, classes or objects.
- Packages import only packages below them in the package order, and no import (lazy ones
  included) closes a cycle, between packages or between modules of one package.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

import drc

ROOT = Path(drc.__file__).parent
CORE_ALLOWED_THIRD_PARTY = {"msgpack"}
# Each adapter library and where it may be imported: a package ("mysql") or a module
# ("replicator/source.py": the binlog reader's connection).
ADAPTER_HOMES = {
    "pymysql": {"mysql", "replicator/source.py", "sandbox"},
    "pymysqlreplication": {"replicator"},
    "kazoo": {"replicator/group.py", "client/discovery.py"},
    "fastapi": {"api"},
    "uvicorn": {"api/server.py"},
    "pyspark": {"spark"},
    "httpx": {"client"},
}
ADAPTER_LIBRARIES = set(ADAPTER_HOMES)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(package: str | None = None) -> list[Path]:
    base = ROOT / package if package else ROOT
    return sorted(base.rglob("*.py"))


def test_core_imports_only_stdlib_msgpack_and_core() -> None:
    offenders = []
    for path in _modules("core"):
        for name in _imports(path):
            top = name.split(".")[0]
            if name.startswith("drc.core") or top in CORE_ALLOWED_THIRD_PARTY:
                continue
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


def _at_home(relative: str, homes: set[str]) -> bool:
    return any(relative == home or relative.startswith(home + "/") for home in homes)


def test_adapter_libraries_stay_in_their_adapters() -> None:
    offenders = []
    for path in _modules():
        relative = path.relative_to(ROOT).as_posix()
        for name in _imports(path):
            library = name.split(".")[0]
            if library in ADAPTER_HOMES and not _at_home(relative, ADAPTER_HOMES[library]):
                offenders.append(f"{relative} imports {name}")
    assert offenders == []


def test_only_the_mysql_package_the_binlog_reader_and_the_sandbox_import_pymysql() -> None:
    importers = {
        path.relative_to(ROOT).as_posix()
        for path in _modules()
        if any(name.split(".")[0] == "pymysql" for name in _imports(path))
    }
    assert {p for p in importers if not p.startswith(("mysql/", "sandbox/"))} <= {
        "replicator/source.py"
    }


def test_the_rule_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import pymysql\nfrom drc.apply import sink\n")
    assert _imports(bad) == {"pymysql", "drc.apply"}


# ---------------------------------------------------------------------- the package order

# docs/architecture.md, "Package order": a package imports only packages on lower lines (never
# one on its own line). Top-level modules count as packages; "drc" is drc/__init__.py.
LAYERS = (
    ("drc", "core", "spark", "config_lines", "config_urls"),
    ("tls",),
    ("mysql",),
    ("config",),
    ("eventbuffer", "metastore"),
    ("api",),
    ("client",),
    ("sandbox", "bulk"),
    ("replicator", "apply"),
    ("catchup",),
    ("snapshot", "verify"),
    ("runtime",),
    ("node",),
    ("cli",),
    ("__main__",),  # a package's __main__.py is a program: it may import anything
)
# Imports against the order, each kept only until the issue item that removes it.
UPWARD: set[tuple[str, str]] = set()
# Import cycles between modules, each kept only until the issue item that removes it.
CYCLES = {
    # issue 25, item 5 (the binlog row decoder is ours): fast_rows installs itself lazily
    frozenset({"drc.replicator.decoding", "drc.replicator.fast_rows"}),
}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _drc_imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The modules of ours ``module`` imports, at the top or inside a function (a lazy import
    is a dependency too), but not under ``if TYPE_CHECKING:`` (never run)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def resolve(name: str) -> None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.add(name)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]))
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    resolve(alias.name)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*up, *([child.module] if child.module else [])])
                for alias in child.names:  # a submodule, or a name in ``base``
                    resolve(f"{base}.{alias.name}")
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def _module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    paths = {_module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    known = set(paths)
    return {module: _drc_imports(path, module, known) for module, path in paths.items()}


def _package(module: str) -> str:
    parts = module.split(".")
    return "__main__" if parts[-1] == "__main__" else (parts[1] if len(parts) > 1 else "drc")


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component: set[str] = set()
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_packages_import_only_packages_below_them() -> None:
    layer = {package: n for n, line in enumerate(LAYERS) for package in line}
    offenders = []
    for module, imported in _module_graph().items():
        for target in imported:
            source, dest = _package(module), _package(target)
            if source == dest or (module, target) in UPWARD:
                continue
            if layer[dest] >= layer[source]:
                offenders.append(f"{module} ({source}) imports {target} ({dest})")
    assert sorted(offenders) == []


def test_every_package_has_its_place_in_the_order() -> None:
    placed = {package for line in LAYERS for package in line}
    assert {_package(module) for module in _module_graph()} <= placed


def test_no_import_cycle_between_or_inside_packages() -> None:
    graph = _module_graph()
    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        packages.setdefault(_package(module), set()).update(
            _package(target) for target in imported if _package(target) != _package(module)
        )
    assert _cycles(packages) == []
    assert [c for c in _cycles(graph) if frozenset(c) not in CYCLES] == []


def test_the_graph_counts_lazy_imports_but_not_type_checking_ones(tmp_path: Path) -> None:
    root = tmp_path / "drc"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    for name in ("__init__.py", "a/__init__.py", "b/__init__.py", "b/y.py"):
        (root / name).write_text("")
    (root / "a" / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from drc.b import y\n"
        "def f():\n    from drc.b.y import name\n"
        "from . import z\n"
    )
    (root / "a" / "z.py").write_text("import drc.a.x\n")
    graph = _module_graph(root)
    assert graph["drc.a.x"] == {"drc.b.y", "drc.a.z"}
    assert _cycles(graph) == [{"drc.a.x", "drc.a.z"}]


# ---------------------------------------------------------------------- private names

# issue 25, item 5 (the binlog row decoder is ours): the decoder being rewritten still patches
# python-mysql-replication and reads pymysql's packets through their private names.
PRIVATE_NAMES_UNTIL_ITEM_5 = {
    "replicator/decoding.py", "replicator/fast_rows.py", "replicator/fast_events.py",
    "replicator/source.py", "replicator/tablemap_cache.py",
}  # fmt: skip
# Public API spelt with an underscore (os._exit, sys._getframe, namedtuple's methods).
DOCUMENTED = {"_exit", "_getframe", "_replace", "_asdict", "_fields", "_make"}
_MANGLED = re.compile(r"_[A-Za-z]\w*__\w+")
_PRIVATE_IN_SOURCE = re.compile(r"(?:\.|\bdef |\bclass )(_[A-Za-z]\w*)")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _library_private_names(libraries: set[str]) -> set[str]:
    """Every private attribute, method or class name the installed libraries define or use
    on their own objects (``._x``, ``def _x``, ``class _X``), from their source text."""
    names: set[str] = set()
    for library in libraries:
        spec = importlib.util.find_spec(library)
        for location in (spec.submodule_search_locations or []) if spec else []:
            for path in Path(location).rglob("*.py"):
                names.update(_PRIVATE_IN_SOURCE.findall(path.read_text(errors="replace")))
    return {name for name in names if _private(name)}


def _defined_here(tree: ast.AST) -> set[str]:
    """The private names a module of ours defines: functions, classes, arguments, assigned
    names, attributes of self/cls, slots."""
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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries, keys of our own
    return names


def _library_roots(tree: ast.AST, libraries: set[str]) -> set[str]:
    """The names a module binds by importing from an adapter library (modules or objects)."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in libraries:
                    roots.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in libraries:
                roots.update(alias.asname or alias.name for alias in node.names)
    return roots


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def private_name_uses(
    source: str, libraries: set[str], theirs: set[str], ours: set[str]
) -> list[tuple[int, str]]:
    """(line, name) of each use of another library's private name in ``source``: imported
    (``from pymysql import _auth``, ``import x._y``), reached from a library's module or class
    (``RowsEvent._read_column_data``), name-mangled (``_Class__x``: always someone else's), or
    a private name the libraries define and ours do not, on any object (``conn._rfile``,
    ``getattr(reader, "_stream_connection")``)."""
    tree = ast.parse(source)
    roots = _library_roots(tree, libraries)
    found: list[tuple[int, str]] = []

    def foreign(name: str) -> bool:
        if name in DOCUMENTED:
            return False
        return bool(_MANGLED.fullmatch(name)) or (name in theirs and name not in ours)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in libraries:
                    found += [(node.lineno, p) for p in parts if _private(p)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] in libraries:
                named = parts + [alias.name for alias in node.names]
                found += [(node.lineno, p) for p in named if _private(p)]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            receiver = node.value
            own = isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")
            if _root(receiver) in roots or (not own and foreign(node.attr)):
                found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and foreign(node.args[1].value)
        ):
            found.append((node.lineno, node.args[1].value))
    return found


def test_no_module_uses_another_librarys_private_names() -> None:
    theirs = _library_private_names(ADAPTER_LIBRARIES)
    trees = {path: ast.parse(path.read_text(), str(path)) for path in _modules()}
    ours = set().union(*(_defined_here(tree) for tree in trees.values()))
    offenders = []
    for path in trees:
        relative = path.relative_to(ROOT).as_posix()
        if relative in PRIVATE_NAMES_UNTIL_ITEM_5:
            continue
        for line, name in private_name_uses(path.read_text(), ADAPTER_LIBRARIES, theirs, ours):
            offenders.append(f"drc/{relative}:{line}: {name}")
    assert offenders == []


def test_the_private_name_rule_sees_each_kind_of_use() -> None:
    source = (
        "import pymysql\n"
        "from pymysql import _auth\n"
        "import pymysqlreplication._private\n"
        "from pymysqlreplication.row_event import RowsEvent\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._own = 1\n"
        "    def run(self, conn, reader, mine):\n"
        "        conn._execute_command(3, 'SELECT 1')\n"
        "        conn._next_seq_id = 1\n"
        "        x = RowsEvent._read_column_data, pymysql.connections._lenenc_int\n"
        "        getattr(reader, '_stream_connection')\n"
        "        y = reader._BinLogStreamReader__use_checksum, mine._own, self._own\n"
    )
    theirs = {"_execute_command", "_next_seq_id", "_stream_connection", "_own", "_lenenc_int"}
    found = private_name_uses(source, {"pymysql", "pymysqlreplication"}, theirs, {"_own"})
    assert sorted(name for _, name in found) == [
        "_BinLogStreamReader__use_checksum", "_auth", "_execute_command", "_lenenc_int",
        "_next_seq_id", "_private", "_read_column_data", "_stream_connection",
    ]  # fmt: skip


def test_the_libraries_private_names_are_found() -> None:
    theirs = _library_private_names({"pymysql"})
    assert {"_execute_command", "_next_seq_id", "_read_query_result", "_rfile"} <= theirs
