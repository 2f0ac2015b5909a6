"""``drc conflicts list|show|stats``: read the conflict log (drc.conflicts) on a target database
(``resolve``, which writes, is drc.cli.conflicts_resolve).

These read only. The connection is the datacenter's target from ``--config`` ([target], else
[source]); its password never appears in output or errors. drc.apply (pymysql, httpx) is
imported lazily so ``drc --help`` does not load pymysql. Times are UTC.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from drc.cli.options import Parsed, config_option, format_option, range_option, stacked
from drc.cli.schema import TABLE_NAME
from drc.config import load_config
from drc.core.errors import DrcError
from drc.core.jsonwire import value_to_json
from drc.core.values import Bit, ZeroDate, same_value, utc_aware

if TYPE_CHECKING:  # drc.apply loads pymysql and httpx: imported where a command needs it
    from drc.conflicts.log import ConflictCount, StoredConflict

_VALUE_WIDTH = 40  # a longer value is cut in tables; --format json has it whole
_AGE = re.compile(r"(\d+)\s*([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
SINCE_FORMS = "an ISO datetime in UTC (2026-11-22T10:00:00) or an age: 90s, 10m, 2h, 3d"
NO_ROW = "(no row)"


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """The aware UTC time ``text`` names: an age before ``now`` ("90s", "10m", "2h", "3d") or
    an ISO date/datetime (UTC unless it carries an offset). ValueError otherwise."""
    text = text.strip()
    age = _AGE.fullmatch(text)
    if age is not None:
        return now - dt.timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not {SINCE_FORMS}") from None
    return utc_aware(when)


_since = click.option(
    "--since",
    type=Parsed("WHEN", lambda text: parse_since(text, _utcnow())),
    default=None,
    help=f"Only conflicts detected at or after WHEN: {SINCE_FORMS}.",
)
_format = format_option(
    "table", "table: aligned text; json: one document, values in DRC's lossless JSON form."
)


@contextmanager
def _target(config_path: str) -> Iterator[Any]:
    """A session on the config's target; DRC errors become one line and exit status 1."""
    from drc.apply.service import target_settings
    from drc.apply.sink import TargetSession

    try:
        config = load_config(config_path)
        session = TargetSession(target_settings(config.target_or_source()))
        try:
            yield session
        finally:
            session.close()
    except DrcError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def conflicts() -> None:
    """Conflicts the apply channels detected, and how each was resolved.

    A conflict is an incoming change that does not fit the target's row: an insert over a
    different row, an update or delete of a row that changed or is gone here. A channel with
    a conflict policy records each one in the target's drc.conflicts table, with the local
    row, the incoming before/after images and the row it left, in the same transaction as
    the resolution. These commands only read that table.
    """


@conflicts.command("list")
@stacked(config_option, _since, _format)
@click.option("--channel", default=None, help="Only conflicts of this apply channel.")
@click.option("--table", type=TABLE_NAME, default=None, metavar="DB.TABLE", help="Only this table.")
@click.option("--policy", default=None, help="Only conflicts this policy decided (lww, ...).")
@range_option("--limit", 50, 1, help="Show at most N (the newest).")
def list_command(
    config_path: str,
    since: dt.datetime | None,
    fmt: str,
    channel: str | None,
    table: tuple[str, str] | None,
    policy: str | None,
    limit: int,
) -> None:
    """One line per logged conflict, newest first.

    Shows id, detection time, channel, origin -> this datacenter, table, primary key, kind,
    policy and decision. `drc conflicts show ID` prints the rows of one.
    """
    from drc.conflicts.log import list_conflicts

    with _target(config_path) as session:
        found = list_conflicts(
            session, channel=channel, table=table, since=since, limit=limit, policy=policy
        )
    if fmt == "json":
        _echo_json([conflict_json(c) for c in found])
    elif not found:
        filtered = channel or table or since or policy
        click.echo("no conflicts match" if filtered else "no conflicts recorded")
    else:
        for line in list_lines(found):
            click.echo(line)


