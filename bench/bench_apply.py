"""Apply throughput against native MariaDB replication, on the same binlog, in the same run.

For each workload written on dc1 of a fresh sandbox (bulk: 1000-row transactions; sysbench
oltp_write_only), the same binlog range is applied into dc2
  - by native MariaDB replication (dc2 as a replica of dc1, one SQL thread), timed from
    START SLAVE until it has executed the range;
  - by a DRC apply channel in its own process (``python -m drc.apply``), pulling from the pull
    API of a replicator that already captured the range, writing into a copy of the schema
    (map_tables db.* -> db_drc.*, same starting rows), timed from the channel's start until its
    checkpoint reaches the end of the range; once with the default grouping and once with one
    source transaction per target transaction.
The copies are compared with CHECKSUM TABLE afterwards. Usage:

    python bench/bench_apply.py [--bulk-rows 200000] [--sysbench-seconds 15] [--quick]

``--parallel N`` adds a DRC run with ``parallel_workers = N`` and native replication with
``slave_parallel_threads = N`` (same starting rows, same binlog range).

``--trees A,B --rounds N`` compares source trees (e.g. a worktree of an older commit) on one
captured sysbench workload instead: the grouped apply N times per tree, alternating, each run's
apply process importing drc from its tree (PYTHONPATH); one workload takes away the
run-to-run spread of the workload itself.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_replicator import (  # noqa: E402
    _first_binlog,
    bulk_workload,
    connect,
    count_transactions,
    native_replication,
    position,
    start_source,
    sysbench,
)
from drc.api.app import create_app  # noqa: E402
from drc.api.deps import ApiDeps  # noqa: E402
from drc.api.server import ApiServer  # noqa: E402
from drc.core.scn import SCN  # noqa: E402
from drc.core.tablefilter import TableFilter  # noqa: E402
from drc.eventbuffer import EventBuffer  # noqa: E402
from drc.metastore.store import MetaStore  # noqa: E402
from drc.replicator.replicator import CaptureOptions, Replicator  # noqa: E402
from drc.replicator.source import SourceSettings, split_binlog_name  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402


class Served:
    """dc1's binlog range captured into a buffer and served by the pull API (this process)."""

    def __init__(self, server: ServerInfo, start: tuple[str, int], directory: Path) -> None:
        directory.mkdir(parents=True)
        self.buffer = EventBuffer.open(directory)
        self.metastore = MetaStore.open(directory / "metastore.sqlite3")
        settings = SourceSettings(server.host, server.port, server.user, server.password, 99101)
        options = CaptureOptions(start_from=f"{start[0]}:{start[1]}", capture=TableFilter())
        self.replicator = Replicator(settings, self.buffer, self.metastore, options)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.replicator.run, args=(self.stop,), daemon=True)
        self.thread.start()
        deps = ApiDeps(buffer=self.buffer, metastore=self.metastore)
        self.api = ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True).start()

    def wait_for(self, end: tuple[str, int]) -> None:
        target = (split_binlog_name(end[0])[1], end[1])
        while (last := self.buffer.last_scn) is None or (last.log_index, last.log_pos) < target:
            time.sleep(0.01)

    def close(self) -> None:
        self.api.stop()
        self.stop.set()
        self.thread.join()
        self.buffer.close()
        self.metastore.close()


def copy_schema(server: ServerInfo, schema: str, copy: str) -> None:
    """``copy`` on dc2 with the rows ``schema`` has now (kept out of dc2's binlog)."""
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP DATABASE IF EXISTS {copy}")
        cur.execute(f"CREATE DATABASE {copy}")
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                    (schema,))  # fmt: skip
        for (table,) in cur.fetchall():
            cur.execute(f"CREATE TABLE {copy}.{table} LIKE {schema}.{table}")
            cur.execute(f"INSERT INTO {copy}.{table} SELECT * FROM {schema}.{table}")
    conn.close()


def checksums(server: ServerInfo, schema: str) -> list[object]:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "ORDER BY TABLE_NAME", (schema,))  # fmt: skip
        tables = [r[0] for r in cur.fetchall()]
        cur.execute("CHECKSUM TABLE " + ", ".join(f"{schema}.{t}" for t in tables))
        sums = [r[1] for r in cur.fetchall()]
    conn.close()
    return sums


PROFILE_DIR: Path | None = None  # --profile


