"""``drc run``: a datacenter's replicator, pull API and apply channels in one process."""

from __future__ import annotations

import logging
import signal
import threading

import click

from drc import native
from drc.cli.options import config_option, progress_option
from drc.config import load_config


def setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # Per-request and per-connection chatter: every long poll would log a line.
    for noisy in ("pymysqlreplication", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # kazoo warns at every reconnect attempt; drc.replicator.group says what matters once.
    logging.getLogger("kazoo").setLevel(logging.ERROR)


def run_node(config_path: str, role: str, progress_every: float) -> None:
    """Run ``role`` of the configured datacenter until SIGINT/SIGTERM (shared by the commands)."""
    from drc.node import Node
    from drc.runtime import freeze_startup_heap

    setup_logging()
    hot = native.STATE
    logging.getLogger("drc.native").info(
        "hot path: %s (%s=%s: %s)", "compiled" if hot.compiled else "pure Python",
        native.SETTING, hot.setting, hot.reason,
    )  # fmt: skip
    config = load_config(config_path)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    node = Node(config, role, config_path=config_path)
    # SIGHUP: read the file again; channels take new table selections without a restart.
    signal.signal(signal.SIGHUP, lambda *_: node.reload_requested.set())
    try:
        node.start(stop)
        freeze_startup_heap()  # after start: what it built lives as long as the process
        if node.api_url:
            click.echo(f"API serving on {node.api_url}")  # stdout: scripts read the URL here
        node.wait(
            stop, progress_every, lambda line: click.echo(line, err=True),
            reload=lambda: load_config(config_path),
        )  # fmt: skip
    finally:
        stop.set()
        node.close()


@click.command()
@config_option
@click.option(
    "--role",
    type=click.Choice(["all", "replicator", "apply"]),
    default="all",
    show_default=True,
    help="replicator = capture + pull API; apply = the [[channels]]; all = both.",
)
@progress_option
def run(config_path: str, role: str, progress_every: float) -> None:
    """Run this datacenter's DRC until SIGINT/SIGTERM.

    Capture resumes exactly after the buffer's last SCN; each channel resumes after the SCN in
    its drc.checkpoint row on the target. Exits non-zero if capture stops with an error.

    SIGHUP reads the config again: a channel's tables, exclude, map_tables, map_columns and
    objects change without a restart (from its checkpoint; rows written to a newly added table
    before the reload are not copied: snapshot them). Other changes are logged as needing a
    restart; a file that does not load changes nothing (check it with drc config check).
    """
    run_node(config_path, role, progress_every)