@conflicts.command()
@click.argument("conflict_id", metavar="ID", type=click.IntRange(min=1))
@stacked(config_option, _format)
def show(config_path: str, fmt: str, conflict_id: int) -> None:
    """One conflict: who decided what and why, then its rows side by side.

    One line per column: the local row before, the incoming before and after images, and the
    row the target holds now. `*` marks a column whose local value differs from an incoming
    image (highlighted on a terminal). Exits 1 if there is no conflict ID.
    """
    from drc.conflicts.followup import resolutions
    from drc.conflicts.log import get_conflict

    with _target(config_path) as session:
        found = get_conflict(session, conflict_id)
        resolved = resolutions(session, conflict_id) if found is not None else []
    if found is None:
        raise click.ClickException(f"no conflict with id {conflict_id} on this target")
    if fmt == "json":
        _echo_json({**conflict_json(found), "resolutions": [r.as_dict() for r in resolved]})
        return
    color = sys.stdout.isatty()  # piped: plain text
    for line in show_lines(found, color=color):
        click.echo(line)
    for r in resolved:
        note = f" ({r.reason})" if r.reason else ""
        click.echo(f"resolved: took {r.taken}, by {r.actor} at {_time(r.at)}{note}")


@conflicts.command("stats")
@stacked(config_option, _since, _format)
def stats_command(config_path: str, since: dt.datetime | None, fmt: str) -> None:
    """Conflict counts per table and policy, by decision, and a total.

    Each line: table, policy, how many conflicts, how many of them each decision settled
    (incoming, local, custom, delete) and the kinds seen.
    """
    from drc.conflicts.log import stats

    with _target(config_path) as session:
        counts = stats(session, since=since)
    if fmt == "json":
        _echo_json(stats_json(counts, since))
    elif not counts:
        click.echo("no conflicts" + (f" since {_time(since)}" if since else " recorded"))
    else:
        for line in stats_lines(counts):
            click.echo(line)


def _echo_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


# ---------------------------------------------------------------- values


def render_value(value: Any, width: int | None = _VALUE_WIDTH) -> str:
    """A column value as a person reads it: NULL, ISO times, 0x.. bytes; cut at ``width``."""
    text = _render(value)
    if width is not None and len(text) > width:
        return text[: width - 3] + "..."
    return text


def _render(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return value if _plain(value) else json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, Bit):  # as pymysql reads BIT: big-endian bytes
        return "0x" + value.value.to_bytes((value.width + 7) // 8, "big").hex()
    if isinstance(value, set | frozenset):
        return ",".join(sorted(value))
    if isinstance(value, ZeroDate):
        return value.text
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, dt.date):  # datetime included
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value_to_json(value)["$time"])
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)  # int, float, Decimal, bool


def _plain(text: str) -> bool:
    """Shown without quotes: not empty, no edge spaces or control characters, not a marker."""
    return (
        text != ""
        and text == text.strip()
        and text.isprintable()
        and text not in ("NULL", NO_ROW, "-")
    )


def key_text(key: Mapping[str, Any]) -> str:
    """A primary key compactly: ``id=5`` or ``a=1,b=x``."""
    return render_value(",".join(f"{k}={render_value(v)}" for k, v in key.items()))


# ---------------------------------------------------------------- list


def list_lines(found: Sequence[StoredConflict]) -> list[str]:
    rows = [("id", "detected_at", "channel", "from", "table", "key", "kind", "policy", "decision")]
    rows += [
        (
            str(c.id),
            c.detected_at.strftime("%Y-%m-%d %H:%M:%S"),
            c.channel,
            f"{c.origin}->{c.datacenter}",
            f"{c.schema}.{c.table}",
            key_text(c.key),
            c.kind,
            c.policy,
            c.decision,
        )  # fmt: skip
        for c in found
    ]
    return aligned(rows, right={0})


def conflict_json(c: StoredConflict) -> dict[str, Any]:
    """The JSON document of one conflict; row values in drc.core.jsonwire's tagged form."""
    from drc.conflicts.log import row_to_json

    return {
        "id": c.id,
        "detected_at": c.detected_at.isoformat(),
        "channel": c.channel,
        "origin": c.origin,
        "datacenter": c.datacenter,
        "scn": c.scn,
        "origin_time": None if c.origin_time is None else c.origin_time.isoformat(),
        "schema": c.schema,
        "table": c.table,
        "key": row_to_json(c.key),
        "kind": c.kind,
        "policy": c.policy,
        "decision": c.decision,
        "reason": c.reason,
        "local_row": row_to_json(c.local_row),
        "incoming_before": row_to_json(c.incoming_before),
        "incoming_after": row_to_json(c.incoming_after),
        "result_row": row_to_json(c.result_row),
        "changed_columns": changed_columns(c),
    }


# ---------------------------------------------------------------- show

_IMAGES = ("local_row", "incoming_before", "incoming_after", "result_row")


