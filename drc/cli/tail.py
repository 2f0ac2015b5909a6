"""``drc tail`` (print the change stream as it arrives) and ``drc status`` (a replicator's state).

Thin over :mod:`drc.client`, imported lazily so ``drc --help`` does not load httpx.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from drc.cli.options import (
    api_document_format,
    client_errors,
    format_option,
    parse_after,
    range_option,
    replicator_api_option,
    tls_options,
    token_option,
)
from drc.core.errors import DrcError
from drc.core.events import Op, RowChange, Transaction
from drc.core.jsonwire import transaction_to_json, value_to_json

TRANSPORT: Any = None  # an httpx transport for tests; None = the network
_VALUE_WIDTH = 60


@click.command()
@replicator_api_option
@click.option("--after", default=None, metavar="SCN", help="Start after this SCN (c:s:i:p).")
@click.option("--tables", default=None, help="Comma-separated db.table patterns, e.g. shop.*.")
@format_option(
    "table", "table: one line per row change; json: one transaction per line (lossless)."
)
@token_option
@tls_options
@click.option(
    "--checkpoint",
    type=click.Path(dir_okay=False),
    default=None,
    help="File that keeps the position across runs (resumes from it; saved after each batch).",
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Stop after N txns.")
@click.option("--skip-drc", is_flag=True, help="Leave out transactions DRC itself applied.")
@range_option(
    "--retry-for", 30.0, 0,
    help="Seconds to keep retrying unreachable APIs before giving up (0: forever).",
)  # fmt: skip
def tail(
    urls: tuple[str, ...],
    after: str | None,
    tables: str | None,
    fmt: str,
    token: str | None,
    ca: str | None,
    cert: str | None,
    key: str | None,
    checkpoint: str | None,
    limit: int | None,
    skip_drc: bool,
    retry_for: float,
) -> None:
    """Print changes from a replicator's pull API as they arrive, until Ctrl-C or --limit.

    The start position is the --checkpoint file's if it exists, else --after, else the
    beginning of the buffer. Empty progress markers are not printed. A transaction DRC applied
    that the replicator stores without its rows ([replicator] drc_applied = "marker") is one
    line "rows not stored [drc]" (json: "rows_omitted": true), whatever --tables says.
    """
    from drc.client import FileCheckpointStore, Subscriber

    start = parse_after(after)
    store = FileCheckpointStore(checkpoint) if checkpoint else None
    emit = _json_line if fmt == "json" else _table_lines
    with (
        client_errors(),
        Subscriber(
            urls,
            start,
            tables,
            checkpoint=store,
            token=token,
            skip_drc=skip_drc,
            drc_applied="marker",  # shown as such: tail is for looking
            transport=TRANSPORT,
            ca=ca,
            cert=cert,
            key=key,
        ) as sub,
    ):
        try:
            _follow(sub, emit, limit, retry_for or None)
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:  # `drc tail | head`: the reader is gone, stop quietly
            _silence_stdout()


def _follow(sub: Any, emit: Callable[[Transaction], None], limit: int | None, timeout: Any) -> None:
    """Print batches; a batch is acked (checkpointed) only once all of it was printed."""
    printed, shown = 0, None
    while limit is None or printed < limit:
        batch = sub.get(timeout=timeout)
        for txn in batch.transactions:
            if limit is not None and printed >= limit:
                return  # part of this batch unprinted: leave it unacked
            if txn.changes or txn.ddl or txn.rows_omitted:
                emit(txn)
                shown = txn.scn
            if txn.last_fragment and shown == txn.scn:  # a filtered last fragment may be empty
                printed += 1
        sub.ack(batch)


@click.command()
@replicator_api_option
@token_option
@tls_options
@api_document_format
def status(
    urls: tuple[str, ...],
    token: str | None,
    ca: str | None,
    cert: str | None,
    key: str | None,
    fmt: str,
) -> None:
    """Show each API's role, datacenter, source, buffer SCN range, capture lag, and the apply
    channels of that process (state, lag, applied SCN, counters).

    Give the replicator's and the apply process's URLs (--api, repeated) to see a whole
    datacenter. Every URL is reported; one that does not answer is marked UNREACHABLE and the
    exit status is then 1.
    """
    from drc.client import fetch_status
    from drc.client.discovery import expand, is_group

    failed = 0
    expanded = expand(urls)
    for url in expanded:
        try:
            if is_group(url):
                raise ValueError(f"{url}: its ZooKeeper names no replicator (or does not answer)")
            doc = fetch_status(url, token, transport=TRANSPORT, ca=ca, cert=cert, key=key)
        except (DrcError, ValueError) as exc:
            failed += 1
            if fmt == "json":
                click.echo(json.dumps({"url": url, "unreachable": str(exc)}, indent=2))
            else:
                click.echo(f"{url}\n  UNREACHABLE: {exc}")
            continue
        if fmt == "json":
            click.echo(json.dumps(doc, indent=2, sort_keys=True))
            continue
        click.echo(url)
        for line in _status_lines(doc, "  "):
            click.echo(line)
    if failed:
        raise click.ClickException(f"{failed} of {len(expanded)} API URL(s) did not answer")


def _status_lines(doc: dict[str, Any], indent: str) -> Iterator[str]:
    width = max((len(str(k)) for k in doc), default=0)
    for key, value in doc.items():
        if key == "channels" and isinstance(value, list) and value:
            yield f"{indent}channels:"
            for channel in value:
                yield from _channel_lines(channel, indent + "  ")
        elif isinstance(value, dict) and value:
            yield f"{indent}{key}:"
            yield from _status_lines(value, indent + "  ")
        else:
            shown = "-" if value is None else value
            if isinstance(value, list | dict):
                shown = json.dumps(value)
            yield f"{indent}{str(key) + ':':<{width + 1}} {shown}"


def _channel_lines(channel: dict[str, Any], indent: str) -> Iterator[str]:
    """One line per channel (state, lag, position, counters), and its error if it has one."""
    lag = channel.get("lag_seconds")
    shown = "?" if lag is None else f"{lag:.1f}s"
    yield (
        f"{indent}{channel.get('name')} (from {channel.get('origin')}): "
        f"{channel.get('state')}, lag {shown}, applied {channel.get('last_scn') or '-'}, "
        f"{channel.get('transactions')} txns, {channel.get('rows')} rows, "
        f"{channel.get('conflicts')} conflicts"
    )
    error = channel.get("error")
    if error:
        yield f"{indent}  error: {error}"
    catchup = channel.get("catchup")
    if catchup:
        backlog = catchup.get("backlog_mb")
        yield (
            f"{indent}  bulk catch-up: {catchup.get('state')}, "
            f"backlog {'?' if backlog is None else backlog} MB, {catchup.get('runs')} runs"
        )
    verify = channel.get("verify")
    if verify:
        yield f"{indent}  {_verify_line(verify)}"


def _verify_line(verify: dict[str, Any]) -> str:
    """The periodic verify (drc.verify.schedule): the last run's outcome and what is next."""
    last, state = verify.get("last"), str(verify.get("state"))
    shown = "verify: no run finished yet"
    if last is not None:
        ended = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(verify["last_finished"]))
        outcome = (f"{last['differences']} differences" if last["differences"]
                   else "the sides are equal")  # fmt: skip
        shown = (f"verify: last run {ended} ({verify['last_seconds']:.1f}s), "
                 f"{last['rows']} rows, {outcome}")  # fmt: skip
        if last.get("stalled"):
            shown += f" (not all confirmed: {last['stalled']})"
    if verify.get("last_error"):
        shown += f"; last run FAILED: {verify['last_error']}"
    if state == "waiting" and verify.get("waiting_for"):
        state += f" ({verify['waiting_for']})"
    due = verify.get("next_run")
    if state != "running" and due is not None:
        state += ", next " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(due))
    return f"{shown} [{state}]"


