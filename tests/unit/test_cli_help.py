"""Every `drc` command and subcommand answers --help; the installed script runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from drc.cli.main import cli


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            paths.extend(_command_paths(command, (*prefix, name)))
        else:
            paths.append((*prefix, name))
    return paths


ALL_COMMANDS = _command_paths(cli)


def test_the_command_tree_has_the_sandbox_commands() -> None:
    assert {("sandbox", "up"), ("sandbox", "down"), ("sandbox", "status")} <= set(ALL_COMMANDS)
    assert {("conflicts", "list"), ("conflicts", "show"), ("conflicts", "stats")} <= set(
        ALL_COMMANDS
    )


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "drc")
def test_help_works(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")
    # A command whose docstring is missing shows an empty description.
    assert len(result.output.splitlines()) > 3


def test_installed_drc_script_prints_help() -> None:
    script = Path(sys.executable).with_name("drc")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "sandbox" in result.stdout


def test_unknown_command_fails_with_usage_error() -> None:
    result = CliRunner().invoke(cli, ["no-such-command"])
    assert result.exit_code == 2 and "No such command" in result.output
