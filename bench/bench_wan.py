"""Replication through a long, thin link: DRC against native MariaDB replication, one way.

A fresh two-datacenter sandbox. dc2 reads dc1 through the test fault layer
(tests/support/faults.py FaultyLink: every chunk delayed by half the RTT each way, a bandwidth
cap per connection and direction, like one TCP flow on a WAN): DRC's channel reads dc1's API
through it; native replication (dc2 a GTID replica of dc1) reads dc1's server through another.
Writers on dc1 (``--writers`` connections) make ``--rows`` row changes a second (transactions
of 10: 5 inserts in one statement, 5 updates of recent rows) for ``--seconds``; probe rows
(``created_at = NOW(6)``) measure arrival on dc2 as bench_latency.py does. Each system runs
after the other on the same servers and load; each DRC variant (``--compression none,lz4``)
is a fresh pair of nodes.

Reported per system: p50 / p99 / max lag of the probes, bytes through the link from dc1 per
row change (what each system puts on the wire), and with ``--cut-s N`` a cut of the link for
N s in the middle of the load: how long after the link came back until the lag stayed under
1 s, and the catch-up rate (row changes a second) over that time.

    python bench/bench_wan.py [--rtt-ms 200] [--mbps 6] [--rows 5000] [--seconds 60]
        [--compression none,lz4] [--cut-s 0] [--runs 1] [--systems drc,native]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency_systems import (  # noqa: E402
    PROBE_TABLE,
    Poller,
    Prober,
    connect,
    sql,
    wait_arrived,
)

from drc.sandbox.demo import start_nodes, wait_healthy, write_configs  # noqa: E402
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo  # noqa: E402
from tests.support.faults import FaultyLink  # noqa: E402

ROWS_PER_TXN = 10
TABLE = (
    "CREATE TABLE wan.t (id BIGINT PRIMARY KEY, k INT NOT NULL, v VARCHAR(120) NOT NULL, "
    "n INT NOT NULL, KEY (k))"
)
ARRIVAL_TIMEOUT_S = 600


@dataclass
class Result:
    system: str
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (sent at, ms)
    rows: int = 0  # row changes written on dc1
    seconds: float = 0.0  # how long writing them took
    wire_bytes: int = 0
    recovered_s: float | None = None  # after the cut: until the lag stayed under 1 s
    complete: bool = True


class Writer(threading.Thread):
    """Row changes on dc1 at a steady rate, in transactions of ROWS_PER_TXN."""

    def __init__(self, server: ServerInfo, rows_per_s: int, seconds: float, base: int) -> None:
        super().__init__(daemon=True)
        self.server, self.rate, self.seconds, self.base = server, rows_per_s, seconds, base
        self.rows = 0

    def run(self) -> None:
        conn = connect(self.server, autocommit=False)
        half = ROWS_PER_TXN // 2
        interval = ROWS_PER_TXN / self.rate
        start = time.monotonic()
        n = 0
        with conn.cursor() as cur:
            while time.monotonic() - start < self.seconds:
                ids = [self.base + n * half + i for i in range(half)]
                if not self._write(conn, cur, ids):
                    continue  # rolled back by a deadlock between writers: again, as apps do
                n += 1
                self.rows += ROWS_PER_TXN
                delay = start + n * interval - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        conn.close()

    @staticmethod
    def _write(conn: Any, cur: Any, ids: list[int]) -> bool:
        try:
            cur.executemany(
                "INSERT INTO wan.t (id, k, v, n) VALUES (%s, %s, %s, 0)",
                [(i, i % 1000, f"row {i} of the wan benchmark, {i * 7919 % 100003}")
                 for i in ids],
            )  # fmt: skip
            cur.execute("UPDATE wan.t SET n = n + 1 WHERE id IN %s", (ids,))
            conn.commit()
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in (1205, 1213):
                raise
            conn.rollback()
            return False
        return True


class DrcOneWay:
    def __init__(self, description: SandboxDescription, work: Path, compression: str) -> None:
        self.name = f"DRC compression={compression}"
        self.description, self.work, self.compression = description, work, compression
        self.procs: dict[str, object] = {}
        self.runs = 0

    def start(self, link_for: object) -> FaultyLink:
        self.runs += 1
        for server in self.description.servers:
            sql(server, "SET SESSION sql_log_bin = 0", "DROP DATABASE IF EXISTS drc")
        nodes = self.work / f"drc-{self.compression}-{self.runs}"
        configs = write_configs(
            self.description, nodes, schema="*", tables=["wan.*", "lat.*"],
            channel_extra=f'compression = "{self.compression}"\n',
        )  # fmt: skip
        dc1_port = int(_api_port(configs["dc1"]))
        link: FaultyLink = link_for(dc1_port)  # type: ignore[operator]
        text = configs["dc2"].read_text()
        configs["dc2"].write_text(text.replace(f"http://127.0.0.1:{dc1_port}", link.url))
        self.procs = start_nodes(configs, nodes)  # type: ignore[assignment]
        wait_healthy(configs)
        return link

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()  # type: ignore[attr-defined]
        for proc in self.procs.values():
            proc.wait(timeout=60)  # type: ignore[attr-defined]
        self.procs = {}


class NativeOneWay:
    name = "native"

    def __init__(self, dc1: ServerInfo, dc2: ServerInfo) -> None:
        self.dc1, self.dc2 = dc1, dc2

    def start(self, link_for: object) -> FaultyLink:
        link: FaultyLink = link_for(self.dc1.port)  # type: ignore[operator]
        pos = sql(self.dc1, "SELECT @@gtid_binlog_pos")[0][0]
        sql(
            self.dc2, "STOP SLAVE", "RESET SLAVE ALL", f"SET GLOBAL gtid_slave_pos = '{pos}'",
        )  # fmt: skip
        conn = connect(self.dc2)
        with conn.cursor() as cur:
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER=%s, "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
                (link.port, self.dc1.user, self.dc1.password),
            )
            cur.execute("START SLAVE")
        conn.close()
        return link

    def stop(self) -> None:
        sql(self.dc2, "STOP SLAVE", "RESET SLAVE ALL")


def _api_port(config: Path) -> str:
    import tomllib

    return str(tomllib.loads(config.read_text())["api"]["port"])


def run(system: DrcOneWay | NativeOneWay, number: int, args: argparse.Namespace,
        dc1: ServerInfo, dc2: ServerInfo) -> Result:  # fmt: skip
    rate_bps = args.mbps * 1e6

    def link_for(port: int) -> FaultyLink:
        link = FaultyLink("127.0.0.1", port)
        link.shape(delay_s=args.rtt_ms / 2000, rate_bps=rate_bps)
        return link

    link = system.start(link_for)
    result = Result(system.name)
    try:
        prober = Prober(dc1, number * 10_000_000, 1)
        warm = [Poller(dc2, prober, 0.01)]
        prober.fence()
        warm[0].start()
        assert wait_arrived(warm, 180), f"{system.name} did not replicate a probe"
        poller = Poller(dc2, prober, 0.003)
        sent_at: list[float] = []
        poller.start()
        before = link.delivered["down"]
        writers = [
            Writer(dc1, args.rows // args.writers, args.seconds,
                   number * 100_000_000 + w * 10_000_000)
            for w in range(args.writers)
        ]  # fmt: skip
        for writer in writers:
            writer.start()
        cut_at = args.seconds / 2 - args.cut_s / 2 if args.cut_s else None
        start = time.monotonic()
        restored_at: float | None = None
        while (now := time.monotonic()) - start < args.seconds:
            if cut_at is not None and restored_at is None and now - start >= cut_at:
                link.cut()
                time.sleep(args.cut_s)
                link.restore()
                restored_at = time.monotonic()
                continue
            sent_at.append(time.monotonic())
            conn = connect(dc1)
            with conn.cursor() as cur:
                prober.insert(cur)
            conn.close()
            time.sleep(1 / args.probes_per_second)
        for writer in writers:
            writer.join()
        result.seconds = time.monotonic() - start
        prober.fence()
        sent_at.append(time.monotonic())
        result.complete = wait_arrived([poller], ARRIVAL_TIMEOUT_S)
        result.rows = sum(writer.rows for writer in writers)
        result.wire_bytes = link.delivered["down"] - before
        result.latencies = list(zip(sent_at, poller.latencies, strict=False))
        if restored_at is not None:
            # When the last probe more than 1 s late arrived: from then on the lag stayed under.
            late = [at + ms / 1000 for at, ms in result.latencies if ms >= 1000]
            result.recovered_s = max(0.0, max(late, default=restored_at) - restored_at)
    finally:
        system.stop()
        link.close()
    return result


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(results: list[Result], args: argparse.Namespace) -> None:
    print(f"\n## WAN: {args.rtt_ms} ms RTT, {args.mbps} MB/s per connection, "
          f"{args.rows} row changes/s for {args.seconds} s" +
          (f", link cut for {args.cut_s} s mid-load" if args.cut_s else ""))  # fmt: skip
    print("\n| system | row changes/s written | p50 ms | p99 ms | max ms | "
          "bytes/row change on the wire | lag < 1 s again after the cut | complete |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        ms = [lat for _, lat in r.latencies]
        recovered = "-" if r.recovered_s is None else f"{r.recovered_s:.1f} s"
        rate = r.rows / max(r.seconds, 1e-9)
        print(f"| {r.system} | {rate:.0f} | {percentile(ms, 0.5):.0f} | "
              f"{percentile(ms, 0.99):.0f} | "
              f"{max(ms, default=float('nan')):.0f} | {r.wire_bytes / max(1, r.rows):.0f} | "
              f"{recovered} | {r.complete} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rtt-ms", type=float, default=200)
    parser.add_argument("--mbps", type=float, default=6, help="MB/s per connection and way")
    parser.add_argument("--rows", type=int, default=5000, help="row changes a second on dc1")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--writers", type=int, default=4, help="connections writing the load")
    parser.add_argument("--compression", default="none,lz4", help="DRC variants to run")
    parser.add_argument("--cut-s", type=float, default=0, help="cut the link mid-load")
    parser.add_argument("--runs", type=int, default=1, help="each system this many times")
    parser.add_argument("--systems", default="drc,native")
    parser.add_argument("--probes-per-second", type=float, default=20)
    parser.add_argument("--quick", action="store_true", help="15 s of load")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 15
    workdir = Path(tempfile.mkdtemp(prefix="drc-wan-"))
    box = Sandbox(workdir / "sbx")
    try:
        description = box.up(2)
        dc1, dc2 = description.server("dc1"), description.server("dc2")
        for server in (dc1, dc2):
            sql(server, "SET SESSION sql_log_bin = 0", "CREATE DATABASE wan", TABLE,
                "CREATE DATABASE lat", PROBE_TABLE)  # fmt: skip
        wanted = args.systems.split(",")
        systems: list[DrcOneWay | NativeOneWay] = []
        if "drc" in wanted:
            systems += [DrcOneWay(description, workdir, c) for c in args.compression.split(",")]
        if "native" in wanted:
            systems.append(NativeOneWay(dc1, dc2))
        results = []
        number = 0
        for _ in range(args.runs):
            for system in systems:
                number += 1
                results.append(run(system, number, args, dc1, dc2))
                print(f"({system.name} run done)", file=sys.stderr, flush=True)
        report(results, args)
    finally:
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
