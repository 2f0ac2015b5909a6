"""End-to-end latency under sustained two-way load: source commit -> target commit.

A fresh two-datacenter sandbox runs `drc run` for dc1 and dc2 (replicator + API + channel from
the other side). sysbench oltp_write_only runs on both sides at once at a fixed rate (its own
schema per side, replicated to the other), while each side inserts probe rows
(`created_at = NOW(6)`) a few times a second. On each side a BEFORE INSERT trigger, created with
skip_replication so it stays local, stamps `applied_at = NOW(6)` when DRC applies the other
side's probe, so latency = applied_at - created_at on one clock (both servers share the host).

    python bench/bench_latency.py [--rate 1000] [--seconds 30]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pymysql  # noqa: E402

from drc.sandbox.demo import start_nodes, wait_healthy, write_configs  # noqa: E402
from drc.sandbox.procs import wait_for  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

SCHEMA = "lat"
PROBE_TABLE = (
    "CREATE TABLE lat.probe (id BIGINT PRIMARY KEY, origin VARCHAR(8), "
    "created_at DATETIME(6) NOT NULL, applied_at DATETIME(6) NULL)"
)


def connect(server: ServerInfo, **kw: object) -> pymysql.connections.Connection:
    options: dict[str, object] = {"autocommit": True, **kw}
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, **options
    )


def sysbench(
    server: ServerInfo, db: str, command: str, rate: int = 0, seconds: int = 0
) -> list[str]:
    return [
        "sysbench", "oltp_write_only", "--db-driver=mysql", f"--mysql-host={server.host}",
        f"--mysql-port={server.port}", f"--mysql-user={server.user}",
        f"--mysql-password={server.password}", f"--mysql-db={db}", "--tables=4",
        "--table-size=10000", "--threads=4", f"--rate={rate}", f"--time={seconds}",
        "--report-interval=0", command,
    ]  # fmt: skip


def probe(server: ServerInfo, parity: int, seconds: float, per_second: float) -> int:
    conn = connect(server)
    sent = 0
    deadline = time.monotonic() + seconds
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute(
                "INSERT INTO lat.probe (id, origin, created_at) VALUES (%s, %s, NOW(6))",
                (sent * 2 + parity, server.datacenter),
            )
            sent += 1
            time.sleep(1 / per_second)
    conn.close()
    return sent


def latencies(target: ServerInfo, origin: str) -> list[float]:
    conn = connect(target)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TIMESTAMPDIFF(MICROSECOND, created_at, applied_at) FROM lat.probe "
            "WHERE origin = %s AND applied_at IS NOT NULL",
            (origin,),
        )
        values = [row[0] / 1000 for row in cur.fetchall()]
    conn.close()
    return values


def count(server: ServerInfo, origin: str) -> int:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM lat.probe WHERE origin = %s", (origin,))
        value = cur.fetchone()[0]
    conn.close()
    return int(value)


def setup_schema(dc1: ServerInfo, dc2: ServerInfo) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE lat")
        cur.execute(PROBE_TABLE)
        for db in ("sb_dc1", "sb_dc2"):
            cur.execute(f"CREATE DATABASE {db}")
    conn.close()
    tables = ("probe",)
    assert wait_for(lambda: _has_tables(dc2, tables), 30), "schema did not replicate"
    for server in (dc1, dc2):  # local triggers: skip_replication keeps them out of DRC
        conn = connect(server)
        with conn.cursor() as cur:
            cur.execute("SET SESSION skip_replication = 1")
            cur.execute(
                "CREATE TRIGGER lat.stamp BEFORE INSERT ON lat.probe FOR EACH ROW "
                "SET NEW.applied_at = NOW(6)"
            )
        conn.close()


def _has_tables(server: ServerInfo, tables: tuple[str, ...]) -> bool:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'lat'")
        names = {row[0] for row in cur.fetchall()}
    conn.close()
    return set(tables) <= names


def _rows(server: ServerInfo, db: str) -> int:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COALESCE(SUM(table_rows), -1), COUNT(*) FROM information_schema.tables "
            "WHERE table_schema = %s",
            (db,),
        )
        _estimate, tables = cur.fetchone()
        total = 0
        for n in range(1, int(tables) + 1):
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.`sbtest{n}`")
            total += int(cur.fetchone()[0])
    conn.close()
    return total if tables else -1


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=1000, help="sysbench tps per side")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--probes-per-second", type=float, default=20)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 8
    workdir = Path(tempfile.mkdtemp(prefix="drc-lat-"))
    box = Sandbox(workdir / "sbx")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        description = box.up(2)
        dc1, dc2 = description.server("dc1"), description.server("dc2")
        configs = write_configs(description, workdir / "nodes", schema="*")
        procs = start_nodes(configs, workdir / "nodes")
        wait_healthy(configs)
        setup_schema(dc1, dc2)
        for server, db in ((dc1, "sb_dc1"), (dc2, "sb_dc2")):
            subprocess.run(sysbench(server, db, "prepare"), check=True, capture_output=True)

        # Measure steady state: the prepared rows must have crossed before the load starts.
        def caught_up() -> bool:
            return all(_rows(dc1, db) == _rows(dc2, db) for db in ("sb_dc1", "sb_dc2"))

        assert wait_for(caught_up, 300, interval=0.5), "sysbench prepare did not replicate"
        load = [
            subprocess.Popen(
                sysbench(s, db, "run", args.rate, args.seconds), stdout=subprocess.PIPE, text=True
            )
            for s, db in ((dc1, "sb_dc1"), (dc2, "sb_dc2"))
        ]
        sent: dict[str, int] = {}

        def run_probe(server: ServerInfo, parity: int) -> None:
            sent[server.datacenter] = probe(server, parity, args.seconds, args.probes_per_second)

        probers = [threading.Thread(target=run_probe, args=(s, p)) for s, p in ((dc1, 1), (dc2, 2))]
        for thread in probers:
            thread.start()
        outputs = [proc.communicate()[0] for proc in load]
        for thread in probers:
            thread.join()
        wait_for(lambda: count(dc2, "dc1") == sent["dc1"] and count(dc1, "dc2") == sent["dc2"], 120)
        tps = [_tps(out) for out in outputs]
        command = f"python bench/bench_latency.py --rate {args.rate} --seconds {args.seconds}"
        print(f"# End-to-end latency (`{command}`, {time.strftime('%Y-%m-%d')})\n")
        print(
            f"sysbench oltp_write_only achieved {tps[0]:.0f} tps on dc1 and {tps[1]:.0f} tps on "
            f"dc2 at once (target {args.rate} each).\n"
        )
        print("| direction | probes | p50 ms | p99 ms | max ms | mean ms |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for origin, target in (("dc1", dc2), ("dc2", dc1)):
            values = latencies(target, origin)
            p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
            print(
                f"| {origin} -> {target.datacenter} | {len(values)}/{sent[origin]} | {p50:.1f} "
                f"| {p99:.1f} | {max(values):.1f} | {statistics.mean(values):.1f} |"
            )
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(timeout=60)
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


def _tps(output: str) -> float:
    for line in output.splitlines():
        if "transactions:" in line:
            return float(line.split("(")[1].split()[0])
    return float("nan")


if __name__ == "__main__":
    main()
