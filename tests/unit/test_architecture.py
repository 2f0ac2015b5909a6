"""The layering rules of docs/architecture.md, checked on the source with ast.

- drc.core is pure: it imports the standard library, msgpack, and other drc.core modules only.
- Driver and framework libraries are imported only by the adapters at the edges: a MySQL server
  is talked to through drc.mysql (the binlog reader and the sandbox aside), ZooKeeper by the
  group and discovery, HTTP served by drc.api, Spark started by drc.spark.
- No module uses another library's private names (``_x``, ``_Class__x``): not imported, not
  read or written on the library's modules, classes or objects.
- Packages import only packages below them in the package order, and no import (lazy ones
  included) closes a cycle, between packages or between modules of one package.
- The tests share set-up through tests/support/ and conftest fixtures: no module of tests/
  imports a test module (``test_*``) or a conftest.
- One room per job: no module of drc/ over 500 lines, no class over 300.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import drc
from tests.support.imports import imported_modules as _imports

ROOT = Path(drc.__file__).parent
CORE_ALLOWED_THIRD_PARTY = {"msgpack"}
# Each adapter library and where it may be imported: a package ("mysql") or a module
# ("replicator/source.py" and "replicator/binlog": the binlog reader's connection and packets).
ADAPTER_HOMES = {
    "pymysql": {"mysql", "replicator/source.py", "replicator/binlog", "sandbox"},
    "pymysqlreplication": {"replicator"},
    "kazoo": {"replicator/group.py", "replicator/group_store.py", "client/discovery.py"},
    "fastapi": {"api"},
    "uvicorn": {"api/server.py"},
    "pyspark": {"spark"},
    "httpx": {"client"},
    "pika": {"sink/rabbitmq.py"},
}
ADAPTER_LIBRARIES = set(ADAPTER_HOMES)


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
    homes = ("mysql/", "sandbox/", "replicator/binlog/", "replicator/source.py")
    assert {p for p in importers if not p.startswith(homes)} == set()


def test_the_rule_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import pymysql\nfrom drc.apply import sink\n")
    assert _imports(bad) == {"pymysql", "drc.apply"}


# ---------------------------------------------------------------------- the package order

# docs/architecture.md, "Package order": a package imports only packages on lower lines (never
# one on its own line). Top-level modules count as packages; "drc" is drc/__init__.py.
LAYERS = (
    ("native",),
    ("drc", "core", "spark", "config_lines", "config_urls"),
    ("tls", "config_section"),
    ("mysql",),
    ("conflicts",),
    ("config_databases", "config_replicator"),
    ("config_channels",),
    ("config",),
    ("eventbuffer", "metastore"),
    ("api",),
    ("client",),
    ("sandbox", "bulk", "sink"),
    ("replicator", "apply"),
    ("catchup",),
    ("snapshot", "verify"),
    ("runtime",),
    ("node",),
    ("cli",),
    ("__main__",),  # a package's __main__.py is a program: it may import anything
)
# Imports against the order, each kept only until the issue item that removes it. They are no
# edge of the package graph the cycle check walks either; a cycle between modules they close is
# still found.
UPWARD: set[tuple[str, str]] = set()
# Import cycles between modules, each kept only until the issue item that removes it.
CYCLES: set[frozenset[str]] = set()


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
            _package(target)
            for target in imported
            if _package(target) != _package(module) and (module, target) not in UPWARD
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

# Public API spelt with an underscore (os._exit, sys._getframe, namedtuple's methods).
DOCUMENTED = {"_exit", "_getframe", "_replace", "_asdict", "_fields", "_make"}
_MANGLED = re.compile(r"_[A-Za-z]\w*__\w+")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_here(tree: ast.AST) -> set[str]:
    """The names a module of ours defines: functions, classes, arguments, assigned names,
    attributes of self/cls, ``__slots__`` entries."""
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
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names.update(
                c.value for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )  # fmt: skip
    return names


def _library_roots(tree: ast.AST) -> set[str]:
    """The names a module binds by importing from another library (modules or objects)."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "drc":
                    roots.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "drc":
                roots.update(alias.asname or alias.name for alias in node.names)
    return roots


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def private_name_uses(source: str, ours: set[str]) -> list[tuple[int, str]]:
    """(line, name) of each use of another library's private name in ``source``: imported
    (``from pymysql import _auth``, ``import x._y``), reached from another library's module or
    class (``RowsEvent._read_column_data``), name-mangled (``_Class__x``: always someone
    else's), or any private name that no module of ours (``ours``) defines, on any object
    (``conn._next_seq_id``, ``getattr(reader, "_stream_connection")``)."""
    tree = ast.parse(source)
    roots = _library_roots(tree)
    found: list[tuple[int, str]] = []

    def foreign(name: str) -> bool:
        return name not in DOCUMENTED and (bool(_MANGLED.fullmatch(name)) or name not in ours)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] != "drc":
                    found += [(node.lineno, p) for p in parts if _private(p)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "drc":
                named = parts + [alias.name for alias in node.names]
                found += [(node.lineno, p) for p in named if _private(p)]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            from_library = _root(node.value) in roots and node.attr not in DOCUMENTED
            if from_library or foreign(node.attr):
                found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and foreign(node.args[1].value)
        ):
            found.append((node.lineno, node.args[1].value))
    return found


