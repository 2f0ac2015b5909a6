"""Replicator throughput against its baselines, on the same binlog, in the same run.

For each workload (bulk: 1000-row transactions; sysbench oltp_write_only) written on dc1 of a
fresh sandbox, the same binlog range is
  - captured by DRC's replicator into a fresh EventBuffer (in a child process, for its peak RSS),
  - decoded by raw python-mysql-replication (row values materialised, nothing stored),
  - applied by native MariaDB replication (dc2 as a replica of dc1, one SQL thread),
and the buffer is then read back (records/s, MB/s). Usage:

    python bench/bench_replicator.py [--bulk-rows 200000] [--sysbench-seconds 15]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

CHILD = Path(__file__).with_name("_capture_child.py")


def connect(server: ServerInfo, **kw: object) -> pymysql.connections.Connection:
    options: dict[str, object] = {"autocommit": True, **kw}
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, **options
    )


def position(server: ServerInfo) -> tuple[str, int]:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    conn.close()
    return file, int(pos)


def bulk_workload(server: ServerInfo, rows: int) -> None:
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        for start in range(0, rows, 1000):
            values = [
                (i, i % 1000, f"row {i} " + "x" * 40, "2024-01-02 03:04:05.123456", i / 100)
                for i in range(start, min(start + 1000, rows))
            ]
            cur.executemany("INSERT INTO bench.bulk VALUES (%s, %s, %s, %s, %s)", values)
            conn.commit()
    conn.close()


def one_big_transaction(server: ServerInfo, rows: int) -> None:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("USE bench")
        cur.execute(
            "INSERT INTO bench.big SELECT seq, seq % 1000, CONCAT('row ', seq, REPEAT('x', 40)),"
            f" '2024-01-02 03:04:05.123456', seq / 100 FROM seq_1_to_{rows}"
        )
    conn.close()


def sysbench(server: ServerInfo, command: str, seconds: int = 0) -> str:
    argv = [
        "sysbench", "oltp_write_only", "--db-driver=mysql", f"--mysql-host={server.host}",
        f"--mysql-port={server.port}", f"--mysql-user={server.user}",
        f"--mysql-password={server.password}", "--mysql-db=sbtest", "--tables=4",
        "--table-size=10000", "--threads=2", f"--time={seconds}", "--report-interval=0", command,
    ]  # fmt: skip
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def count_transactions(
    server: ServerInfo, start: tuple[str, int], end: tuple[str, int]
) -> tuple[int, int, float]:
    """(transactions, rows, seconds) of raw python-mysql-replication decoding the range."""
    reader = BinLogStreamReader(
        connection_settings={"host": server.host, "port": server.port, "user": server.user,
                             "password": server.password},
        server_id=99001, log_file=start[0], log_pos=start[1], resume_stream=True, blocking=False,
        is_mariadb=False, end_log_pos=None,
        only_events=[MariadbGtidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent,
                     XidEvent, QueryEvent],
    )  # fmt: skip
    txns = rows = 0
    began = time.perf_counter()
    for event in reader:
        if isinstance(event, XidEvent):
            txns += 1
        elif isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            rows += len(event.rows)
        if reader.log_file == end[0] and reader.log_pos >= end[1]:
            break
    elapsed = time.perf_counter() - began
    reader.close()
    return txns, rows, elapsed


def native_replication(
    master: ServerInfo,
    replica: ServerInfo,
    start: tuple[str, int],
    end: tuple[str, int],
    threads: int = 0,
) -> float:
    """Seconds for dc2 to apply dc1's binlog from start to end: one SQL thread, or ``threads``
    parallel workers (slave_parallel_threads, the server's slave_parallel_mode)."""
    conn = connect(replica)
    with conn.cursor() as cur:
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")
        cur.execute("SET GLOBAL slave_parallel_threads = %s", (threads,))
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
            "MASTER_LOG_FILE=%s, MASTER_LOG_POS=%s, MASTER_USE_GTID=no",
            (master.host, master.port, master.user, master.password, start[0], start[1]),
        )
        began = time.perf_counter()
        cur.execute("START SLAVE")
        while True:
            cur.execute("SHOW SLAVE STATUS")
            row = dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
            if row["Last_SQL_Error"] or row["Last_IO_Error"]:
                raise RuntimeError(
                    f"native replication failed: {row['Last_SQL_Error'] or row['Last_IO_Error']}"
                )
            if row["Relay_Master_Log_File"] == end[0] and int(row["Exec_Master_Log_Pos"]) >= end[1]:
                elapsed = time.perf_counter() - began
                break
            time.sleep(0.01)
        cur.execute("STOP SLAVE")
        cur.execute("SET GLOBAL slave_parallel_threads = 0")
    conn.close()
    return elapsed


