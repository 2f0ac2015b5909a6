"""``drc channel list|pause|resume|skip|rewind|history``: control a running ``drc run``'s
apply channels through its API (``/v1/channels``). Actions need an admin token
(``[api] admin_tokens``) when the API has tokens; each is recorded in drc.channel_audit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from drc.cli.options import admin_api, admin_connection, api_document_format

_reason = click.option(
    "--reason", default="", help="Why: kept in the audit trail (drc channel history)."
)
_yes = click.option("--yes", is_flag=True, help="Do not ask for confirmation (for scripts).")
_connection = admin_connection(
    "API of the drc run process that runs the channel, e.g. http://dc1-a:8640."
)


@contextmanager
def _channels(url: str, token: str | None, ca: Any, cert: Any, key: Any) -> Iterator[Any]:
    from drc.client.control import ChannelApi

    with admin_api(ChannelApi, url, token, ca, cert, key) as api:
        yield api


@click.group()
def channel() -> None:
    """Pause, resume, skip and rewind the apply channels of a running drc run."""


@channel.command("list")
@_connection
@api_document_format
def list_(url: str, token: str | None, ca: Any, cert: Any, key: Any, fmt: str) -> None:
    """Each channel: state, lag, last applied SCN, and the transaction a stopped one stopped at."""
    with _channels(url, token, ca, cert, key) as api:
        found = api.channels()
    if fmt == "json":
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    for ch in found:
        lag = ch.get("lag_seconds")
        lag_text = "-" if lag is None else f"{lag:.1f}s"
        click.echo(f"{ch['name']}: {ch.get('state', '?')}, lag {lag_text}, at {ch.get('last_scn')}")
        counts = ", ".join(
            f"{ch[key]:,} {label}"
            for key, label in (("transactions", "transactions"), ("conflicts", "conflicts"),
                               ("replays", "replays"), ("idempotent_fixes", "idempotent fixes"))
            if isinstance(ch.get(key), int)
        )  # fmt: skip
        if counts:
            click.echo(f"  {counts}")
        stopped = ch.get("stopped_at")
        if stopped:
            click.echo(f"  stopped at {stopped['scn']}: {stopped['error']}")
            tables = stopped.get("tables") or {}
            if tables:
                listed = ", ".join(f"{t} ({n} change{'s' * (n != 1)})" for t, n in tables.items())
                click.echo(f"  tables: {listed}")
            for key in stopped.get("keys") or ():
                click.echo(f"  row: {key}")
            name = ch["name"]
            click.echo(
                f"  continue with `drc channel resume {name}` (after fixing the cause), "
                f"`drc channel skip {name}` or `drc channel rewind {name} --to SCN`"
            )


@channel.command()
@click.argument("name")
@_connection
@click.option("--until", default=None, metavar="SCN", help="Apply up to this SCN, then pause.")
@_reason
def pause(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any,
          until: str | None, reason: str) -> None:  # fmt: skip
    """Stop applying (after the open target transaction); resume continues where it stopped."""
    with _channels(url, token, ca, cert, key) as api:
        result = api.act(name, "pause", reason=reason, until=until)
    click.echo(_summary(result))


@channel.command()
@click.argument("name")
@_connection
@_reason
def resume(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any,
           reason: str) -> None:  # fmt: skip
    """Continue a paused channel, or retry a stopped one's transaction (after a fix)."""
    with _channels(url, token, ca, cert, key) as api:
        result = api.act(name, "resume", reason=reason)
    click.echo(_summary(result))


@channel.command()
@click.argument("name")
@_connection
@_reason
@_yes
def skip(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any,
         reason: str, yes: bool) -> None:  # fmt: skip
    """Skip the transaction a stopped channel stopped at (shown first), and continue after it.

    The skipped transaction's changes are NOT applied here: the datacenters differ on those
    rows until you repair them (the audit trail keeps what was skipped)."""
    with _channels(url, token, ca, cert, key) as api:
        stopped = api.get(name).get("stopped_at")
        if not stopped:
            raise click.ClickException(f"channel {name} is not stopped; nothing to skip")
        click.echo(f"channel {name} stopped at {stopped['scn']}:")
        click.echo(f"  error: {stopped['error']}")
        for table, rows in stopped.get("tables", {}).items():
            click.echo(f"  {table}: {rows} row changes")
        for ddl in stopped.get("ddl", []):
            click.echo(f"  DDL: {ddl}")
        if stopped.get("keys"):
            click.echo(f"  keys: {', '.join(stopped['keys'])}")
        if not yes:
            click.confirm("Skip this transaction?", abort=True)
        result = api.act(name, "skip", reason=reason, scn=stopped["scn"])
    click.echo(_summary(result))


@channel.command()
@click.argument("name")
@_connection
@click.option("--to", "scn", default=None, metavar="SCN", help="Replay everything after SCN.")
@click.option("--to-time", "at", default=None, metavar="TIME",
              help='Replay from the first change committed at or after TIME (UTC unless an '
              'offset is given), e.g. "2026-11-23 14:00".')  # fmt: skip
@_reason
@_yes
def rewind(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any,
           scn: str | None, at: str | None, reason: str, yes: bool) -> None:  # fmt: skip
    """Replay the channel from an earlier point; replayed changes converge (idempotent) and
    are counted as replays, not conflicts."""
    if (scn is None) == (at is None):
        raise click.UsageError("give exactly one of --to SCN or --to-time TIME")
    if not yes:
        click.confirm(f"Rewind channel {name} to {scn or at}?", abort=True)
    with _channels(url, token, ca, cert, key) as api:
        result = api.act(name, "rewind", reason=reason, scn=scn, time=at)
    click.echo(_summary(result))


@channel.command()
@click.argument("name")
@_connection
@click.option("--limit", default=50, show_default=True, help="How many entries, newest first.")
@api_document_format
def history(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any,
            limit: int, fmt: str) -> None:  # fmt: skip
    """The channel's audit trail: who did what, when and why."""
    with _channels(url, token, ca, cert, key) as api:
        entries = api.history(name, limit)
    if fmt == "json":
        click.echo(json.dumps(entries, indent=2, sort_keys=True))
        return
    for e in entries:
        detail = json.dumps(e["detail"], sort_keys=True)
        click.echo(f"{e['at']}  {e['action']:<6}  by {e['actor']}: {e['reason'] or '-'}  {detail}")


def _summary(result: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in result.items())