def channel_config(
    dc2: ServerInfo, url: str, schema: str, name: str, copy: str, workdir: Path, extra: str = ""
) -> Path:
    """A dc2 config with one channel ``name`` applying dc1's ``schema`` into ``copy``."""
    config = workdir / f"{name}.toml"
    config.write_text(f"""
[datacenter]
name = "dc2"
[source]
host = "{dc2.host}"
port = {dc2.port}
user = "{dc2.user}"
password = "{dc2.password}"
[replicator]
buffer_dir = "{workdir / "unused"}"
[[channels]]
name = "{name}"
origin = "dc1"
remote = ["{url}"]
tables = ["{schema}.*"]
map_tables = {{ "{schema}.*" = "{copy}.*" }}
{extra}""")  # fmt: skip
    return config


def drc_apply(
    dc2: ServerInfo,
    url: str,
    schema: str,
    end: tuple[str, int],
    workdir: Path,
    grouping: bool,
    *,
    label: str = "",
    extra_toml: str = "",
    pythonpath: str | None = None,
) -> float:
    """Seconds for a `python -m drc.apply` process to apply everything up to ``end``.

    ``extra_toml`` is appended to its config (e.g. a ``[conflicts]`` section); ``label`` names
    the channel (default: its grouping); ``pythonpath``: the source tree the apply process
    imports drc from (default: this one)."""
    name = f"bench-{schema}-{label or ('grouped' if grouping else 'single')}"
    extra = f"max_txns_per_commit = {500 if grouping else 1}\n{extra_toml}"
    config = channel_config(dc2, url, schema, name, f"{schema}_drc", workdir, extra)
    log = workdir / f"{name}.log"
    target = (split_binlog_name(end[0])[1], end[1])
    argv = [sys.executable, "-m", "drc.apply", "--config", str(config)]
    if PROFILE_DIR is not None:  # py-spy --gil: samples are the apply process's Python CPU
        PROFILE_DIR.mkdir(parents=True, exist_ok=True)
        py_spy = str(Path(sys.executable).with_name("py-spy"))
        record = [py_spy, "record", "--gil", "--rate", "200", "--format", "raw", "--output"]
        argv = [*record, str(PROFILE_DIR / f"{name}.txt"), "--", *argv]
    env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
    with open(log, "wb") as out:
        began = time.perf_counter()
        # cwd too: ``python -m`` puts the working directory ahead of PYTHONPATH
        child = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=pythonpath
        )
    try:
        conn = connect(dc2)
        with conn.cursor() as cur:
            while True:
                if child.poll() is not None:
                    raise RuntimeError(f"drc.apply exited: {log.read_text()[-2000:]}")
                if "resumes after" in log.read_text():  # connected: start the clock here
                    began = time.perf_counter()
                    break
                time.sleep(0.005)
            while True:
                cur.execute("SELECT scn FROM drc.checkpoint WHERE channel = %s", (name,))
                row = cur.fetchone()
                if row is not None:
                    scn = SCN.parse(row[0])
                    if (scn.log_index, scn.log_pos) >= target:
                        elapsed = time.perf_counter() - began
                        break
                if child.poll() is not None:
                    raise RuntimeError(f"drc.apply exited: {log.read_text()[-2000:]}")
                time.sleep(0.01)
        conn.close()
    finally:
        child.send_signal(signal.SIGINT if PROFILE_DIR else signal.SIGTERM)  # py-spy: SIGINT
        try:
            child.wait(timeout=90)  # drc.apply exits on its own within 60 s of SIGTERM
        except subprocess.TimeoutExpired:
            child.kill()
            raise
    return elapsed


# One DRC run of a workload: its label, grouping, the tree its apply imports (None: this) and
# its parallel_workers
Run = tuple[str, bool, str | None, int]
DEFAULT_RUNS: list[Run] = [
    ("DRC apply, grouped (max_txns_per_commit=500)", True, None, 1),
    ("DRC apply, one source txn per target txn", False, None, 1),
]


def tree_runs(trees: list[str], rounds: int) -> list[Run]:
    return [(f"DRC apply, grouped, {tree} (round {n + 1})", True, tree, 1)
            for n in range(rounds) for tree in trees]  # fmt: skip


def parallel_runs(workers: int) -> list[Run]:
    return [(f"DRC apply, grouped, parallel_workers={workers}", True, None, workers)]


