"""``drc demo``: live bidirectional replication between the sandbox's two datacenters."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from drc.cli.sandbox import dir_option


@click.command()
@dir_option("Sandbox directory (started if needed); the demo's configs and logs go in DIR/demo.")
@click.option("--seconds", default=15.0, show_default=True, help="How long to write on both sides.")
def demo(directory: str, seconds: float) -> None:
    """Start both datacenters, write on both at once, and show them converge.

    Brings the two-datacenter sandbox up if needed, runs `drc run` for dc1 and dc2, creates a
    schema on dc1 (its DDL replicates), writes on both sides, then compares row counts and
    CHECKSUM TABLE until they are equal. The sandbox stays up: `drc sandbox down` stops it.
    """
    from drc.sandbox.demo import run_demo
    from drc.sandbox.sandbox import Sandbox

    say = lambda line: click.echo(line, err=False)  # noqa: E731
    description = Sandbox(directory).up(2, progress=say)
    say(description.to_json(reveal_password=False))
    ok = run_demo(description, Path(description.dir) / "demo", seconds, say)
    sys.exit(0 if ok else 1)
