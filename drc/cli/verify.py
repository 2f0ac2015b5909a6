"""``drc verify``: compare a channel's source and target tables, optionally repair them."""

from __future__ import annotations

import sys

import click

from drc.cli import spark
from drc.cli.options import channel_option, config_option, format_option, range_option
from drc.config import load_config


@click.command()
@config_option
@channel_option("verify")
@click.option(
    "--tables",
    default=None,
    help="Only these tables (source names, comma-separated patterns: db.t,db2.*).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Make each confirmed difference equal (the source's row wins, for lww tables "
    "the newer row), without echo; every repair is logged in drc.verify_repairs.",
)
@format_option("text", "The report's form on stdout.")
@spark.master_option
@range_option("--chunk-rows", 10_000, 10, 10**7, help="Rows per chunk compared by checksum.")
@range_option(
    "--streams", 2, 1, 64,
    help="Chunk comparisons each Spark task runs at once (they wait on the servers).",
)  # fmt: skip
@range_option(
    "--keys", 20, 0, 10**6, name="keys_shown", help="Keys of differing rows shown per table."
)
@range_option(
    "--rounds", 6, 2, 100,
    help="Recheck rounds before a row that keeps changing is given up as unsettled.",
)  # fmt: skip
@click.option(
    "--no-recheck",
    is_flag=True,
    help="Report differences as first found, without waiting for replication: only "
    "for a pair nothing writes to (a stopped channel, a benchmark).",
)
def verify(config_path: str, channel_name: str, tables: str | None, repair: bool, fmt: str,
           master: str, chunk_rows: int, streams: int, keys_shown: int, rounds: int,
           no_recheck: bool) -> None:  # fmt: skip
    """Check that a channel's source and target hold the same rows.

    Both servers compute a count and a checksum per key range (Spark tasks); differing ranges
    are compared down to the row, and differing rows are read again once replication has
    passed the point they were read at, so only real differences are reported. Exit status 1
    when any remains (or a table could not be compared). Needs [channels.origin_db]; see
    docs/verify.md.
    """
    from drc.verify import report as shown
    from drc.verify.driver import Options, run_verify

    spark.prepare(master)
    config = load_config(config_path)
    options = Options(tables=tables, repair=repair, master=master, chunk_rows=chunk_rows,
                      streams=streams, max_rounds=rounds, keys_shown=keys_shown,
                      recheck=not no_recheck)  # fmt: skip
    progress = (lambda line: click.echo(line, err=True)) if fmt == "json" else click.echo
    result = run_verify(config, channel_name, options, out=progress)
    if fmt == "json":
        click.echo(shown.as_json(result, keys_shown))
    else:
        for line in shown.as_text(result, keys_shown):
            click.echo(line)
    if result.differences:
        sys.exit(1)