def run_workload(
    name: str,
    dc1: ServerInfo,
    dc2: ServerInfo,
    schema: str,
    write,
    workdir: Path,
    runs: list[Run] = DEFAULT_RUNS,
    native_threads: int = 0,
) -> list[str]:
    """``native_threads``: native replication also with that many parallel workers, from the
    same starting rows."""
    before = position(dc1)
    native_replication(dc1, dc2, _first_binlog(dc1), before)  # dc2 holds the starting rows
    copy_schema(dc2, schema, f"{schema}_start")
    write()
    end = position(dc1)
    txns, rows, _ = count_transactions(dc1, before, end)
    one_thread = native_replication(dc1, dc2, before, end)
    natives = [("native MariaDB replication (1 SQL thread)", one_thread)]
    if native_threads:
        copy_schema(dc2, f"{schema}_start", schema)
        seconds = native_replication(dc1, dc2, before, end, threads=native_threads)
        natives.append((f"native, slave_parallel_threads={native_threads}", seconds))
    native_s = natives[0][1]
    served = Served(dc1, before, workdir / f"buffer-{schema}")
    results: list[tuple[str, tuple[float, bool]]] = []
    try:
        served.wait_for(end)
        for n, (label, grouping, tree, workers) in enumerate(runs):
            copy_schema(dc2, f"{schema}_start", f"{schema}_drc")
            extra = f"parallel_workers = {workers}\n" if workers > 1 else ""
            seconds = drc_apply(dc2, served.api.url, schema, end, workdir, grouping,
                                label=f"run{n}", extra_toml=extra, pythonpath=tree)  # fmt: skip
            same = checksums(dc1, schema) == checksums(dc2, f"{schema}_drc")
            results.append((label, (seconds, same)))
            print(f"{label}: {txns / seconds:,.0f} txn/s", file=sys.stderr, flush=True)
    finally:
        served.close()
    lines = [
        f"\n### {name}: {txns} transactions, {rows} rows\n",
        "| system | seconds | txn/s | rows/s | vs native | result = source |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, (seconds, same) in [*((n, (s, True)) for n, s in natives), *results]:
        lines.append(
            f"| {label} | {seconds:.2f} | {txns / seconds:,.0f} | {rows / seconds:,.0f} "
            f"| {native_s / seconds:.2f}x | {'yes' if same else 'NO'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bulk-rows", type=int, default=200_000)
    parser.add_argument("--sysbench-seconds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="small workloads, for a smoke run")
    parser.add_argument("--workloads", default="bulk,sysbench", help="bulk, sysbench or both")
    parser.add_argument("--profile", metavar="DIR", help="py-spy each drc.apply run into DIR")
    parser.add_argument("--trees", help="comma-separated source trees to compare (sysbench only)")
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree with --trees")
    parser.add_argument("--parallel", type=int, default=0, metavar="N",
                        help="also DRC with parallel_workers=N and native with "
                        "slave_parallel_threads=N")  # fmt: skip
    args = parser.parse_args()
    global PROFILE_DIR
    PROFILE_DIR = Path(args.profile) if args.profile else None
    if args.quick:
        args.bulk_rows, args.sysbench_seconds = 20_000, 3
    workdir = Path(tempfile.mkdtemp(prefix="drc-bench-apply-"))
    box = Sandbox(workdir / "sbx")
    try:
        dc1, dc2 = start_source(box)
        print(f"# Apply throughput (`python bench/bench_apply.py`, {time.strftime('%Y-%m-%d')})")
        lines: list[str] = []
        extra = DEFAULT_RUNS + (parallel_runs(args.parallel) if args.parallel > 1 else [])
        if "bulk" in args.workloads and not args.trees:
            lines += run_workload("bulk, 1000-row transactions", dc1, dc2, "bench",
                                  lambda: bulk_workload(dc1, args.bulk_rows), workdir, extra,
                                  args.parallel)  # fmt: skip
        if "sysbench" in args.workloads or args.trees:
            runs = extra
            if args.trees:
                runs = tree_runs([str(Path(t).resolve()) for t in args.trees.split(",")],
                                 args.rounds)  # fmt: skip
            lines += run_workload(
                f"sysbench oltp_write_only, 2 threads, {args.sysbench_seconds}s", dc1, dc2,
                "sbtest", lambda: sysbench(dc1, "run", args.sysbench_seconds), workdir, runs,
                args.parallel,
            )  # fmt: skip
        print("\n".join(lines))
    finally:
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
