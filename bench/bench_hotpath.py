"""CPU per transaction of the streaming path's parts, each alone (issue #16's measurements).

- capture, batch: a sysbench oltp_write_only binlog of ``--txns`` transactions written first on
  a one-server sandbox, then read by BinlogStream alone (the reader thread's work) and captured
  whole into a fresh EventBuffer; CPU seconds of this process per transaction.
- capture, live: the replicator running while sysbench writes at ``--rate`` tps for 10 s, as
  in bench_latency (a commit every transaction or few); CPU of this process per transaction.
- pull / stream: an API serving a buffer that this process appends to (one transaction every
  3 ms), a subscriber in a child process keeping up (records form, table filter, skip_drc,
  wait_ms=200, as an apply channel reads), once pulling (a GET /v1/events per batch) and once
  on the stream (GET /v1/stream); CPU per transaction and per batch of the server (this
  process, minus the appends) and of the subscriber.

    python bench/bench_hotpath.py [--txns 20000] [--rate 300] [--pulls-of 2000] [--api-only]

The figures are absolute CPU times: compare them within one run, or across commits run on a
quiet host (they grow under CPU contention).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pymysql  # noqa: E402
from bench_api import fill, make_txn  # noqa: E402

from drc.core.codec import encode_transaction  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sysbench(server: ServerInfo, *args: str) -> None:
    argv = [
        "sysbench", "oltp_write_only", "--db-driver=mysql", f"--mysql-host={server.host}",
        f"--mysql-port={server.port}", f"--mysql-user={server.user}",
        f"--mysql-password={server.password}", "--mysql-db=sbtest", "--tables=4",
        "--table-size=10000", *args,
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True)


def _position(server: ServerInfo) -> tuple[str, int]:
    conn = pymysql.connect(host=server.host, port=server.port, user=server.user,
                           password=server.password)  # fmt: skip
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        name, pos = cur.fetchone()[:2]
    conn.close()
    return name, int(pos)


def capture_until(rep: Any, buffer: Any, end: tuple[str, int]) -> float:
    """Run ``rep`` until ``buffer`` holds the binlog up to ``end``; CPU seconds it took."""
    from drc.replicator.source import split_binlog_name

    target = (split_binlog_name(end[0])[1], end[1])
    stop = threading.Event()
    thread = threading.Thread(target=rep.run, args=(stop,))
    began = _cpu()
    thread.start()
    while (last := buffer.last_scn) is None or (last.log_index, last.log_pos) < target:
        time.sleep(0.002)
    spent = _cpu() - began
    stop.set()
    thread.join()
    return spent


def capture(work: Path, txns: int, rate: int) -> list[str]:
    from drc.eventbuffer import EventBuffer
    from drc.metastore.store import MetaStore
    from drc.replicator.replicator import CaptureOptions, Replicator
    from drc.replicator.source import BinlogStream, SourceSettings

    box = Sandbox(work / "sbx")
    server = box.up(1).server("dc1")
    try:
        conn = pymysql.connect(host=server.host, port=server.port, user=server.user,
                               password=server.password, autocommit=True)  # fmt: skip
        conn.cursor().execute("CREATE DATABASE sbtest")
        conn.close()
        _sysbench(server, "--threads=2", "prepare")
        start = _position(server)
        _sysbench(server, "--threads=2", f"--events={txns}", "--time=0", "run")
        end = _position(server)
        settings = SourceSettings(server.host, server.port, server.user, server.password, 99005)

        began = _cpu()
        stream = BinlogStream(settings, start[0], start[1], blocking=False)
        events = sum(1 for _ in stream.events(threading.Event()))
        stream.close()
        reader_us = (_cpu() - began) / txns * 1e6

        def replicator(name: str, start_from: str) -> tuple[Replicator, EventBuffer]:
            buffer = EventBuffer.open(work / name / "buffer")
            store = MetaStore.open(work / name / "metastore.sqlite3")
            return Replicator(
                settings, buffer, store, CaptureOptions(start_from=start_from)
            ), buffer

        rep, buffer = replicator("batch", f"{start[0]}:{start[1]}")
        batch_us = capture_until(rep, buffer, end) / rep.stats.transactions * 1e6
        buffer.close()

        rep, buffer = replicator("live", "current")
        rep.prepare()
        stop = threading.Event()
        thread = threading.Thread(target=rep.run, args=(stop,))
        thread.start()
        time.sleep(1)
        before, count, commits = _cpu(), rep.stats.transactions, rep.stats.commits
        _sysbench(server, "--threads=4", f"--rate={rate}", "--time=10", "run")
        time.sleep(0.5)
        live_us = (_cpu() - before) / (rep.stats.transactions - count) * 1e6
        live = rep.stats.transactions - count, rep.stats.commits - commits
        stop.set()
        thread.join()
        buffer.close()
    finally:
        box.down()
    return [
        f"| BinlogStream alone, {txns:,} sysbench transactions ({events:,} events) | "
        f"{reader_us:,.0f} |",
        f"| capture into the buffer, same binlog | {batch_us:,.0f} |",
        f"| capture at {rate} tps live ({live[0]:,} transactions, {live[1]:,} commits) | "
        f"{live_us:,.0f} |",
    ]


def pulls(transactions: int, transport: str) -> list[str]:
    from drc.api.app import create_app
    from drc.api.deps import ApiDeps
    from drc.api.pullquery import ServerLimits
    from drc.api.server import ApiServer
    from drc.eventbuffer import EventBuffer

    with (
        tempfile.TemporaryDirectory() as tmp,
        EventBuffer.open(Path(tmp) / "buf", fsync="never") as buffer,
    ):
        fill(buffer, 1)
        limits = ServerLimits(max_events=1000, max_bytes=16 << 20, max_wait_ms=30_000)
        deps = ApiDeps(buffer=buffer, limits=limits)
        appended = [0.0]

        def append() -> None:
            time.sleep(1.0)  # the subscriber is reading by then
            rng, began = random.Random(3), time.thread_time()
            for n in range(1, transactions + 1):
                txn = make_txn(n, rng)
                buffer.append(txn.scn, encode_transaction(txn), 1000)
                buffer.commit()
                time.sleep(0.003)
            appended[0] = time.thread_time() - began

        app = create_app(deps)
        with ApiServer(app, "127.0.0.1", 0, open_access=True, stop_event=deps.stop) as server:
            threading.Thread(target=append, daemon=True).start()
            began = _cpu()
            argv = [sys.executable, __file__, "--child", server.url, str(transactions), transport]
            out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
            served = _cpu() - began - appended[0]
    child = json.loads(out.strip().splitlines()[-1])
    count, per_txn = child["pulls"], 1e6 / transactions
    what = "pull" if transport == "pull" else "stream"
    return [
        f"| {what}: API server ({transactions:,} transactions in {count:,} batches) | "
        f"{served * per_txn:,.0f} | {served / count * 1e6:,.0f} |",
        f"| {what}: subscriber (HTTP, decoding, hand-off) | {child['cpu'] * per_txn:,.0f} | "
        f"{child['cpu'] / count * 1e6:,.0f} |",
    ]


def child(url: str, transactions: int, transport: str) -> None:
    from drc.client import Subscriber

    subscriber = Subscriber(
        url, tables="shop.*", skip_drc=True, wait_ms=200, stream=transport == "stream"
    )
    got = count = 0
    began = time.process_time()
    while got < transactions:
        batch = subscriber.get()
        got, count = got + len(batch.transactions), count + 1
        subscriber.ack(batch)
    print(json.dumps({"cpu": time.process_time() - began, "pulls": count}))
    subscriber.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--txns", type=int, default=20_000, help="sysbench binlog to capture")
    parser.add_argument("--rate", type=int, default=300, help="live capture, sysbench tps")
    parser.add_argument("--pulls-of", type=int, default=2000, help="transactions pulled")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--api-only", action="store_true", help="only the pull and the stream")
    parser.add_argument("--quick", action="store_true", help="2,000 transactions, 500 pulled")
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.child[2])
        return
    if args.quick:
        args.txns, args.pulls_of = 2000, 500
    work = Path(tempfile.mkdtemp(prefix="drc-hot-"))
    try:
        rows = [] if args.api_only else capture(work, args.txns, args.rate)
        api = pulls(args.pulls_of, "pull") + pulls(args.pulls_of, "stream")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"# Streaming path CPU (`python bench/bench_hotpath.py`, {time.strftime('%Y-%m-%d')})\n")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    if rows:
        print("| part | CPU us per transaction |")
        print("| --- | ---: |")
        print("\n".join(rows) + "\n")
    print("| reading a change stream, keeping up | CPU us per transaction | per batch |")
    print("| --- | ---: | ---: |")
    print("\n".join(api))


if __name__ == "__main__":
    main()
