"""``drc catchup``: replay a channel's backlog in bulk on Spark, then hand it back to streaming."""

from __future__ import annotations

import click

from drc.cli.options import channel_option, config_option, range_option
from drc.cli.spark import master_option, prepare
from drc.config import load_config
from drc.core.errors import MalformedScnError
from drc.core.scn import SCN


def _scn(_ctx: click.Context, _param: click.Parameter, value: str | None) -> SCN | None:
    if value is None:
        return None
    try:
        return SCN.parse(value)
    except MalformedScnError as exc:
        raise click.BadParameter(
            f"{exc} (an SCN is change_id:server_id:log_index:log_pos)"
        ) from None


@click.command()
@config_option
@channel_option("catch up")
@click.option(
    "--to",
    "to",
    callback=_scn,
    help="Last SCN to replay (default: the last SCN the remote replicator had committed when "
    "the catch-up started).",
)
@master_option
@range_option(
    "--partitions", 8, 1, 4096,
    help="Partitions each range is cut into by (table, primary key); each is written by one "
    "Spark task with its own target connection.",
)  # fmt: skip
@range_option(
    "--batch-changes", 2000, 1, 1_000_000,
    help="Net row changes per target transaction within a partition.",
)  # fmt: skip
@range_option(
    "--lease-ttl", 30.0, 1, 3600,
    help="Seconds the channel's lease outlives a killed catch-up (it is renewed meanwhile).",
)  # fmt: skip
def catchup(config_path: str, channel_name: str, to: SCN | None, master: str,
            partitions: int, batch_changes: int, lease_ttl: float) -> None:  # fmt: skip
    """Replay a channel's backlog in bulk (Spark), reduced to the net change per row.

    Takes the channel's lease (a streaming channel in `drc run` waits meanwhile), replays from
    its checkpoint to --to with the same filters and conflict decisions as streaming, applies
    DDL in order between the ranges it splits, and writes the checkpoint at the end: streaming
    continues from exactly there. Killed, run it again: it resumes the interrupted run and
    skips what it committed (left alone, the streaming channel finishes it itself, without
    Spark, once the lease expired). Progress lines go to stdout; see docs/catchup.md.
    """
    from drc.catchup.driver import run_catchup

    prepare(master)
    config = load_config(config_path)
    run_catchup(
        config, channel_name, to=to, master=master, partitions=partitions,
        batch_changes=batch_changes, lease_ttl_s=lease_ttl, out=lambda line: click.echo(line),
    )  # fmt: skip
