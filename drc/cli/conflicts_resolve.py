"""``drc conflicts resolve ID --take local|remote``: the one command of ``drc conflicts`` that
writes (drc.conflicts.followup says what and why)."""

from __future__ import annotations

import getpass
import socket
from typing import Any

import click

from drc.cli.conflicts import _target, conflicts, key_text, render_value
from drc.cli.options import config_option, stacked
from drc.config import load_config
from drc.mysql.sql import Statement

# The session stops being an apply session: the write is replicated like an application's,
# triggers guarded by @drc_apply fire for it, and "now" is the server's own time zone's.
_AS_AN_APPLICATION = Statement(
    "SET SESSION skip_replication = 0, @drc_apply = NULL, time_zone = @@global.time_zone", ()
)


@conflicts.command()
@click.argument("conflict_id", metavar="ID", type=click.IntRange(min=1))
@click.option(
    "--take",
    type=click.Choice(["local", "remote"]),
    required=True,
    help="local: the row this datacenter held; remote: the incoming version.",
)
@click.option("--reason", default="", help="Why (kept with the record).")
@click.option("--actor", default=None, help="Who (default: this OS user@host).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (for scripts).")
@stacked(config_option)
def resolve(config_path: str, conflict_id: int, take: str, reason: str, actor: str | None,
            yes: bool) -> None:  # fmt: skip
    """Write one side's row of conflict ID on every datacenter, and record who did it.

    The row is written here as an application would write it, so DRC replicates it once to
    every other datacenter (never back). On a table with a timestamp column (lww) that column
    is set to now, so the row is the newest everywhere. The record is in this datacenter's
    drc.conflict_resolutions; `drc conflicts show ID` shows it.
    """
    from drc.conflicts import followup
    from drc.conflicts.log import get_conflict
    from drc.conflicts.policies import Policies

    config = load_config(config_path)
    who = actor or f"{getpass.getuser()}@{socket.gethostname()}"
    with _target(config_path) as session:
        found = get_conflict(session, conflict_id)
        session.commit()
        if found is None:
            raise click.ClickException(f"no conflict with id {conflict_id} on this target")
        policies = Policies.from_config(config.conflicts) if config.conflicts else None
        policy = None if policies is None else policies.get(found.schema, found.table)
        column = None if policy is None else policy.column
        if policy is not None and policy.delta_columns:
            raise click.ClickException(
                f"{found.schema}.{found.table} has counter columns "
                f"({', '.join(policy.delta_columns)}): every datacenter adds what a write did "
                "to them, so a row taken from one side would be added, not taken; update the "
                "other columns with a plain UPDATE instead"
            )
        preview = followup.Resolution.of(found, take, None if column is None else (column, "now"))
        click.echo(f"conflict {found.id}: {found.schema}.{found.table} {key_text(found.key)}")
        click.echo(f"take {take}: " + _row_text(preview.row))
        if not yes:
            click.confirm("write this row here (it replicates to every datacenter)?", abort=True)
        session.run_setup(followup.create_statements(), "creating drc.conflict_resolutions")
        session.execute(_AS_AN_APPLICATION, "leaving the apply session's settings")
        stamp = None
        if column is not None:
            now = session.query(Statement("SELECT CURRENT_TIMESTAMP(6)", ()), "reading now")
            stamp = (column, now[0][0])
        chosen = followup.Resolution.of(found, take, stamp)
        session.execute(chosen.write(), f"writing {found.schema}.{found.table}")
        session.execute(chosen.record(who, reason), "recording the resolution")
        session.commit()
    click.echo(f"resolved conflict {found.id}: took {take} (by {who}); it replicates from here")


def _row_text(row: Any) -> str:
    if row is None:
        return "(no row: it is deleted)"
    return ", ".join(f"{k}={render_value(v)}" for k, v in row.items())
