"""Bulk catch-up against streaming apply and native MariaDB replication, same backlog, same run.

A backlog of ``--changes`` row changes is written on dc1 of a fresh sandbox while dc2 is away:
half inserts of new rows (1000-row transactions), half updates (100-row transactions) that all
hit 1% of the rows ("hot"), or, in the second case, each hit a different row (nothing to
reduce). The same binlog range is then applied into dc2
  - by native MariaDB replication (dc2 as a replica of dc1, stopped while the backlog was
    written, then started; one SQL thread), timed until it has executed the range;
  - by a DRC streaming apply channel (``python -m drc.apply``, default grouping) into a copy of
    the schema (map_tables), timed from its start until its checkpoint reaches the range end;
  - by ``drc catchup`` (Spark local mode) into another copy, timed from the command's start
    (JVM start included) until it exits;
the replicator having captured the range first. The copies are compared with CHECKSUM TABLE.
Memory and CPU: the catch-up's peak resident size and CPU seconds per process kind (Python
driver, JVM, PySpark Python workers) and the target MariaDB's CPU seconds meanwhile, sampled
from /proc. Usage:

    python bench/bench_catchup.py [--changes 1000000] [--partitions 4] [--quick] [--hot-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_apply import (  # noqa: E402
    Served,
    channel_config,
    checksums,
    copy_schema,
    drc_apply,
)
from bench.bench_replicator import _first_binlog, connect, native_replication, position  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

SCHEMA = "cu"
BASE_ROWS = 200_000


def setup(dc1: ServerInfo, base_rows: int) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(f"CREATE TABLE {SCHEMA}.t (id BIGINT PRIMARY KEY, a INT NOT NULL, "
                    "b VARCHAR(60), c DECIMAL(12,2))")  # fmt: skip
    conn.close()
    insert(dc1, 1, base_rows)


def insert(server: ServerInfo, first: int, count: int) -> None:
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        for start in range(first, first + count, 1000):
            rows = [(i, i % 97, f"row {i} " + "x" * 30, i / 100)
                    for i in range(start, min(start + 1000, first + count))]  # fmt: skip
            cur.executemany(f"INSERT INTO {SCHEMA}.t VALUES (%s, %s, %s, %s)", rows)
            conn.commit()
    conn.close()


def backlog(server: ServerInfo, changes: int, base_rows: int, hot: bool) -> None:
    """changes/2 inserts of new rows, changes/2 updates: of the hot 1% of the rows, or of
    distinct rows."""
    inserts = updates = changes // 2
    hot_rows = max(100, (base_rows + inserts) // 100 // 100 * 100)
    conn = connect(server, autocommit=False)
    next_id, cold = base_rows + 1, 1
    per_insert = max(1, updates // max(1, inserts // 1000))  # updates between inserts
    done = 0
    with conn.cursor() as cur:
        while next_id <= base_rows + inserts or done < updates:
            if next_id <= base_rows + inserts:
                count = min(1000, base_rows + inserts + 1 - next_id)
                conn.commit()
                insert_rows = [(i, i % 97, f"new {i} " + "y" * 30, i / 100)
                               for i in range(next_id, next_id + count)]  # fmt: skip
                cur.executemany(f"INSERT INTO {SCHEMA}.t VALUES (%s, %s, %s, %s)", insert_rows)
                conn.commit()
                next_id += count
            for _ in range(0, min(per_insert, updates - done), 100):
                if hot:
                    first = 1 + (done // 100 * 100) % hot_rows
                else:
                    first, cold = cold, cold + 100
                cur.execute(f"UPDATE {SCHEMA}.t SET a = a + 1, c = c + 1 "
                            "WHERE id BETWEEN %s AND %s",
                            (first, first + 99))  # fmt: skip
                conn.commit()
                done += 100
    conn.close()


class TreeUsage:
    """Peak resident memory (MB) and CPU seconds of a process's session (the process started
    with start_new_session), per kind: the Python driver, its JVM(s) and the PySpark Python
    workers; sampled from /proc every 0.2 s."""

    KINDS = ("driver", "jvm", "workers")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = dict.fromkeys(self.KINDS, 0.0)
        self.peak_total = 0.0
        self.target_cpu = 0.0  # the target MariaDB's CPU seconds meanwhile (set by the caller)
        self._cpu: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _kind(self, pid: int, cmdline: bytes) -> str:
        if pid == self.pid:
            return "driver"
        return "workers" if b"pyspark.daemon" in cmdline else "jvm"  # the launcher scripts too

    def _run(self) -> None:
        page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(0.2):
            rss = dict.fromkeys(self.KINDS, 0.0)
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    if int(stat[3]) != self.pid or stat[0] == "Z":  # the session, not a zombie
                        continue
                    pid = int(entry.name)
                    known = self._cpu.get(pid)  # an exiting process's cmdline reads empty
                    kind = known[0] if known else self._kind(pid, (entry / "cmdline").read_bytes())
                    rss[kind] += int(stat[21]) * page / 1e6
                    self._cpu[pid] = (kind, (int(stat[11]) + int(stat[12])) / tick)
                except (OSError, IndexError, ValueError):
                    continue
            self.peak = {k: max(v, rss[k]) for k, v in self.peak.items()}
            self.peak_total = max(self.peak_total, sum(rss.values()))

    def stop(self) -> TreeUsage:
        self._stop.set()
        self._thread.join()
        return self

    @property
    def cpu(self) -> dict[str, float]:
        out = dict.fromkeys(self.KINDS, 0.0)
        for kind, seconds in self._cpu.values():
            out[kind] += seconds
        return out

    def line(self) -> str:
        cpu, peak = self.cpu, self.peak
        return (
            f"peak memory {self.peak_total:.0f} MB (driver {peak['driver']:.0f}, JVM "
            f"{peak['jvm']:.0f}, Python workers {peak['workers']:.0f}); CPU seconds: driver "
            f"{cpu['driver']:.1f}, JVM {cpu['jvm']:.1f}, Python workers {cpu['workers']:.1f}, "
            f"target MariaDB {self.target_cpu:.1f}"
        )


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def catchup(
    dc2: ServerInfo, url: str, workdir: Path, partitions: int
) -> tuple[float, TreeUsage, str]:
    """Seconds and resource use of `drc catchup` (local mode) into cu_cu (the target's CPU
    seconds meanwhile added to its usage line); its summary line."""
    name = "bench-cu-catchup"
    config = channel_config(dc2, url, SCHEMA, name, f"{SCHEMA}_cu", workdir)
    argv = [sys.executable, "-m", "drc.cli", "catchup", "--config", str(config), "--channel",
            name, "--master", "local[2]", "--partitions", str(partitions)]  # fmt: skip
    target_cpu = cpu_seconds(dc2.pid)
    began = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             start_new_session=True)  # fmt: skip
    usage = TreeUsage(child.pid)
    out, _ = child.communicate()
    seconds = time.perf_counter() - began
    usage.stop()
    usage.target_cpu = cpu_seconds(dc2.pid) - target_cpu
    if child.returncode != 0:
        raise RuntimeError(f"drc catchup failed: {out[-2000:]}")
    print(out, file=sys.stderr)  # its progress lines
    return seconds, usage, out.strip().splitlines()[-1]


def streaming(dc2: ServerInfo, url: str, end: tuple[str, int], workdir: Path) -> float:
    return drc_apply(dc2, url, SCHEMA, end, workdir, True)


def run_case(
    name: str, dc1: ServerInfo, dc2: ServerInfo, write: Callable[[], None], workdir: Path,
    partitions: int, synced: tuple[str, int],
) -> tuple[list[str], tuple[str, int]]:  # fmt: skip
    """The case's report lines, and the position dc2 has replicated up to."""
    before = position(dc1)
    native_replication(dc1, dc2, synced, before)  # dc2 holds the starting rows
    copy_schema(dc2, SCHEMA, f"{SCHEMA}_start")
    write()
    end = position(dc1)
    native_cpu = cpu_seconds(dc2.pid)
    native_s = native_replication(dc1, dc2, before, end)
    native_cpu = cpu_seconds(dc2.pid) - native_cpu
    served = Served(dc1, before, workdir / f"buffer-{len(os.listdir(workdir))}")
    try:
        served.wait_for(end)
        copy_schema(dc2, f"{SCHEMA}_start", f"{SCHEMA}_drc")
        began = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(dc2.pid)
        stream_s = streaming(dc2, served.api.url, end, workdir)
        done = resource.getrusage(resource.RUSAGE_CHILDREN)
        stream_cpu = (
            done.ru_utime + done.ru_stime - began[0].ru_utime - began[0].ru_stime,
            cpu_seconds(dc2.pid) - began[1],
        )
        stream_same = checksums(dc1, SCHEMA) == checksums(dc2, f"{SCHEMA}_drc")
        copy_schema(dc2, f"{SCHEMA}_start", f"{SCHEMA}_cu")
        execute_ignoring(dc2, "DELETE FROM drc.checkpoint WHERE channel = 'bench-cu-catchup'")
        load = os.getloadavg()[0]
        cu_s, usage, summary = catchup(dc2, served.api.url, workdir, partitions)
        cu_same = checksums(dc1, SCHEMA) == checksums(dc2, f"{SCHEMA}_cu")
    finally:
        served.close()
    lines = [
        f"\n### {name}\n",
        "| system | seconds | vs native | vs streaming | result = source |",
        "| --- | ---: | ---: | ---: | --- |",
        f"| native MariaDB replication (1 SQL thread) | {native_s:.1f} | 1.00x | "
        f"{stream_s / native_s:.2f}x | yes |",
        f"| DRC streaming apply (grouped) | {stream_s:.1f} | {native_s / stream_s:.2f}x | 1.00x "
        f"| {'yes' if stream_same else 'NO'} |",
        f"| DRC catch-up, local[2], {partitions} partitions (JVM start included) | {cu_s:.1f} | "
        f"{native_s / cu_s:.2f}x | {stream_s / cu_s:.2f}x | {'yes' if cu_same else 'NO'} |",
        f"\nCPU seconds: native replication (the replica MariaDB) {native_cpu:.1f}; streaming: "
        f"drc.apply {stream_cpu[0]:.1f}, target MariaDB {stream_cpu[1]:.1f}",
        f"\ncatch-up {usage.line()}; load average at its start {load:.1f}; "
        f"its summary: `{summary}`",
    ]
    return lines, end


