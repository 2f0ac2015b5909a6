"""``drc replicator run``: capture a source binlog into the EventBuffer."""

from __future__ import annotations

import logging
import signal
import threading
import time

import click

from drc.config import load_config

log = logging.getLogger("drc.replicator")


@click.group()
def replicator() -> None:
    """The replicator: tails the source binlog into an SCN-ordered EventBuffer."""


@replicator.command()
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Datacenter config (TOML); see deploy/dc1.example.toml.",
)
@click.option(
    "--progress-every",
    default=5.0,
    show_default=True,
    help="Seconds between progress lines (0: none).",
)
def run(config_path: str, progress_every: float) -> None:
    """Capture until SIGINT/SIGTERM, resuming exactly after the buffer's last SCN.

    Also serves the pull API ([api] in the config) from this process, so subscribers are
    woken by each commit.
    """
    from drc.runtime import build_replicator

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = load_config(config_path)
    service = build_replicator(config)
    try:
        api = service.start_api()
    except BaseException:
        service.close()
        raise
    click.echo(f"API serving on {api.url}")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    failures: list[BaseException] = []

    def capture() -> None:
        try:
            service.run_capture(stop)
        except BaseException as exc:  # re-raised below so the CLI exits with the message
            failures.append(exc)
            stop.set()

    worker = threading.Thread(target=capture, name="capture")
    worker.start()
    try:
        last_progress = time.monotonic()
        while worker.is_alive():
            # Bounded: an unbounded join can keep a SIGTERM delivered to another thread from
            # ever running its handler.
            worker.join(timeout=1.0)
            due = progress_every and time.monotonic() - last_progress >= progress_every
            if due and worker.is_alive():
                last_progress = time.monotonic()
                stats = service.replicator.stats
                click.echo(
                    f"captured {stats.transactions} txns, {stats.rows} rows, "
                    f"{stats.bytes / 1e6:.1f} MB; buffer at {service.buffer.last_scn}; "
                    f"source at {stats.source_position}; reconnects {stats.reconnects}",
                    err=True,
                )
    finally:
        stop.set()
        worker.join()
        service.close()
    if failures:
        raise failures[0]
