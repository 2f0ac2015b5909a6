"""The layering rules of docs/architecture.md, checked on the source with ast.

- drc.core is pure: it imports the standard library, msgpack, and other drc.core modules only.
- Driver and framework libraries are imported only by the adapter packages at the edges.
- Packages import only packages below them in the package order, and no import (lazy ones
  included) closes a cycle, between packages or between modules of one package.
- The tests share set-up through tests/support/ and conftest fixtures: no module of tests/
  imports a test module (``test_*``) or a conftest.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import drc
from tests.support.imports import imported_modules as _imports

ROOT = Path(drc.__file__).parent
CORE_ALLOWED_THIRD_PARTY = {"msgpack"}
ADAPTER_LIBRARIES = {"pymysql", "pymysqlreplication", "kazoo", "fastapi", "uvicorn", "pyspark"}
# Packages allowed to import each adapter library.
ADAPTER_HOMES = {
    "sandbox", "replicator", "api", "apply", "catchup", "spark", "metastore", "client", "cli",
    "bulk", "verify", "snapshot",
}  # fmt: skip


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


def test_adapter_libraries_stay_in_adapter_packages() -> None:
    offenders = []
    for path in _modules():
        package = path.relative_to(ROOT).parts[0]
        for name in _imports(path):
            if name.split(".")[0] in ADAPTER_LIBRARIES and package not in ADAPTER_HOMES:
                offenders.append(f"{path.relative_to(ROOT)} imports {name}")
    assert offenders == []


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
    ("config",),
    ("eventbuffer", "metastore"),
    ("api",),
    ("client",),
    ("sandbox", "bulk"),
    ("conflicts",),
    ("replicator", "apply"),
    ("catchup",),
    ("snapshot", "verify"),
    ("runtime",),
    ("node",),
    ("cli",),
    ("__main__",),  # a package's __main__.py is a program: it may import anything
)
# Imports against the order, each kept only until the issue item that removes it. They are no
# edge of the package graph the cycle check walks either (apply imports conflicts, whose SQL
# text is still apply.sql); a cycle between modules they close is still found.
UPWARD = {
    # issue 25, item 4 (a MySQL package): SQL text and quoting move below apply, and conflict
    # handling, beside apply, then imports them from there
    ("drc.replicator.heartbeat", "drc.apply.sql"),
    ("drc.bulk.planner", "drc.apply.sql"),
    ("drc.conflicts.log", "drc.apply.sql"),
    ("drc.conflicts.probes", "drc.apply.sql"),
    ("drc.conflicts.resolve", "drc.apply.sql"),
    ("drc.conflicts.target", "drc.apply.sql"),
    ("drc.conflicts.tombstones", "drc.apply.sql"),
}
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
