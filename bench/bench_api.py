"""Pull API throughput (JSON vs records, 1 and 4 subscribers) and long-poll wake-up latency.

Setup: an EventBuffer of ``--txns`` prebuilt transactions (default 50k; 1-4 row changes each,
int/str/Decimal/datetime columns, half on shop.orders, half on shop.items) served by uvicorn on
loopback by :class:`drc.api.server.ApiServer`, in this process, as the replicator serves it.
Subscribers are separate processes (httpx), so their work does not share the server's GIL.

Throughput: each subscriber pulls the buffer from SCN zero (max_events=1000; JSON only the
first 20k transactions, to keep the run short), and the rate is all subscribers' transactions
over the wall time until the last one finished. The
clients only read the bodies (and the ``next`` SCN), so this is what the server can serve;
the "client decode" rows add what a subscriber spends turning the bodies into transactions.
Baseline in the same run: the records form with no filter is the stored bytes passed through
(read_after + join), the ceiling for the server.

Latency: subscribers long-poll (wait_ms=5000, records form) while this process appends and
commits one transaction at a time (fsync="batch": one fdatasync per commit, as the replicator)
every 5-15 ms; latency is from just before the append to the moment the subscriber has decoded
the transaction (time.monotonic is system-wide, so comparable across processes).

    .venv/bin/python bench/bench_api.py [--txns 50000] [--events 300] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal
from multiprocessing import get_context
from pathlib import Path

import httpx

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.pullquery import ServerLimits
from drc.api.server import ApiServer
from drc.core.codec import encode_transaction
from drc.core.events import Op, RowChange, Transaction
from drc.core.jsonwire import transaction_from_json
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer

BATCH = 1000
JSON_TXNS = 20_000


def scn_of(n: int) -> SCN:
    return SCN(1, 7, 1 + n // 100_000, 4 + n * 500)


def make_txn(n: int, rng: random.Random) -> Transaction:
    changes = []
    for k in range(rng.randint(1, 4)):
        row = {
            "id": n * 10 + k,
            "customer": f"customer-{rng.randrange(10**8):08d}",
            "amount": Decimal(rng.randrange(10**9)) / 100,
            "status": rng.choice(["new", "paid", "shipped", "returned"]),
            "note": " ".join(rng.choice(["alpha", "bravo", "delta", "echo"]) for _ in range(6)),
            "created": dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randrange(10**7)),
        }
        table = "orders" if n % 2 else "items"
        changes.append(RowChange("shop", table, Op.INSERT, None, row))
    scn = scn_of(n)
    return Transaction(scn, 7, f"0-7-{n}", 1_700_000_000 + n // 100, tuple(changes))


def fill(buffer: EventBuffer, count: int) -> None:
    rng = random.Random(1)
    for start in range(0, count, 1000):
        for n in range(start, min(start + 1000, count)):
            t = make_txn(n, rng)
            buffer.append(t.scn, encode_transaction(t), t.timestamp * 1000)
        buffer.commit()


# -- subscriber processes ----------------------------------------------------------------------


def _warm() -> None:
    time.sleep(0.3)  # keeps the worker busy so every worker process gets spawned


def pull_all(url: str, binary: bool, decode: bool, tables: str, stop_at: str) -> tuple[int, int]:
    """Pull from zero to ``stop_at`` (an SCN); (transactions or records, body bytes)."""
    headers = {"Accept": wire.MEDIA_RECORDS} if binary else {}
    after, count, size = "0:0:0:0", 0, 0
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        while True:
            params = {"after": after, "max_events": BATCH, **({"tables": tables} if tables else {})}
            response = client.get(wire.PATH_EVENTS, params=params)
            body = response.content
            size += len(body)
            if binary:
                after, newest = (
                    response.headers[wire.HEADER_NEXT],
                    response.headers[wire.HEADER_NEWEST],
                )
                count += (
                    len(wire.split_records(body))
                    if decode
                    else int(response.headers[wire.HEADER_COUNT])
                )
            else:
                data = response.json()  # a JSON client has to parse to find next
                after, newest = data["next"], data["newest"]
                txns = data["transactions"]
                count += len([transaction_from_json(t) for t in txns] if decode else txns)
            if after in (newest, stop_at) or SCN.parse(after) > SCN.parse(stop_at):
                return count, size


def long_poll(url: str, events: int) -> list[float]:
    """Receive ``events`` transactions by long polls; latency of each from its stamp."""
    latencies: list[float] = []
    after = httpx.get(url + wire.PATH_STATUS).json()["buffer"]["last_scn"]
    with httpx.Client(base_url=url, headers={"Accept": wire.MEDIA_RECORDS}, timeout=30) as client:
        while len(latencies) < events:
            params = {"after": after, "wait_ms": 5000}
            response = client.get(wire.PATH_EVENTS, params=params)
            now = time.monotonic()
            for txn in wire.split_records(response.content):
                latencies.append(now - txn.changes[0].after["stamp"])
            after = response.headers[wire.HEADER_NEXT]
    return latencies


# -- runs --------------------------------------------------------------------------------------


def throughput(pool: ProcessPoolExecutor, url: str, total: int, case: tuple) -> list[str]:
    label, subscribers, binary, decode, tables = case
    txns = total if binary else min(total, JSON_TXNS)  # JSON is slow: a prefix keeps it < 60 s
    stop_at = str(scn_of(txns - 1))
    start = time.perf_counter()
    futures = [
        pool.submit(pull_all, url, binary, decode, tables, stop_at) for _ in range(subscribers)
    ]
    results = [f.result() for f in futures]
    took = time.perf_counter() - start
    total_bytes = sum(size for _, size in results)
    served = txns * subscribers
    return [
        label,
        f"{txns:,}",
        str(subscribers),
        "yes" if decode else "no",
        f"{served / took:,.0f}",
        f"{total_bytes / took / 1e6:,.1f}",
        f"{took:.2f}",
    ]


def latency(
    pool: ProcessPoolExecutor, buffer: EventBuffer, url: str, subs: int, n: int
) -> list[str]:
    futures = [pool.submit(long_poll, url, n) for _ in range(subs)]
    time.sleep(1.0)  # let every subscriber reach its long poll
    rng = random.Random(2)
    last = buffer.last_scn
    assert last is not None
    for i in range(n):
        scn = SCN(1, 7, last.log_index, last.log_pos + (i + 1) * 500)
        row = {"id": i, "stamp": time.monotonic()}
        txn = Transaction(scn, 7, None, 1, (RowChange("shop", "orders", Op.INSERT, None, row),))
        buffer.append(scn, encode_transaction(txn), 1000)
        buffer.commit()
        time.sleep(rng.uniform(0.005, 0.015))
    samples = sorted(s * 1000 for f in futures for s in f.result())
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return [
        str(subs),
        str(len(samples)),
        f"{statistics.median(samples):.2f}",
        f"{p99:.2f}",
        f"{samples[-1]:.2f}",
    ]


def table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(headers) - 1)) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


CASES = [
    ("records, no filter (stored bytes passed through)", 1, True, False, ""),
    ("JSON, no filter", 1, False, False, ""),
    ("records, no filter", 1, True, True, ""),
    ("JSON, no filter", 1, False, True, ""),
    ("records, tables=shop.orders (half the transactions)", 1, True, False, "shop.orders"),
    ("records, no filter", 4, True, False, ""),
    ("JSON, no filter", 4, False, False, ""),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--txns", type=int, default=50_000)
    parser.add_argument("--events", type=int, default=300, help="long-poll latency samples")
    parser.add_argument("--quick", action="store_true", help="10k transactions, 100 events")
    args = parser.parse_args()
    txns, events = (10_000, 100) if args.quick else (args.txns, args.events)
    print(f"`{' '.join([Path(sys.executable).name, *sys.argv])}`")
    with tempfile.TemporaryDirectory() as tmp, EventBuffer.open(Path(tmp) / "buf") as buffer:
        fill(buffer, txns)
        limits = ServerLimits(max_events=BATCH, max_bytes=16 << 20, max_wait_ms=30_000)
        deps = ApiDeps(buffer=buffer, limits=limits)
        with ApiServer(
            create_app(deps), "127.0.0.1", 0, open_access=True, stop_event=deps.stop
        ) as server:
            with ProcessPoolExecutor(4, mp_context=get_context("spawn")) as pool:
                for warming in [pool.submit(_warm) for _ in range(4)]:
                    warming.result()  # every worker spawned and imported before timing
                rows = [throughput(pool, server.url, txns, case) for case in CASES]
                table(
                    f"Pull throughput, {txns:,} transactions, batches of {BATCH}",
                    ["form", "txns read", "subscribers", "client decode", "txns/s", "MB/s", "s"],
                    rows,
                )
                lat = [latency(pool, buffer, server.url, subs, events) for subs in (1, 4)]
                table(
                    "Long-poll wake-up: commit to subscriber receipt (ms)",
                    ["subscribers", "samples", "p50", "p99", "max"],
                    lat,
                )


if __name__ == "__main__":
    main()