def test_no_module_uses_another_librarys_private_names() -> None:
    trees = {path: ast.parse(path.read_text(), str(path)) for path in _modules()}
    ours = set().union(*(_defined_here(tree) for tree in trees.values()))
    offenders = [
        f"drc/{path.relative_to(ROOT).as_posix()}:{line}: {name}"
        for path in trees
        for line, name in private_name_uses(path.read_text(), ours)
    ]
    assert offenders == []


def test_the_private_name_rule_sees_each_kind_of_use() -> None:
    source = (
        "import os\n"
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
        "        x = RowsEvent._own, pymysql.connections._lenenc_int\n"
        "        getattr(reader, '_stream_connection'), getattr(mine, '_own')\n"
        "        y = reader._BinLogStreamReader__use_checksum, mine._own, self._own\n"
        "        os._exit(0)\n"
    )
    found = private_name_uses(source, _defined_here(ast.parse(source)))
    assert sorted(name for _, name in found) == [
        "_BinLogStreamReader__use_checksum", "_auth", "_execute_command", "_lenenc_int",
        "_next_seq_id", "_own", "_private", "_stream_connection",
    ]  # fmt: skip


# ---------------------------------------------------------------------- the tests' own layout

TESTS = Path(__file__).parents[1]


def _test_module_imports(path: Path) -> list[str]:
    """What ``path`` imports of a test module or a conftest (any part of the dotted name named
    ``test_*`` or ``conftest``), as written; relative imports too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names = [base, *(f"{base.rstrip('.')}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            parts = [part for part in name.split(".") if part]
            if any(part.startswith("test_") or part == "conftest" for part in parts):
                found.append(name)
                break
    return found


def test_no_test_module_imports_another() -> None:
    offenders = [
        f"{path.relative_to(TESTS)} imports {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in _test_module_imports(path)
    ]
    assert offenders == [], "shared set-up goes into tests/support/ or a conftest fixture"


def test_the_tests_rule_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "test_bad.py"
    bad.write_text(
        "from tests.unit.test_api import store\n"
        "import tests.integration.test_catchup\n"
        "from . import conftest\n"
        "from .test_other import helper\n"
        "def f():\n    from tests.unit import test_config\n"
        "from tests.support.api import store\n"
        "import tests.support\n"
    )
    assert _test_module_imports(bad) == [
        "tests.unit.test_api",
        "tests.integration.test_catchup",
        ".conftest",
        ".test_other",
        "tests.unit.test_config",
    ]


# ---------------------------------------------------------------------- sizes

# One room per job: a module that outgrows this holds more than one job, a class more than one
# role. The numbers are the "about 500" and "about 300"; no exceptions.
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 300


def oversized(source: str, name: str) -> list[str]:
    """What in ``source`` is over the limits: the module by its lines, each class by its span."""
    found = []
    lines = source.count("\n") + (not source.endswith("\n") and bool(source))
    if lines > MAX_MODULE_LINES:
        found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.ClassDef):
            span = (node.end_lineno or node.lineno) - node.lineno + 1
            if span > MAX_CLASS_LINES:
                found.append(f"{name}: class {node.name} {span} lines (at most {MAX_CLASS_LINES})")
    return found


def test_no_module_or_class_outgrows_one_job() -> None:
    offenders = [
        problem
        for path in _modules()
        for problem in oversized(path.read_text(), f"drc/{path.relative_to(ROOT).as_posix()}")
    ]
    assert offenders == [], "split by job: see docs/architecture.md"


def test_the_size_rule_sees_a_long_module_and_a_long_class() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES))
    assert oversized(f"class Big:\n{body}", "m.py") == ["m.py: class Big 301 lines (at most 300)"]
    assert oversized("x = 1\n" * (MAX_MODULE_LINES + 1), "m.py") == [
        "m.py: 501 lines (at most 500)"
    ]
    assert oversized("x = 1\n" * MAX_MODULE_LINES, "m.py") == []
