"""The layering rules of DESIGN.md, checked on the source with ast.

- drc.core is pure: it imports the standard library, msgpack, and other drc.core modules only.
- Driver and framework libraries are imported only by the adapter packages at the edges.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import drc

ROOT = Path(drc.__file__).parent
CORE_ALLOWED_THIRD_PARTY = {"msgpack"}
ADAPTER_LIBRARIES = {"pymysql", "pymysqlreplication", "kazoo", "fastapi", "uvicorn", "pyspark"}
# Packages allowed to import each adapter library.
ADAPTER_HOMES = {
    "sandbox", "replicator", "api", "apply", "catchup", "spark", "metastore", "client", "cli",
    "bulk", "verify", "snapshot",
}  # fmt: skip


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
