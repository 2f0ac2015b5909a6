"""The RabbitMQ sink against real servers: MariaDB (dc1, captured and served in this process by a
replicator) and the sandbox RabbitMQ broker.

What arrived is checked against the source two ways: the set of message ids equals what the
captured stream holds (every row change, a key-changing update as two), and replaying each queue
in its order, with redeliveries dropped by message id, rebuilds exactly the source table: which
holds only if every key's changes arrived in order, in one queue.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pika
import pytest

from drc.client import FileCheckpointStore, Subscriber
from drc.client.schemas import SchemaReader
from drc.core.events import Op, RowChange, Transaction
from drc.core.partitions import key_partition, range_index
from drc.core.scn import SCN
from drc.sandbox.sandbox import ServerInfo
from drc.sink.base import SinkRejectedError
from drc.sink.keys import KeyCache
from drc.sink.messages import transaction_messages
from drc.sink.parallel import ParallelSink
from drc.sink.rabbitmq import RabbitMQSink
from drc.sink.runner import SinkRunner
from tests.support.apply import serving
from tests.support.capture import Capture, read_all
from tests.support.rabbitmq import Broker, Received, drain, queued
from tests.support.servers import connect, fresh_database, master_position, query

pytestmark = pytest.mark.integration

DB = "mqsink"
TABLE = "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL)"
QUEUES = 4
REPO = Path(__file__).resolve().parents[2]


def workload(server: ServerInfo, txns: int, seed: int, done: threading.Event) -> None:
    """Inserts, updates (a tenth of them moving the row to a new key), deletes, in transactions
    of 1-4 statements; ids stay unique because moved keys go above 100000."""
    rng = random.Random(seed)
    conn = connect(server, autocommit=False, database=DB)
    live: list[int] = []
    next_id, moved = 1, 100_000 + seed * 10_000
    try:
        with conn.cursor() as cur:
            for _ in range(txns):
                for _ in range(rng.randint(1, 4)):
                    roll = rng.random()
                    if roll < 0.45 or len(live) < 5:
                        cur.execute("INSERT INTO t VALUES (%s, %s, 0)", (next_id, f"v{next_id}"))
                        live.append(next_id)
                        next_id += 1
                    elif roll < 0.75:
                        key = rng.choice(live)
                        cur.execute(
                            "UPDATE t SET n = n + 1, v = %s WHERE id = %s", (f"u{roll}", key)
                        )
                    elif roll < 0.85:
                        key = live.pop(rng.randrange(len(live)))
                        moved += 1
                        cur.execute("UPDATE t SET id = %s, n = n + 1 WHERE id = %s", (moved, key))
                        live.append(moved)
                    else:
                        key = live.pop(rng.randrange(len(live)))
                        cur.execute("DELETE FROM t WHERE id = %s", (key,))
                conn.commit()
                time.sleep(0.002)
    finally:
        conn.close()
        done.set()


def expected_ids(capture: Capture) -> set[str]:
    """The ids of every message the stream calls for (the key is id, as the schema says)."""
    ids: set[str] = set()
    for txn in read_all(capture.buffer):
        for message in transaction_messages(txn, lambda *_: ("id",), QUEUES):
            ids.add(message.message_id)
    return ids


def check_delivery(received: list[Received], capture: Capture, server: ServerInfo) -> int:
    """Every change arrived, each queue in stream order, the table rebuilds; the duplicates."""
    first: dict[str, Received] = {}
    for message in received:
        if message.message_id in first:  # a redelivery: the same message, identified by its id
            assert message.body == first[message.message_id].body
            continue
        first[message.message_id] = message
    assert set(first) == expected_ids(capture), "not every change arrived exactly once by id"
    assert all(m.persistent and m.content_type == "application/json" for m in received)
    rows: dict[int, dict[str, Any]] = {}
    last_in_queue: dict[int, tuple[SCN, int, int]] = {}
    for message in first.values():  # dict order: queue by queue, each in its delivery order
        body = message.body
        position = (SCN.parse(body["scn"]), body["fragment"], body["row"])
        assert position >= last_in_queue.get(message.queue, position), "a queue is out of order"
        last_in_queue[message.queue] = position
        key = body["key"][0]
        if body["op"] == "delete":
            assert key in rows, f"delete of {key} before its insert"
            del rows[key]
        else:
            rows[key] = body["after"]
    source = {
        r[0]: {"id": r[0], "v": r[1], "n": r[2]}
        for r in query(server, f"SELECT id, v, n FROM {DB}.t")
    }
    assert rows == source
    return len(received) - len(first)


def caught_up(capture: Capture, server: ServerInfo) -> SCN:
    capture.wait_for(master_position(server), 120)
    last = capture.buffer.last_scn
    assert last is not None
    return last


def test_every_change_arrives_once_per_id_each_key_in_order_in_one_queue(
    dc1: ServerInfo, rabbitmq: Broker, tmp_path: Path
) -> None:
    fresh_database(dc1, DB, TABLE)
    prefix = f"t1-{uuid.uuid4().hex[:8]}"
    with serving(dc1, tmp_path, [f"{DB}.*"], master_position(dc1)) as (capture, url):
        done = threading.Event()
        writer = threading.Thread(target=workload, args=(dc1, 300, 1, done), daemon=True)
        writer.start()
        store = FileCheckpointStore(tmp_path / "sink.ckpt")
        reader = SchemaReader()
        with Subscriber([url], checkpoint=store, wait_ms=200) as sub:
            runner = SinkRunner(
                sub,
                lambda: ParallelSink(lambda: RabbitMQSink(rabbitmq.url, prefix, prefix, QUEUES), 3),
                KeyCache(reader.primary_key), QUEUES, confirm_every=50,
            )  # fmt: skip
            target: SCN | None = None
            deadline = time.monotonic() + 180
            while target is None or sub.position < target:
                assert time.monotonic() < deadline, f"sink at {sub.position}, stream at {target}"
                runner.step(timeout=30)
                if target is None and done.is_set():
                    target = caught_up(capture, dc1)
            runner.close()
        reader.close()
        received = drain(rabbitmq.url, prefix, QUEUES)
        assert len({m.queue for m in received}) == QUEUES, "keys spread over every queue"
        assert any(m.body["key_change"] == "old" for m in received), "the workload moved keys"
        assert check_delivery(received, capture, dc1) == 0, "no fault, no redelivery"


def start_sink(
    url: str, broker: Broker, prefix: str, ckpt: Path, log: Path
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DRC_SINK_BROKER": broker.url, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "drc.cli", "sink", "--api", url, "--checkpoint", str(ckpt),
            "--exchange", prefix, "--queues", str(QUEUES), "--confirm-every", "20",
            "--max-events", "40", "--progress-every", "1"]  # fmt: skip
    with open(log, "ab") as out:  # Popen keeps its own copy of the fd
        return subprocess.Popen(argv, env=env, stdout=out, stderr=out)


def wait_published(
    broker: Broker, prefix: str, more_than: int, proc: subprocess.Popen[bytes], log: Path
) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        count = queued(broker.url, prefix, QUEUES)
        if count > more_than:
            return count
        time.sleep(0.2)
    raise AssertionError(
        f"the sink published nothing more than {more_than} in 120s:\n{log.read_text()[-3000:]}"
    )


@pytest.mark.slow
def test_kill_9_of_the_sink_and_of_the_broker_loses_nothing_and_redeliveries_carry_their_ids(
    dc1: ServerInfo, rabbitmq: Broker, tmp_path: Path
) -> None:
    fresh_database(dc1, DB, TABLE)
    prefix = f"t2-{uuid.uuid4().hex[:8]}"
    ckpt, log = tmp_path / "sink.ckpt", tmp_path / "sink.log"
    with serving(dc1, tmp_path, [f"{DB}.*"], master_position(dc1)) as (capture, url):
        done = threading.Event()
        writer = threading.Thread(target=workload, args=(dc1, 1500, 2, done), daemon=True)
        writer.start()
        proc = start_sink(url, rabbitmq, prefix, ckpt, log)
        try:
            published = wait_published(rabbitmq, prefix, 50, proc, log)
            proc.send_signal(signal.SIGKILL)  # mid-stream: the writer is still writing
            proc.wait()
            proc = start_sink(url, rabbitmq, prefix, ckpt, log)
            published = wait_published(rabbitmq, prefix, published + 50, proc, log)
            rabbitmq.kill()
            time.sleep(1.0)  # the sink notices and retries meanwhile
            rabbitmq.restart()
            wait_published(rabbitmq, prefix, published, proc, log)
            writer.join(timeout=300)
            assert done.is_set(), "the workload did not finish"
            target = caught_up(capture, dc1)
            deadline = time.monotonic() + 180
            while (FileCheckpointStore(ckpt).load() or SCN.zero()) < target:
                assert proc.poll() is None, log.read_text()[-3000:]
                assert time.monotonic() < deadline, (
                    "the sink did not catch up:\n" + log.read_text()[-3000:]
                )
                time.sleep(0.2)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        text = log.read_text()
        assert "retrying in" in text, "the sink never saw the broker go"
        received = drain(rabbitmq.url, prefix, QUEUES)
        duplicates = check_delivery(received, capture, dc1)
        counts = Counter(m.message_id for m in received)
        assert duplicates == sum(c - 1 for c in counts.values())


def test_a_message_no_queue_takes_stops_the_sink_instead_of_vanishing(rabbitmq: Broker) -> None:
    prefix = f"t3-{uuid.uuid4().hex[:8]}"
    sink = RabbitMQSink(rabbitmq.url, prefix, prefix, 2)
    try:
        connection = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
        connection.channel().queue_delete(f"{prefix}.1")  # an operator's mistake
        connection.close()
        key = next(k for k in range(100) if range_index(key_partition("s", "t", (k,)), 2) == 1)
        change = RowChange("s", "t", Op.INSERT, None, {"id": key})
        txn = Transaction(SCN(1, 1, 1, 4), 1, None, 0, (change,))
        with pytest.raises(SinkRejectedError, match="no queue took a message"):
            sink.publish(list(transaction_messages(txn, lambda *_: ("id",), 2)))
    finally:
        sink.close()


def test_a_wrong_password_is_refused_without_showing_it(rabbitmq: Broker) -> None:
    url = rabbitmq.url.replace("guest:guest@", "guest:not-the-password@")
    with pytest.raises(SinkRejectedError) as refused:
        RabbitMQSink(url, "t4", "t4", 1)
    assert "not-the-password" not in str(refused.value)
    assert "user or password" in str(refused.value)
