"""The SDK's layering: httpx stays in drc.client, and the SDK never loads the server side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import drc
from tests.support.imports import imported_modules as _imported

ROOT = Path(drc.__file__).parent
HTTPX_HOMES = {"client", "cli"}


def test_only_the_client_and_cli_packages_import_httpx() -> None:
    # Packages only: top-level modules (runtime, demo) are composition roots, which
    # test_architecture judges.
    offenders = [
        str(path.relative_to(ROOT))
        for path in sorted(ROOT.glob("*/**/*.py"))
        if path.relative_to(ROOT).parts[0] not in HTTPX_HOMES
        and any(name.split(".")[0] == "httpx" for name in _imported(path))
    ]
    assert offenders == []


def test_the_client_uses_only_the_wire_modules_of_the_api() -> None:
    # pullquery: the names and values of a pull's parameters, declared with their parsing;
    # lazyrecords: a large page's records, decoded as read (pure, like wire).
    used = {
        name
        for path in (ROOT / "client").rglob("*.py")
        for name in _imported(path)
        if name.startswith("drc.api")
    }
    wire_modules = {"wire", "streamwire", "pullquery", "lazyrecords"}
    assert used <= {"drc.api", *(f"drc.api.{name}" for name in wire_modules)}


def _run(code: str) -> None:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_importing_the_sdk_loads_no_server_framework() -> None:
    _run(
        "import sys, drc.client; "
        "bad = [m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules]; "
        "assert not bad, bad"
    )


def test_the_tail_commands_load_httpx_only_when_run() -> None:
    _run("import sys, drc.cli.tail; assert 'httpx' not in sys.modules")
