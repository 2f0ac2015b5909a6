"""`drc demo` (what `make demo` runs) converges, and runs again in the same directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from drc.sandbox.demo import run_demo
from drc.sandbox.sandbox import SandboxDescription


@pytest.mark.slow
def test_the_demo_converges_twice_in_a_row_in_one_directory(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    lines: list[str] = []
    for _ in range(2):  # the second run must not resume from the first one's buffers
        assert run_demo(sandbox, tmp_path / "demo", 2.0, lines.append), "\n".join(lines)
    converged = [line for line in lines if line.startswith("converged")]
    assert len(converged) == 2, "\n".join(lines)