def changed_columns(c: StoredConflict) -> list[str]:
    """Columns whose local value differs from the incoming after-image or before-image (none
    when there is no local row: nothing here to differ)."""
    local = c.local_row
    if local is None:
        return []
    images = [image for image in (c.incoming_before, c.incoming_after) if image is not None]
    return [
        name
        for name in _column_order(c)
        if any(
            name not in image or name not in local or not same_value(local[name], image[name])
            for image in images
        )
    ]


def _column_order(c: StoredConflict) -> list[str]:
    """Columns in table order as the rows give it: the local row's, then any others."""
    names: dict[str, None] = {}
    for image in (c.local_row, c.incoming_after, c.incoming_before, c.result_row):
        names.update(dict.fromkeys(image or ()))
    return list(names)


def show_lines(c: StoredConflict, *, color: bool = False) -> list[str]:
    """The header, then one line per column (marked and, with ``color``, highlighted)."""
    origin_time = "unknown" if c.origin_time is None else f"{_time(c.origin_time)} UTC"
    header = [
        ("conflict", f"{c.id}, detected {_time(c.detected_at)} UTC"),
        ("channel", f"{c.channel} ({c.origin} -> {c.datacenter})"),
        ("scn", c.scn),
        ("origin time", origin_time),
        ("table", f"{c.schema}.{c.table}"),
        ("key", key_text(c.key)),
        ("kind", c.kind),
        ("policy", c.policy),
        ("decision", c.decision),
        ("reason", c.reason),
    ]
    lines = aligned(header)
    changed = set(changed_columns(c))
    images = [getattr(c, name) for name in _IMAGES]
    rows: list[tuple[str, ...]] = [
        (" ", "column", "local", "incoming before", "incoming after", "result")
    ]
    for name in _column_order(c):
        cells = [_cell(image, name) for image in images]
        rows.append(("*" if name in changed else " ", name, *cells))
    table = aligned(rows)
    lines += ["", table[0]]
    for name, line in zip(_column_order(c), table[1:], strict=True):
        highlight = color and name in changed
        lines.append(click.style(line, fg="yellow", bold=True) if highlight else line)
    if changed:
        lines += ["", "* local value differs from the incoming before or after image"]
    return lines


def _cell(image: Mapping[str, Any] | None, name: str) -> str:
    if image is None:
        return NO_ROW
    return render_value(image[name]) if name in image else "-"


def _time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(" ")


# ---------------------------------------------------------------- stats


def _summaries(counts: Sequence[ConflictCount]) -> list[dict[str, Any]]:
    """One summary per (schema, table, policy): total, per decision and per kind."""
    from drc.conflicts.log import DECISIONS

    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for n in counts:
        group = groups.setdefault(
            (n.schema, n.table, n.policy),
            {"schema": n.schema, "table": n.table, "policy": n.policy, "total": 0,
             "decisions": dict.fromkeys(DECISIONS, 0), "kinds": {}},
        )  # fmt: skip
        group["total"] += n.count
        group["decisions"][n.decision] = group["decisions"].get(n.decision, 0) + n.count
        group["kinds"][n.kind] = group["kinds"].get(n.kind, 0) + n.count
    return list(groups.values())


def stats_json(counts: Sequence[ConflictCount], since: dt.datetime | None) -> dict[str, Any]:
    from drc.conflicts.log import DECISIONS

    tables = _summaries(counts)
    decisions = dict.fromkeys(DECISIONS, 0)
    for n in counts:
        decisions[n.decision] = decisions.get(n.decision, 0) + n.count
    return {
        "since": None if since is None else since.isoformat(),
        "total": sum(n.count for n in counts),
        "decisions": decisions,
        "tables": tables,
    }


def stats_lines(counts: Sequence[ConflictCount]) -> list[str]:
    document = stats_json(counts, None)
    names = list(document["decisions"])
    rows = [("table", "policy", "total", *names, "kinds")]
    for s in document["tables"]:
        kinds = ", ".join(f"{kind} {n}" for kind, n in s["kinds"].items())
        rows.append(
            (f"{s['schema']}.{s['table']}", s["policy"], str(s["total"]),
             *(str(s["decisions"][d]) for d in names), kinds)
        )  # fmt: skip
    totals = (str(document["decisions"][d]) for d in names)
    rows.append(("total", "", str(document["total"]), *totals, ""))
    return aligned(rows, right=set(range(2, 3 + len(names))))


# ---------------------------------------------------------------- layout


def aligned(
    rows: Sequence[Sequence[str]], right: set[int] | frozenset[int] = frozenset()
) -> list[str]:
    """Rows as lines of columns two spaces apart; columns in ``right`` right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
