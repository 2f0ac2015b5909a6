"""``drc replicator run``: capture a source binlog into the EventBuffer."""

from __future__ import annotations

import click

from drc.cli.options import config_option, progress_option
from drc.cli.run import run_node


@click.group()
def replicator() -> None:
    """The replicator: tails the source binlog into an SCN-ordered EventBuffer."""


@replicator.command()
@config_option
@progress_option
def run(config_path: str, progress_every: float) -> None:
    """Capture until SIGINT/SIGTERM, resuming exactly after the buffer's last SCN.

    Also serves the pull API ([api] in the config) from this process, so subscribers are
    woken by each commit. The same as `drc run --role replicator`.
    """
    run_node(config_path, "replicator", progress_every)
