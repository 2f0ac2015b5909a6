"""``drc config check``: validate config files before a deploy or a reload."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from drc.config import config_problems


@click.group()
def config() -> None:
    """Work with DRC config files."""


@config.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def check(files: tuple[str, ...]) -> None:
    """Validate each FILE; print its problems as FILE:LINE: field: message and exit 1 if any.

    Nothing is connected to: this checks the file's form and values (what `drc run` would refuse
    at start), not whether the servers it names are reachable.
    """
    failed = False
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError as exc:
            click.echo(f"{name}: not readable: {exc.strerror or exc}", err=True)
            failed = True
            continue
        problems = config_problems(text)
        for problem in problems:
            where, _, rest = problem.partition(": ")
            if where.startswith("line "):
                click.echo(f"{name}:{where[5:]}: {rest}", err=True)
            else:
                click.echo(f"{name}: {problem}", err=True)
        if problems:
            failed = True
        else:
            click.echo(f"{name}: OK")
    if failed:
        sys.exit(1)
