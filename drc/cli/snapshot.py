"""``drc snapshot``: copy the origin's tables into this datacenter live, and join them to a
channel."""

from __future__ import annotations

import sys

import click

from drc.cli.options import channel_option, config_option, range_option
from drc.cli.spark import master_option, prepare
from drc.config import load_config


@click.command()
@config_option
@channel_option("join")
@click.option(
    "--tables",
    default="",
    help="Source tables to copy, comma-separated db.table patterns (default: the channel's "
    "tables; a table outside them is joined to the channel too).",
)
@master_option
@range_option(
    "--partitions", 4, 1, 4096,
    help="Spark tasks the chunks are spread over; each copies with its own two connections.",
)  # fmt: skip
@range_option(
    "--chunk-rows", 20_000, 100, 10_000_000,
    help="About how many rows one chunk (one consistent read, one target transaction) holds.",
)  # fmt: skip
@range_option(
    "--lease-ttl", 60.0, 1, 3600,
    help="Seconds the channel stays held after a killed snapshot (a re-run takes it over).",
)  # fmt: skip
def snapshot(config_path: str, channel_name: str, tables: str, master: str, partitions: int,
             chunk_rows: int, lease_ttl: float) -> None:  # fmt: skip
    """Copy the origin datacenter's tables into this target while writes go on, then join them
    to the channel.

    The origin is read from [channels.origin_db], one consistent read per key-range chunk (no
    lock), and written here without echo. The channel waits meanwhile, then applies each
    table's changes from exactly where its copy stands. Tables missing here are created from
    the origin's definition. Killed, it can be run again: copied chunks are skipped. Exit 1
    if a table was skipped (named, with the reason). See docs/snapshot.md.
    """
    from drc.snapshot.driver import run_snapshot

    prepare(master)
    config = load_config(config_path)
    patterns = [p.strip() for p in tables.split(",") if p.strip()]
    summary = run_snapshot(
        config, channel_name, patterns=patterns, master=master, partitions=partitions,
        chunk_rows=chunk_rows, lease_ttl_s=lease_ttl, out=lambda line: click.echo(line),
    )  # fmt: skip
    if summary.skipped:
        for name, why in summary.skipped.items():
            click.echo(f"skipped {name}: {why}", err=True)
        sys.exit(1)