def drc_capture(
    server: ServerInfo, start: tuple[str, int], end: tuple[str, int], workdir: Path
) -> dict:
    spec = {"server": server.__dict__, "start": start, "end": end, "dir": str(workdir / "buffer")}
    out = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(spec)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_workload(
    name: str, box: Sandbox, dc1: ServerInfo, dc2: ServerInfo, write, workdir: Path
) -> list[str]:
    # The replica first catches up on everything before the workload (schema, prepared data).
    before = position(dc1)
    native_replication(dc1, dc2, _first_binlog(dc1), before)
    write()
    end = position(dc1)
    txns, rows, raw_s = count_transactions(dc1, before, end)
    native_s = native_replication(dc1, dc2, before, end)
    shutil.rmtree(workdir / "buffer", ignore_errors=True)
    drc = drc_capture(dc1, before, end, workdir)
    lines = [
        f"\n### {name}: {txns} transactions, {rows} rows\n",
        "| system | seconds | txn/s | rows/s | vs native |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, seconds in (
        ("native MariaDB replication (1 SQL thread)", native_s),
        ("raw python-mysql-replication decode", raw_s),
        ("DRC replicator -> EventBuffer", drc["capture_s"]),
    ):
        lines.append(
            f"| {label} | {seconds:.2f} | {txns / seconds:,.0f} | {rows / seconds:,.0f} "
            f"| {native_s / seconds:.2f}x |"
        )
    megabytes = drc["bytes"] / 1e6
    lines.append(
        f"\nDRC stored {drc['records']} records, {megabytes:.1f} MB; buffer read-back "
        f"{drc['records'] / drc['read_s']:,.0f} records/s, {megabytes / drc['read_s']:.1f} MB/s "
        f"(decoded: {drc['records'] / drc['decode_s']:,.0f} txn/s); replicator peak RSS "
        f"{drc['peak_rss_mb']:.0f} MB"
    )
    return lines


def _first_binlog(server: ServerInfo) -> tuple[str, int]:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        first = cur.fetchone()[0]
    conn.close()
    return first, 4


def start_source(box: Sandbox) -> tuple[ServerInfo, ServerInfo]:
    """Two datacenters; dc1 gets the bench tables and sysbench's prepared tables."""
    description = box.up(2)
    dc1, dc2 = description.server("dc1"), description.server("dc2")
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute("CREATE DATABASE sbtest")
        for table in ("bulk", "big"):
            cur.execute(
                f"CREATE TABLE bench.{table} (id BIGINT PRIMARY KEY, a INT, b VARCHAR(100), "
                "c DATETIME(6), d DECIMAL(12,2))"
            )
    conn.close()
    sysbench(dc1, "prepare")
    return dc1, dc2


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bulk-rows", type=int, default=200_000)
    parser.add_argument("--sysbench-seconds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="small workloads, for a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.bulk_rows, args.sysbench_seconds = 20_000, 3
    workdir = Path(tempfile.mkdtemp(prefix="drc-bench-"))
    box = Sandbox(workdir / "sbx")
    try:
        dc1, dc2 = start_source(box)
        today = time.strftime("%Y-%m-%d")
        print(f"# Replicator throughput (`python bench/bench_replicator.py`, {today})")
        lines = run_workload("bulk, 1000-row transactions", box, dc1, dc2,
                             lambda: bulk_workload(dc1, args.bulk_rows), workdir)  # fmt: skip
        lines += run_workload(
            f"one {args.bulk_rows}-row transaction (stored as bounded fragments)", box, dc1, dc2,
            lambda: one_big_transaction(dc1, args.bulk_rows), workdir,
        )  # fmt: skip
        lines += run_workload(
            f"sysbench oltp_write_only, 2 threads, {args.sysbench_seconds}s", box, dc1, dc2,
            lambda: sysbench(dc1, "run", args.sysbench_seconds), workdir,
        )  # fmt: skip
        print("\n".join(lines))
    finally:
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