def execute_ignoring(server: ServerInfo, statement: str) -> None:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    except Exception:  # the table does not exist yet
        pass
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a small backlog, for a smoke run")
    parser.add_argument(
        "--hot-only", action="store_true", help="only the backlog with hot rows (a shorter run)"
    )
    args = parser.parse_args()
    base = BASE_ROWS
    if args.quick:
        args.changes, base = 40_000, 10_000
    workdir = Path(tempfile.mkdtemp(prefix="drc-bench-catchup-"))
    box = Sandbox(workdir / "sbx")
    try:
        description = box.up(2)
        dc1, dc2 = description.server("dc1"), description.server("dc2")
        setup(dc1, base)
        print(f"# Bulk catch-up (`python bench/bench_catchup.py`, {time.strftime('%Y-%m-%d')}): "
              f"{args.changes:,} row changes on {base:,} + {args.changes // 2:,} rows")  # fmt: skip
        lines, synced = run_case(
            "half the changes are updates of the hot 1% of the rows", dc1, dc2,
            lambda: backlog(dc1, args.changes, base, hot=True), workdir, args.partitions,
            _first_binlog(dc1),
        )  # fmt: skip
        if args.hot_only:
            print("\n".join(lines))
            return
        setup(dc1, base)
        more, _ = run_case(
            "no hot rows: every update hits another row (nothing to reduce)", dc1, dc2,
            lambda: backlog(dc1, args.changes, base, hot=False), workdir, args.partitions,
            synced,
        )  # fmt: skip
        print("\n".join(lines + more))
    finally:
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
