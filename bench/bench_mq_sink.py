"""The RabbitMQ sink's throughput against a plain pika publisher, same broker, same run.

Setup: an EventBuffer of ``--txns`` prebuilt transactions (1-4 row changes each: inserts,
updates, a tenth of them moving the key, deletes; int/str/Decimal/datetime columns) served on
loopback by the real API server in a child process (a replicator is another process than the
sink; in this one it would take the GIL from the sink), and a sandbox RabbitMQ broker.

- sink: drc.sink.runner.SinkRunner, as ``drc sink`` runs it: pulls the stream through the
  subscriber (stream transport, in-memory checkpoint), builds one JSON message per row change,
  routes it by its key's partition to one of ``--queues`` queues, publishes with publisher
  confirms over ``--connections`` connections at once (drc.sink.parallel; each queue through
  one of them) and acks each batch after its confirms. The keys come from a constant function, as
  there is no metastore here (the sink asks the replicator once per table: no cost per row).
- baseline: a plain pika BlockingConnection with ``confirm_delivery()`` publishing the same
  message bodies and properties, prebuilt in memory, to the same exchange and queues: what
  RabbitMQ takes from one confirming publisher, with nothing to compute.

Both rates are row changes (messages) per second of wall time; the queues are purged between
runs. ``--runs`` alternates which goes first (a warm-up publish comes before them) and
reports every run and the worst ratio.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_mq_sink.py [--txns 4000] [--runs 3] [--queues 8]
        [--connections 4] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import shutil
import tempfile
import time
from decimal import Decimal
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path

import pika

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer
from drc.client import MemoryCheckpointStore, Subscriber
from drc.core.codec import encode_transaction
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.sandbox import rabbitmq
from drc.sink.keys import KeyCache
from drc.sink.messages import Message, transaction_messages
from drc.sink.parallel import ParallelSink
from drc.sink.rabbitmq import RabbitMQSink, queue_names
from drc.sink.runner import SinkRunner

EXCHANGE = "bench.sink"


def key_of(*_: object) -> tuple[str, ...]:
    return ("id",)


def row(key: int, rng: random.Random) -> dict[str, object]:
    return {
        "id": key,
        "customer": f"customer-{rng.randrange(10**8):08d}",
        "amount": Decimal(rng.randrange(10**9)) / 100,
        "status": rng.choice(["new", "paid", "shipped", "returned"]),
        "created": dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randrange(10**7)),
    }


def make_txns(count: int) -> list[Transaction]:
    rng = random.Random(1)
    live: list[int] = []
    next_key, out = 1, []
    for n in range(count):
        changes = []
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            if roll < 0.5 or len(live) < 10:
                changes.append(RowChange("shop", "orders", Op.INSERT, None, row(next_key, rng)))
                live.append(next_key)
                next_key += 1
                continue
            key = live.pop(rng.randrange(len(live)))
            before = row(key, rng)
            if roll < 0.85:
                moved = next_key if roll > 0.8 else key
                next_key += moved != key
                changes.append(RowChange("shop", "orders", Op.UPDATE, before, row(moved, rng)))
                live.append(moved)
            else:
                changes.append(RowChange("shop", "orders", Op.DELETE, before, None))
        scn = SCN(1, 7, 1, 4 + n * 500)
        out.append(Transaction(scn, 7, f"0-7-{n}", 1_700_000_000 + n // 100, tuple(changes)))
    return out


def run_sink(url: str, broker: str, last: SCN, queues: int, connections: int) -> tuple[int, float]:
    def connect() -> ParallelSink:
        return ParallelSink(lambda: RabbitMQSink(broker, EXCHANGE, EXCHANGE, queues), connections)

    with Subscriber([url], checkpoint=MemoryCheckpointStore(), wait_ms=200) as sub:
        runner = SinkRunner(sub, connect, KeyCache(key_of), queues)
        started = time.perf_counter()
        while sub.position < last:
            runner.step(timeout=60)
        elapsed = time.perf_counter() - started
        runner.close()
    return runner.stats.messages, elapsed


def run_plain(broker: str, messages: list[Message]) -> tuple[int, float]:
    connection = pika.BlockingConnection(pika.URLParameters(broker))
    channel = connection.channel()
    channel.confirm_delivery()
    started = time.perf_counter()
    for m in messages:
        props = pika.BasicProperties(
            content_type="application/json", delivery_mode=2, message_id=m.message_id,
            timestamp=m.timestamp, type=m.op, headers={"partition": m.partition},
        )  # fmt: skip
        channel.basic_publish(EXCHANGE, str(m.queue), m.body, props, mandatory=True)
    elapsed = time.perf_counter() - started
    connection.close()
    return len(messages), elapsed


def serve(directory: str, ready: Connection) -> None:
    """The child process: serve the buffer in ``directory`` until killed."""
    buffer = EventBuffer.open(Path(directory))
    api = ApiServer(create_app(ApiDeps(buffer=buffer)), "127.0.0.1", 0, open_access=True).start()
    ready.send(api.url)
    while True:
        time.sleep(3600)


def purge(broker: str, queues: int) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(broker))
    channel = connection.channel()
    for name in queue_names(EXCHANGE, queues):
        channel.queue_purge(name)
    connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--txns", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument(
        "--connections", type=int, default=4, help="the sink's (drc sink's default)"
    )
    parser.add_argument("--quick", action="store_true", help="500 transactions, one run")
    args = parser.parse_args()
    if args.quick:
        args.txns, args.runs = 500, 1
    base = Path(tempfile.mkdtemp(prefix="drc-bench-sink-"))
    txns = make_txns(args.txns)
    messages = [m for t in txns for m in transaction_messages(t, key_of, args.queues)]
    buffer = EventBuffer.open(base / "buf")
    for t in txns:
        buffer.append(t.scn, encode_transaction(t), t.timestamp * 1000)
    buffer.commit()
    buffer.close()
    print(f"{len(txns)} transactions, {len(messages)} row-change messages, {args.queues} queues, "
          f"sink connections {args.connections}")  # fmt: skip
    t0 = time.monotonic()
    broker = rabbitmq.start(base / "rabbitmq")
    print(f"RabbitMQ started in {time.monotonic() - t0:.1f}s")
    context = get_context("spawn")
    parent, child = context.Pipe()
    server = context.Process(target=serve, args=(str(base / "buf"), child), daemon=True)
    server.start()
    url = parent.recv()
    ratios = []
    try:
        RabbitMQSink(broker.amqp_url, EXCHANGE, EXCHANGE, args.queues).close()  # declare
        run_plain(broker.amqp_url, messages[:500])  # warm-up: the queues' first files
        purge(broker.amqp_url, args.queues)
        for n in range(1, args.runs + 1):
            order = ("sink", "plain") if n % 2 else ("plain", "sink")
            for which in order:
                if which == "sink":
                    sent, sink_s = run_sink(
                        url, broker.amqp_url, txns[-1].scn, args.queues, args.connections
                    )
                else:
                    plain, plain_s = run_plain(broker.amqp_url, messages)
                purge(broker.amqp_url, args.queues)
            assert sent == plain == len(messages), (sent, plain, len(messages))
            ratio = (sent / sink_s) / (plain / plain_s)
            ratios.append(ratio)
            print(f"run {n}: sink {sent / sink_s:,.0f} msg/s ({sink_s:.1f}s), plain pika "
                  f"{plain / plain_s:,.0f} msg/s ({plain_s:.1f}s): {ratio:.2f}x")  # fmt: skip
        print(f"worst of {args.runs}: {min(ratios):.2f}x (target >= 0.8x)")
    finally:
        server.kill()
        server.join()
        rabbitmq.stop(broker)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
