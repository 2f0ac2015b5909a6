"""Subscribers against the real replicator and API: the acceptance of the subscriber SDK.

The replicator captures the sandbox's dc1 in this process and serves its buffer with the real
API server on a free port. What subscribers receive is compared with the source binlog read
independently by python-mysql-replication (GTIDs, row images, order).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer
from drc.cli.main import cli
from drc.client import ApiAuthError, FileCheckpointStore, Subscriber, assemble, fetch_status
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import FragmentLimits
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import Capture, SourceTxn, capturing, read_all, source_transactions
from tests.support.servers import connect, master_position

pytestmark = pytest.mark.integration

TOKEN = "subscribe-test-token"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    capture: Capture
    url: str
    start: tuple[str, int]
    server: ServerInfo

    def caught_up(self, timeout: float = 120) -> SCN:
        """Wait until the buffer holds everything the source has now; its last SCN."""
        self.capture.wait_for(master_position(self.server), timeout)
        last = self.capture.buffer.last_scn
        assert last is not None
        return last


@contextmanager
def serving(server: ServerInfo, tmp: Path, schemas: list[str], ddl: list[str]) -> Iterator[Served]:
    """Fresh databases, then capture from here and serve the buffer with tokens."""
    conn = connect(server)
    with conn.cursor() as cur:
        for db in schemas:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db}")
        for statement in ddl:
            cur.execute(statement)
    conn.close()
    start = master_position(server)
    options = CaptureOptions(
        capture=TableFilter.build([f"{db}.*" for db in schemas]),
        start_from=f"{start[0]}:{start[1]}",
        fragments=FragmentLimits(rows=40, bytes=1 << 20),
        commit_max_ms=5,
    )
    with capturing(server, tmp / "buf", options) as capture:
        deps = ApiDeps(
            buffer=capture.buffer,
            metastore=capture.metastore,
            datacenter="dc1",
            source=f"{server.host}:{server.port}",
            tokens=(TOKEN,),
            capture_stats=lambda: capture.replicator.stats,
        )
        api = ApiServer(create_app(deps), "127.0.0.1", 0, open_access=False, stop_event=deps.stop)
        with api:
            yield Served(capture, api.url, start, server)


# ---------------------------------------------------------------- the source, read independently


def narrowed(source: list[SourceTxn], tables: str | None) -> list[SourceTxn]:
    """The source stream as a subscriber with this table filter should see it."""
    filter_ = TableFilter.parse_list(tables or "")
    out = []
    for gtid, changes in source:
        kept = [c for c in changes if filter_.matches(c[0], c[1])]
        if kept:
            out.append((gtid, kept))
    return out


def received(txns: list[Any]) -> list[SourceTxn]:
    whole = list(assemble(txns))
    scns = [t.scn for t in whole]
    assert scns == sorted(set(scns)), "strictly increasing SCNs: no reorder, no repeat"
    return [
        (t.gtid, [(c.schema, c.table, c.before, c.after) for c in t.changes])
        for t in whole
        if t.changes
    ]


# ---------------------------------------------------------------- four concurrent subscribers

CONCURRENT_DDL = [
    "CREATE TABLE subs_a.orders (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
    "CREATE TABLE subs_a.items (id INT PRIMARY KEY, v VARCHAR(40))",
    "CREATE TABLE subs_a.quiet (id INT PRIMARY KEY)",
    "CREATE TABLE subs_b.items (id INT PRIMARY KEY, v VARCHAR(40))",
    "CREATE TABLE subs_b.log (id INT PRIMARY KEY, note VARCHAR(40))",
]


def concurrent_workload(server: ServerInfo, txns: int, seed: int) -> None:
    rng = random.Random(seed)
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        for n in range(txns):
            kind = rng.random()
            if n == txns // 2:  # one large transaction: stored as fragments of 40 rows
                rows = [(100_000 + k, f"bulk{k}") for k in range(300)]
                cur.executemany("INSERT INTO subs_b.items VALUES (%s, %s)", rows)
                cur.execute("INSERT INTO subs_a.orders VALUES (%s, 'in bulk', 0)", (-n,))
            elif kind < 0.35:
                cur.execute("INSERT INTO subs_a.orders VALUES (%s, %s, 0)", (n, f"o{n}"))
            elif kind < 0.5:
                cur.execute(
                    "UPDATE subs_a.orders SET n = n + 1 WHERE id = %s", (rng.randrange(n + 1),)
                )
            elif kind < 0.65:
                table = rng.choice(["subs_a.items", "subs_b.items"])
                cur.execute(f"INSERT INTO {table} VALUES (%s, %s)", (n, f"i{n}"))
            elif kind < 0.75:
                cur.execute("DELETE FROM subs_a.orders WHERE id = %s", (rng.randrange(n + 1),))
            else:  # one transaction over several tables of both databases
                cur.execute("INSERT INTO subs_b.log VALUES (%s, 'multi')", (n,))
                cur.execute("INSERT INTO subs_a.items VALUES (%s, 'multi')", (n,))
                cur.execute("UPDATE subs_b.log SET note = 'changed' WHERE id = %s", (n,))
            conn.commit()
            time.sleep(0.002)
    conn.close()


class Consumer(threading.Thread):
    """A subscriber in a thread: get/ack until its position reaches ``target`` (once set)."""

    def __init__(self, urls: list[str], tables: str | None, binary: bool) -> None:
        super().__init__(daemon=True)
        self.urls, self.tables, self.binary = urls, tables, binary
        self.target: SCN | None = None
        self.txns: list[Any] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Subscriber(
                self.urls,
                tables=self.tables,
                token=TOKEN,
                max_events=5,
                wait_ms=200,
                binary=self.binary,
                backoff_initial=0.05,
            ) as sub:
                while self.target is None or sub.position < self.target:
                    batch = sub.get(timeout=60)
                    self.txns.extend(batch.transactions)
                    sub.ack(batch)
        except BaseException as exc:  # reported by the test
            self.error = exc


def dead_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_four_concurrent_subscribers_each_receive_exactly_their_filtered_stream(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    filters = [None, "subs_a.orders", "*.items", "subs_a.quiet"]
    with serving(dc1, tmp_path, ["subs_a", "subs_b"], CONCURRENT_DDL) as served:
        consumers = [
            Consumer([served.url], filters[0], binary=True),
            Consumer([served.url], filters[1], binary=False),
            Consumer([dead_url(), served.url], filters[2], binary=True),  # fails over at once
            Consumer([served.url], filters[3], binary=False),
        ]
        for consumer in consumers:
            consumer.start()
        concurrent_workload(dc1, 400, seed=11)
        target = served.caught_up()
        for consumer in consumers:
            consumer.target = target
        for consumer in consumers:
            consumer.join(timeout=120)
            assert not consumer.is_alive(), f"{consumer.tables} did not reach {target}"
            assert consumer.error is None, repr(consumer.error)
    source = source_transactions(dc1, served.start, ["subs_a", "subs_b"])
    assert len(source) >= 250  # updates and deletes that hit no row write nothing
    for tables, consumer in zip(filters, consumers, strict=True):
        expected = narrowed(source, tables)
        got = received(consumer.txns)
        assert [g for g, _ in got] == [g for g, _ in expected], f"{tables}: same GTIDs in order"
        assert got == expected, f"{tables}: same row images"
    assert narrowed(source, "subs_a.quiet") == [] and received(consumers[3].txns) == []
    assert any(not t.last_fragment for t in consumers[0].txns), "the bulk insert was fragmented"


# ---------------------------------------------------------------- kill -9 before the ack

SUBSCRIBER_SCRIPT = """
import json, os, sys, time
from drc.client import FileCheckpointStore, Subscriber

