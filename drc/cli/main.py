"""Entry point of the ``drc`` command. Each resource has its own module of commands."""

from __future__ import annotations

import sys

import click

from drc import __version__
from drc.cli.buffer import buffer
from drc.cli.catchup import catchup
from drc.cli.channel import channel
from drc.cli.config import config
from drc.cli.conflicts import conflicts
from drc.cli.conflicts_resolve import resolve as _resolve  # noqa: F401  (registers it)
from drc.cli.demo import demo
from drc.cli.groups import groups
from drc.cli.replicator import replicator
from drc.cli.run import run
from drc.cli.sandbox import sandbox
from drc.cli.schema import schema
from drc.cli.sink import sink
from drc.cli.snapshot import snapshot
from drc.cli.tail import status, tail
from drc.cli.verify import verify
from drc.cli.wait import wait
from drc.core.errors import DrcError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="drc")
def cli() -> None:
    """DRC: bidirectional MySQL/MariaDB replication across datacenters.

    Every committed change in one datacenter is copied to the others, in order, exactly once,
    and never echoed back. Run `drc COMMAND --help` for the details of a command.
    """


cli.add_command(sandbox)
cli.add_command(buffer)
cli.add_command(replicator)
cli.add_command(schema)
cli.add_command(tail)
cli.add_command(sink)
cli.add_command(status)
cli.add_command(run)
cli.add_command(demo)
cli.add_command(conflicts)
cli.add_command(config)
cli.add_command(channel)
cli.add_command(groups)
cli.add_command(catchup)
cli.add_command(snapshot)
cli.add_command(verify)
cli.add_command(wait)


def main() -> None:
    """Run the CLI; DRC errors become one clear line on stderr and exit status 1."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except DrcError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