def _silence_stdout() -> None:
    # Python's recipe: point stdout at /dev/null so the flush at exit does not fail again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file (tests): nothing will flush it at exit


# ---------------------------------------------------------------- output


def _json_line(txn: Transaction) -> None:
    click.echo(json.dumps(transaction_to_json(txn), ensure_ascii=False, separators=(",", ":")))


def _table_lines(txn: Transaction) -> None:
    flag = " [drc]" if txn.drc_originated else ""
    if txn.rows_omitted:
        click.echo(f"{txn.scn}  rows not stored (drc_applied = marker){flag}")
    for change in txn.changes:
        name = f"{change.schema}.{change.table}"
        click.echo(f"{txn.scn}  {change.op.value:<6} {name}  {_row_text(change)}{flag}")
    for ddl in txn.ddl:
        click.echo(f"{txn.scn}  ddl    {ddl.schema}  {ddl.statement}{flag}")


def _row_text(change: RowChange) -> str:
    """insert: the new row; delete: the old row; update: the first column (the API carries no
    schema, so it stands in for the key) and each changed column as old -> new."""
    if change.op is not Op.UPDATE:
        return " ".join(f"{k}={_value(v)}" for k, v in change.row.items())
    before, after = change.before or {}, change.after or {}
    first = next(iter(before), None)
    parts = [f"{first}={_value(before[first])}"] if first is not None else []
    parts += [
        f"{k}: {_value(before.get(k))} -> {_value(v)}"
        for k, v in after.items()
        if k not in before or before[k] != v
    ]
    return " ".join(parts)


def _value(value: Any) -> str:
    shown = value_to_json(value)
    if isinstance(shown, dict):  # a tagged value: show its payload, the tag is noise here
        (shown,) = shown.values()
    text = (
        shown
        if isinstance(shown, str) and not isinstance(value, str)
        else json.dumps(shown, ensure_ascii=False)
    )
    return text if len(text) <= _VALUE_WIDTH else text[: _VALUE_WIDTH - 3] + "..."