url, checkpoint, log, run = sys.argv[1:5]
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
with Subscriber([url], token=os.environ["DRC_TOKEN"], checkpoint=FileCheckpointStore(checkpoint),
                max_events=15, wait_ms=200) as sub:
    while True:
        batch = sub.get()
        for txn in batch.transactions:
            time.sleep(0.004)  # "processing": slower than the writer, so kills land mid-batch
            line = {"run": int(run), "scn": str(txn.scn), "fragment": txn.fragment}
            os.write(fd, (json.dumps(line) + "\\n").encode())
        sub.ack(batch)
"""


def start_subscriber(
    script: Path, url: str, ckpt: Path, log: Path, run: int
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DRC_TOKEN": TOKEN, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, str(script), url, str(ckpt), str(log), str(run)]
    with open(log.with_suffix(".err"), "ab") as err:  # Popen keeps its own copy of the fd
        return subprocess.Popen(argv, env=env, stderr=err)


def wait_processing(log: Path, run: int, proc: subprocess.Popen[bytes], count: int = 3) -> None:
    deadline = time.monotonic() + 60
    marker = f'"run": {run},'
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.with_suffix(".err").read_text()[-3000:]
        if log.exists() and log.read_text().count(marker) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"subscriber run {run} processed nothing in 60s")


def kill_workload(server: ServerInfo, txns: int, done: threading.Event) -> None:
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        for n in range(txns):
            cur.execute("INSERT INTO subk.t VALUES (%s, %s)", (n, f"v{n}"))
            if n % 3 == 0:
                cur.execute("UPDATE subk.t SET v = 'u' WHERE id = %s", (n // 2,))
            conn.commit()
            time.sleep(0.001)
    conn.close()
    done.set()


def test_a_subscriber_killed_before_acking_resumes_without_gap_or_reorder(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    script, ckpt, log = tmp_path / "sub.py", tmp_path / "sub.ckpt", tmp_path / "processed.log"
    script.write_text(SUBSCRIBER_SCRIPT)
    ddl = ["CREATE TABLE subk.t (id INT PRIMARY KEY, v VARCHAR(20))"]
    rng = random.Random(5)
    checkpoints: list[SCN] = []  # the checkpoint each restart resumed from
    with serving(dc1, tmp_path, ["subk"], ddl) as served:
        done = threading.Event()
        writer = threading.Thread(target=kill_workload, args=(dc1, 1500, done), daemon=True)
        writer.start()
        proc = start_subscriber(script, served.url, ckpt, log, 0)
        for run in range(1, 5):
            # Kill only once this run is processing (a slow start on a loaded machine must not
            # turn into a run that did nothing), at a random moment inside its batches.
            wait_processing(log, run - 1, proc)
            time.sleep(rng.uniform(0.05, 0.4))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            checkpoints.append(FileCheckpointStore(ckpt).load() or SCN.zero())
            proc = start_subscriber(script, served.url, ckpt, log, run)
        writer.join(timeout=120)
        target = served.caught_up()
        try:
            deadline = time.monotonic() + 120
            while (FileCheckpointStore(ckpt).load() or SCN.zero()) < target:
                assert proc.poll() is None, log.with_suffix(".err").read_text()[-3000:]
                assert time.monotonic() < deadline, "the last subscriber did not catch up"
                time.sleep(0.1)
        finally:
            proc.kill()
            proc.wait()
        stream = [(str(t.scn), t.fragment) for t in read_all(served.capture.buffer)]
    check_resumes(stream, log, checkpoints)


def check_resumes(stream: list[tuple[str, int]], log: Path, checkpoints: list[SCN]) -> None:
    """Each run processed a contiguous, ordered slice of the stream starting right after the
    checkpoint it resumed from; together they cover it all; unacked work was redelivered."""
    index = {key: i for i, key in enumerate(stream)}
    runs: dict[int, list[int]] = {}
    for line in log.read_text().splitlines():
        record = json.loads(line)
        runs.setdefault(record["run"], []).append(index[(record["scn"], record["fragment"])])
    covered, redelivered = -1, 0
    for run in range(len(checkpoints) + 1):
        indexes = runs.get(run, [])
        resume = SCN.zero() if run == 0 else checkpoints[run - 1]
        first = next((i for i, (scn, _) in enumerate(stream) if SCN.parse(scn) > resume), None)
        if not indexes:
            continue
        assert indexes == list(range(indexes[0], indexes[0] + len(indexes))), f"run {run}: gap"
        assert indexes[0] == first, f"run {run} did not resume right after its checkpoint"
        assert indexes[0] <= covered + 1, f"run {run} skipped past what run {run - 1} processed"
        redelivered += max(0, covered - indexes[0] + 1)
        covered = max(covered, indexes[-1])
    assert covered == len(stream) - 1, "the runs together processed the whole stream"
    assert redelivered > 0, "no kill landed between processing and ack: the test proved little"
    assert len(runs) >= 3, "most runs processed something"


# ---------------------------------------------------------------- auth against the real server


def test_the_real_server_refuses_missing_and_wrong_tokens_and_accepts_the_right_one(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    ddl = ["CREATE TABLE subauth.t (id INT PRIMARY KEY)", "INSERT INTO subauth.t VALUES (1)"]
    with serving(dc1, tmp_path, ["subauth"], ddl) as served:
        conn = connect(dc1)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO subauth.t VALUES (2)")
            cur.execute("INSERT INTO subauth.t VALUES (3)")
        conn.close()
        served.caught_up()
        for token in (None, "wrong-token"):
            with Subscriber([served.url], token=token) as sub, pytest.raises(ApiAuthError) as err:
                sub.get(timeout=10)
            assert err.value.status == 401 and "DRC_TOKEN" in str(err.value)
            assert TOKEN not in str(err.value) and (token is None or token not in str(err.value))
            with pytest.raises(ApiAuthError):
                fetch_status(served.url, token)
        with Subscriber([served.url], token=TOKEN, wait_ms=-1) as sub:
            batch = sub.get(timeout=10)
        assert [c.after for t in batch.transactions for c in t.changes] == [{"id": 2}, {"id": 3}]
        assert fetch_status(served.url, TOKEN)["role"] == "leader"
        assert httpx.get(served.url + "/healthz").status_code == 200  # open for probes

        runner = CliRunner()
        status = runner.invoke(cli, ["status", "--api", served.url], env={"DRC_TOKEN": TOKEN})
        assert status.exit_code == 0 and "role:" in status.output, status.output
        refused = runner.invoke(cli, ["status", "--api", served.url], env={"DRC_TOKEN": "no"})
        assert refused.exit_code == 1 and "--token" in refused.output
        args = ["tail", "--api", served.url, "--format", "json", "--limit", "2"]
        tail = runner.invoke(cli, args, env={"DRC_TOKEN": TOKEN})
        assert tail.exit_code == 0, tail.output
        ids = [json.loads(line)["changes"][0]["after"]["id"] for line in tail.output.splitlines()]
        assert ids == [2, 3]
