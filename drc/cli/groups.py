"""``drc groups list|show|create|reset|delete``: the consumer groups a running ``drc run``
serves (``/v1/groups``, docs/subscribers.md). Creating, resetting and deleting need an admin
token (``[api] admin_tokens``) when the API has tokens."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from drc.cli.options import admin_api, admin_connection, api_document_format, range_option

_yes = click.option("--yes", is_flag=True, help="Do not ask for confirmation (for scripts).")
_connection = admin_connection("API of any member of the replicator group, e.g. http://dc1-a:8640.")


@contextmanager
def _groups(url: str, token: str | None, ca: Any, cert: Any, key: Any) -> Iterator[Any]:
    from drc.client.group_admin import GroupsApi

    with admin_api(GroupsApi, url, token, ca, cert, key) as api:
        yield api


@click.group()
def groups() -> None:
    """List, show, create, reset and delete consumer groups of a running drc run."""


@groups.command("list")
@_connection
@api_document_format
def list_(url: str, token: str | None, ca: Any, cert: Any, key: Any, fmt: str) -> None:
    """Each group: its members and ranges."""
    with _groups(url, token, ca, cert, key) as api:
        found = api.groups()
    if fmt == "json":
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    for group in found:
        click.echo(f"{group['name']}: {group['members']} members, {group['ranges']} ranges")


@groups.command()
@click.argument("name")
@_connection
@api_document_format
def show(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any, fmt: str) -> None:
    """A group's spec, members and ranges (owner, state, version, checkpoint)."""
    with _groups(url, token, ca, cert, key) as api:
        group = api.get(name)
    if fmt == "json":
        click.echo(json.dumps(group, indent=2, sort_keys=True))
        return
    spec = group["spec"]
    click.echo(
        f"{name}: tables {spec['tables'] or '*'}, by {spec['partitioning']}, "
        f"{spec['ranges']} ranges, heartbeat timeout {spec['heartbeat_timeout_s']}s"
    )
    held = Counter(r["owner"] for r in group["ranges"])
    for member in group["members"]:
        click.echo(f"  member {member['member']}: {held.get(member['member'], 0)} ranges")
    states = Counter(r["state"] for r in group["ranges"])
    click.echo("  ranges: " + ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
    oldest = min((r["checkpoint"] for r in group["ranges"]), key=_scn_order, default=None)
    click.echo(f"  oldest checkpoint: {oldest}")
    full = group.get("full")
    if full is not None:
        phase = "running" if full["running"] else "done"
        click.echo(f"  full phase {phase}: {full['terminated']} of {full['chunks']} chunks "
                   f"terminated, the ranges read after {full['scn']}")  # fmt: skip


def _scn_order(text: str) -> tuple[int, ...]:
    change_id, _server, index, pos = (int(p) for p in text.split(":"))
    return change_id, index, pos


@groups.command()
@click.argument("name")
@_connection
@click.option("--tables", default="", help="Table filter, as a pull's tables (default: all).")
@click.option("--partitioning", type=click.Choice(["key", "table"]), default="key",
              show_default=True, help="Place changes by key hash, or by table.")  # fmt: skip
@range_option("--ranges", 64, 1, 65536, help="Partition ranges shared among the members.")
@range_option("--heartbeat-timeout", 10.0, 0.1, help="Seconds without a heartbeat before a "
              "member's ranges move.", name="heartbeat_timeout")  # fmt: skip
@click.option("--after", default=None, metavar="SCN",
              help="Read after this SCN (default: the replicator's newest).")  # fmt: skip
@click.option("--full", is_flag=True, help="Start with a snapshot of the tables in chunks "
              "(the full phase), then read after the SCN it stands at.")  # fmt: skip
@range_option("--chunk-rows", 10_000, 1, 1_000_000, help="Rows per full-phase chunk, about.",
              name="chunk_rows")  # fmt: skip
def create(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any, tables: str,
           partitioning: str, ranges: int, heartbeat_timeout: float,
           after: str | None, full: bool, chunk_rows: int) -> None:  # fmt: skip
    """Create a consumer group (admin token)."""
    with _groups(url, token, ca, cert, key) as api:
        api.create(name=name, tables=tables, partitioning=partitioning, ranges=ranges,
                   heartbeat_timeout_s=heartbeat_timeout, after=after,
                   full=full or None, chunk_rows=chunk_rows if full else None)  # fmt: skip
    click.echo(f"group {name} created")


@groups.command()
@click.argument("name")
@_connection
@click.option("--to", "scn", required=True, metavar="SCN", help="Every range reads after SCN.")
@_yes
def reset(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any, scn: str,
          yes: bool) -> None:  # fmt: skip
    """Move every range's checkpoint to SCN (admin token); members holding a range read on
    from there (their old versions are refused)."""
    if not yes:
        click.confirm(f"Reset every checkpoint of group {name} to {scn}?", abort=True)
    with _groups(url, token, ca, cert, key) as api:
        api.reset(name, scn)
    click.echo(f"group {name} reads after {scn}")


@groups.command()
@click.argument("name")
@_connection
@_yes
def delete(name: str, url: str, token: str | None, ca: Any, cert: Any, key: Any,
           yes: bool) -> None:  # fmt: skip
    """Delete a consumer group and its checkpoints (admin token)."""
    if not yes:
        click.confirm(f"Delete group {name} and its checkpoints?", abort=True)
    with _groups(url, token, ca, cert, key) as api:
        api.delete(name)
    click.echo(f"group {name} deleted")
