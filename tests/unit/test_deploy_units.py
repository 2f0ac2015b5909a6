"""deploy/systemd: the unit templates pass ``systemd-analyze verify`` and run ``drc run`` with
options it really has, as a non-root user, restarted on failure, hardened."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from drc.cli.run import run
from tests.support.tools import require_tool

SYSTEMD = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
UNITS = sorted(SYSTEMD.glob("*@.service"))
INSTALLED_DRC = "/opt/drc/.venv/bin/drc"  # docs/operations.md installs DRC there
ROLES = {"drc-replicator@.service": "replicator", "drc-apply@.service": "apply"}


def _directives(unit: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def _analyze(tmp_path: Path, units: dict[str, str], *command: str) -> str:
    """``systemd-analyze COMMAND`` on instances of the templates (name -> text), ExecStart
    pointing at this venv's drc: verify insists the binary exists (it does not look up User=)."""
    analyze = require_tool("systemd-analyze", "systemd")
    drc = Path(sys.executable).with_name("drc")
    paths = []
    for name, text in units.items():
        path = tmp_path / name.replace("@.", "@dc1-a.")
        path.write_text(text.replace(INSTALLED_DRC, str(drc)))
        paths.append(str(path))
    done = subprocess.run([analyze, *command, *paths], capture_output=True, text=True, timeout=120)
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}".strip()


def _verify(tmp_path: Path, units: dict[str, str]) -> str:
    return _analyze(tmp_path, units, "verify", "--man=no")


def test_the_templates_are_the_expected_ones() -> None:
    assert [u.name for u in UNITS] == sorted(ROLES)


def test_systemd_analyze_verify_passes_without_a_warning(tmp_path: Path) -> None:
    units = {unit.name: unit.read_text() for unit in UNITS}
    assert all(INSTALLED_DRC in text for text in units.values())
    assert _verify(tmp_path, units) == "exit 0"


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_exposure_is_in_systemds_ok_band(unit: Path, tmp_path: Path) -> None:
    """systemd's own hardening score: at most 2.0 of 10 (--threshold counts tenths)."""
    command = ("security", "--offline=true", "--threshold=20", "--no-pager")
    output = _analyze(tmp_path, {unit.name: unit.read_text()}, *command)
    assert output.startswith("exit 0"), output


def test_verify_reports_a_mistake_so_the_check_above_is_not_vacuous(tmp_path: Path) -> None:
    text = UNITS[0].read_text().replace("Restart=on-failure", "Restart=sometimes\nRestrat=no")
    output = _verify(tmp_path, {UNITS[0].name: text})
    assert "restart specifier" in output and "Unknown key 'Restrat'" in output


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_exec_start_runs_drc_run_with_options_it_has(unit: Path) -> None:
    (exec_start,) = _directives(unit)["ExecStart"]
    argv = shlex.split(exec_start.replace("%i", "dc1-a"))
    assert argv[:2] == [INSTALLED_DRC, "run"]
    params = run.make_context("run", argv[2:]).params  # click refuses unknown options
    assert params["config_path"] == "/etc/drc/dc1-a.toml"
    assert params["role"] == ROLES[unit.name]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: u.name)
def test_units_run_unprivileged_restart_on_failure_and_are_hardened(unit: Path) -> None:
    found = _directives(unit)
    assert found["User"] == ["drc"] and found["Group"] == ["drc"]
    assert found["Restart"] == ["on-failure"]
    assert found["EnvironmentFile"] == ["-/etc/drc/%i.env"]
    assert int(found["LimitNOFILE"][0]) >= 65536
    for key, value in {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
        "ProtectHome": "yes", "CapabilityBoundingSet": "", "UMask": "0077",
    }.items():  # fmt: skip
        assert found[key] == [value], key


def test_the_replicator_may_write_only_its_buffer_directory_created_0700() -> None:
    found = _directives(SYSTEMD / "drc-replicator@.service")
    assert found["StateDirectory"] == ["drc/%i"] and found["StateDirectoryMode"] == ["0700"]
    assert found["ReadWritePaths"] == ["/var/lib/drc/%i"]
    assert "ReadWritePaths" not in _directives(SYSTEMD / "drc-apply@.service")


def test_unit_comments_name_real_files() -> None:
    root = SYSTEMD.parents[1]
    for unit in UNITS:
        for name in re.findall(r"\b((?:docs|deploy)/[\w./-]+\.\w+)", unit.read_text()):
            assert (root / name).exists(), f"{unit.name} names {name}"
