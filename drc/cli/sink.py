"""``drc sink``: publish a replicator's change stream to a message broker (RabbitMQ), one message
per row change, routed by the key's partition (drc.sink). Imports the SDK and pika lazily."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import click

from drc.cli.options import (
    client_errors,
    parse_after,
    progress_option,
    range_option,
    replicator_api_option,
    tls_options,
    token_option,
)
from drc.core.scn import SCN

BROKER_SCHEMES = ("amqp://", "amqps://")


def _broker_url(text: str) -> str:
    if not text.startswith(BROKER_SCHEMES):
        raise ValueError(
            "the broker URL must be amqp://USER:PASSWORD@HOST:PORT/VHOST (or amqps://); "
            "RabbitMQ is the one broker supported"
        )
    return text


@click.command()
@replicator_api_option
@click.option(
    "--broker",
    "broker_url",
    required=True,
    envvar="DRC_SINK_BROKER",
    show_envvar=True,
    metavar="URL",
    help="RabbitMQ to publish to: amqp://USER:PASSWORD@HOST:PORT/VHOST (prefer the env var: "
    "arguments show in ps).",
)
@click.option(
    "--checkpoint",
    type=click.Path(dir_okay=False),
    required=True,
    help="File of the position the broker confirmed everything up to (resumes from it).",
)
@click.option("--after", default=None, metavar="SCN", help="Start after this SCN (c:s:i:p) "
              "when the checkpoint file does not exist yet.")  # fmt: skip
@click.option("--tables", default=None, help="Comma-separated db.table patterns, e.g. shop.*.")
@click.option("--skip-drc", is_flag=True, help="Leave out transactions DRC itself applied.")
@click.option("--exchange", default="drc.changes", show_default=True,
              help="Direct exchange the sink declares and publishes to.")  # fmt: skip
@click.option("--queue-prefix", default=None,
              help="Queues are PREFIX.0 .. PREFIX.N-1 (default: the exchange name).")  # fmt: skip
@range_option(
    "--queues", 8, 1, 1024,
    help="Queues the 65536 key partitions are split over (each key stays in one queue). "
    "Changing it moves keys to other queues: drain them first.",
)  # fmt: skip
@range_option(
    "--connections", 4, 1, 64,
    help="Broker connections publishing at once (each queue through one of them, in order).",
)  # fmt: skip
@range_option(
    "--max-events", 1000, 1,
    help="Transactions per pulled batch; the checkpoint moves once per batch, so a crash "
    "republishes at most one batch.",
)  # fmt: skip
@range_option(
    "--confirm-every", 200, 1,
    help="Messages published between waits for the broker's confirms (a reconnect republishes "
    "at most this many).",
)  # fmt: skip
@token_option
@tls_options
@progress_option
@range_option(
    "--retry-for", 0.0, 0,
    help="Seconds to keep retrying unreachable APIs before giving up (0: forever).",
)  # fmt: skip
def sink(
    urls: tuple[str, ...],
    broker_url: str,
    checkpoint: str,
    after: str | None,
    tables: str | None,
    skip_drc: bool,
    exchange: str,
    queue_prefix: str | None,
    queues: int,
    connections: int,
    max_events: int,
    confirm_every: int,
    token: str | None,
    ca: str | None,
    cert: str | None,
    key: str | None,
    progress_every: float,
    retry_for: float,
) -> None:
    """Publish every row change of a replicator's stream to RabbitMQ until Ctrl-C.

    One persistent JSON message per row change (before, after, SCN, table, op, fragment and
    row index), message_id SCN/FRAGMENT/ROW, on queue PREFIX.i of the key's partition range,
    so each key's changes arrive in order in one queue. The checkpoint moves only once the
    broker confirmed every message before it: after a crash the sink publishes again from
    there, and consumers drop redeliveries by message_id. A lost broker is reconnected to,
    with backoff. Message format and guarantees: docs/subscribers.md.
    """
    try:
        broker_url = _broker_url(broker_url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--broker") from None
    settings = _Settings(
        urls, broker_url, checkpoint, parse_after(after), tables, skip_drc, exchange,
        queue_prefix or exchange, queues, connections, max_events, confirm_every, token, ca,
        cert, key, progress_every, retry_for or None,
    )  # fmt: skip
    with client_errors():
        _run(settings)


@dataclass(frozen=True)
class _Settings:
    urls: tuple[str, ...]
    broker_url: str
    checkpoint: str
    start: SCN | None
    tables: str | None
    skip_drc: bool
    exchange: str
    prefix: str
    queues: int
    connections: int
    max_events: int
    confirm_every: int
    token: str | None
    ca: str | None
    cert: str | None
    key: str | None
    progress_every: float
    retry_for: float | None


def _run(s: _Settings) -> None:
    from drc.client import FileCheckpointStore, Subscriber
    from drc.client.schemas import SchemaReader
    from drc.sink.keys import KeyCache
    from drc.sink.parallel import ParallelSink
    from drc.sink.rabbitmq import RabbitMQSink, shown_url
    from drc.sink.runner import SinkRunner

    reader = SchemaReader(s.token, ca=s.ca, cert=s.cert, key=s.key)
    sub = Subscriber(
        s.urls, s.start, s.tables, checkpoint=FileCheckpointStore(s.checkpoint), token=s.token,
        skip_drc=s.skip_drc, max_events=s.max_events, drc_applied="marker", ca=s.ca,
        cert=s.cert, key=s.key,
    )  # fmt: skip
    runner = SinkRunner(
        sub,
        lambda: ParallelSink(
            lambda: RabbitMQSink(s.broker_url, s.exchange, s.prefix, s.queues), s.connections
        ),
        KeyCache(reader.primary_key),
        s.queues,
        confirm_every=s.confirm_every,
        on_retry=_say,
    )
    _say(f"publishing after {sub.position} to {shown_url(s.broker_url)} exchange "
         f"{s.exchange!r}, queues {s.prefix}.0..{s.prefix}.{s.queues - 1}")  # fmt: skip
    progress = _Progress(runner, s.progress_every)
    try:
        runner.run(progress.tick, s.retry_for)
    except KeyboardInterrupt:
        pass
    finally:
        runner.close()
        sub.close()
        reader.close()
        progress.line("stopped")


class _Progress:
    """A progress line every ``every`` seconds, checked between batches (``tick`` is the
    runner's stop callback: it never asks to stop)."""

    def __init__(self, runner: Any, every: float) -> None:
        self.runner, self.every = runner, every
        self.started = self.last = time.monotonic()

    def tick(self) -> bool:
        now = time.monotonic()
        if self.every > 0 and now - self.last >= self.every:
            self.last = now
            self.line("progress")
        return False

    def line(self, what: str) -> None:
        stats = self.runner.stats
        elapsed = max(time.monotonic() - self.started, 1e-9)
        _say(f"{what}: confirmed up to {self.runner.subscriber.position}, "
             f"{stats.transactions} txns, {stats.messages} messages "
             f"({stats.messages / elapsed:.0f}/s), {stats.reconnects} reconnects")  # fmt: skip


def _say(text: str) -> None:
    click.echo(f"sink: {text}", err=True)
