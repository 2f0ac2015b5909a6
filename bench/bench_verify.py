"""`drc verify` against `pt-table-sync --print` (percona-toolkit) on the same table pair, same run.

A fresh sandbox gets the same ``--rows``-row table on dc1 and dc2 (written on each with
sql_log_bin=0), then ``--diffs`` rows are changed, deleted and inserted on dc2 only. Three
ways compare dc1 (source) with dc2 (target), ``--repeat`` times each, in turn:
  - ``drc verify --channel from-dc1 --format json --no-recheck`` (Spark local[2], JVM start
    included; no replication runs, so there is nothing to recheck), from start to exit;
  - the same comparison in this process on a Spark session started before (as `drc run`'s
    periodic verify keeps one): the time of run_verify alone;
  - ``pt-table-sync --print`` with both DSNs (its chunked checksums, then the differing rows),
    from start to exit.
Reported: each run's seconds with the load average before it, the worst of each, rows/s at the
worst, and the differences each found (DRC's must be exactly the injected ones). Usage:

    python bench/bench_verify.py [--rows 1000000] [--diffs 30] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_replicator import connect  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

DB = "vb"


def fill(server: ServerInfo, rows: int) -> None:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.t (id BIGINT PRIMARY KEY, a INT NOT NULL, "
                    "b VARCHAR(60), c DECIMAL(12,2), d DATETIME(6))")  # fmt: skip
        for start in range(1, rows + 1, 100_000):
            end = min(rows, start + 99_999)
            cur.execute(f"INSERT INTO {DB}.t SELECT seq, seq % 1000, CONCAT('row ', seq), "
                        f"seq / 100, '2024-01-01' + INTERVAL seq SECOND FROM "
                        f"{DB}.seq_{start}_to_{end}")  # fmt: skip
            conn.commit()
        cur.execute(f"ANALYZE TABLE {DB}.t")
        cur.fetchall()
    conn.close()


def inject(server: ServerInfo, rows: int, count: int) -> set[tuple[str, int]]:
    step = rows // (count + 1)
    expected: set[tuple[str, int]] = set()
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for n in range(count):
            key = step * (n + 1)
            if n % 3 == 0:
                cur.execute(f"UPDATE {DB}.t SET a = a + 1 WHERE id = %s", (key,))
                expected.add(("different", key))
            elif n % 3 == 1:
                cur.execute(f"DELETE FROM {DB}.t WHERE id = %s", (key,))
                expected.add(("missing", key))
            else:
                cur.execute(f"INSERT INTO {DB}.t VALUES (%s, 1, 'x', 0, NULL)", (rows + n + 1,))
                expected.add(("extra", rows + n + 1))
        conn.commit()
    conn.close()
    return expected


def config(tmp: Path, dc1: ServerInfo, dc2: ServerInfo) -> Path:
    secret = tmp / "password"
    secret.write_text(dc1.password)
    secret.chmod(0o600)
    path = tmp / "dc2.toml"
    path.write_text(f"""[datacenter]
name = "dc2"
[source]
host = "{dc2.host}"
port = {dc2.port}
user = "{dc2.user}"
password_file = "{secret}"
[replicator]
buffer_dir = "{tmp / "buffer"}"
[[channels]]
name = "from-dc1"
origin = "dc1"
remote = ["http://127.0.0.1:9"]
tables = ["{DB}.*"]
[channels.origin_db]
host = "{dc1.host}"
port = {dc1.port}
user = "{dc1.user}"
password_file = "{secret}"
""")
    return path


def run_drc(path: Path) -> tuple[float, set[tuple[str, int]]]:
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "drc.cli", "verify", "--config", str(path), "--channel",
         "from-dc1", "--format", "json", "--master", "local[2]", "--keys", "100000",
         "--no-recheck"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - began
    if done.returncode not in (0, 1):
        raise SystemExit(f"drc verify failed: {done.stderr[-2000:]}")
    print("\n".join(ln for ln in done.stderr.splitlines() if ln.startswith("[ ")))
    report = json.loads(done.stdout)
    found = {(k["kind"], int(k["key"][0])) for t in report["tables"] for k in t["keys"]}
    return seconds, found


def run_warm(path: Path, session: object) -> tuple[float, set[tuple[str, int]]]:
    from drc.config import load_config
    from drc.verify.driver import Options, run_verify

    began = time.monotonic()
    report = run_verify(load_config(path), "from-dc1", Options(recheck=False),
                        out=lambda _line: None, session=session)  # fmt: skip
    seconds = time.monotonic() - began
    found = {(d.kind, int(d.key[0])) for t in report.tables for d in t.differences}
    return seconds, found


def run_pt(tmp: Path, dc1: ServerInfo, dc2: ServerInfo) -> tuple[float, int]:
    if shutil.which("pt-table-sync") is None:
        raise SystemExit("pt-table-sync is missing: run `make setup` (Debian percona-toolkit)")
    option_file = tmp / "pt.cnf"
    option_file.write_text(f"[client]\nuser={dc1.user}\npassword={dc1.password}\n")
    option_file.chmod(0o600)
    dsn = f"F={option_file},h=127.0.0.1,D={DB},t=t"
    began = time.monotonic()
    done = subprocess.run(
        ["pt-table-sync", "--print", "--no-check-triggers", f"{dsn},P={dc1.port}",
         f"h=127.0.0.1,P={dc2.port}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - began
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"pt-table-sync failed: {done.stderr[-2000:]}")
    writes = ("INSERT", "DELETE", "UPDATE", "REPLACE")
    statements = [ln for ln in done.stdout.splitlines() if ln.startswith(writes)]
    return seconds, len(statements)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--diffs", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="drc-bv-"))
    box = Sandbox(tmp / "sbx")
    try:
        description = box.up(datacenters=2)
        dc1, dc2 = description.server("dc1"), description.server("dc2")
        fill(dc1, args.rows)
        fill(dc2, args.rows)
        expected = inject(dc2, args.rows, args.diffs)
        path = config(tmp, dc1, dc2)
        from drc.spark.session import build_session
        from drc.verify.driver import SPARK_CONF

        session = build_session("local[2]", "drc-bench-verify", conf=SPARK_CONF)
        session.sparkContext.parallelize(range(2), 2).count()  # its Python workers up, as later
        times: dict[str, list[tuple[float, float]]] = {"cli": [], "warm": [], "pt": []}
        exact = {"cli": True, "warm": True}
        pt_found = 0
        for n in range(args.repeat):
            for name in ("cli", "warm", "pt"):
                load = os.getloadavg()[0]
                if name == "pt":
                    seconds, pt_found = run_pt(tmp, dc1, dc2)
                else:
                    runner = run_drc if name == "cli" else lambda p: run_warm(p, session)
                    seconds, found = runner(path)
                    exact[name] = exact[name] and found == expected
                times[name].append((seconds, load))
                print(f"run {n + 1} {name:4} {seconds:7.1f}s (load average {load:.1f})",
                      flush=True)  # fmt: skip
        session.stop()
        worst = {name: max(s for s, _ in runs) for name, runs in times.items()}
        print(f"rows {args.rows}, injected differences {len(expected)}, worst of {args.repeat}")
        for name, label in (("cli", "drc verify (CLI, cold Spark)"),
                            ("warm", "drc verify (warm session)")):  # fmt: skip
            print(f"{label:30} {worst[name]:7.1f}s {args.rows / worst[name]:9.0f} rows/s "
                  f"exactly the injected: {exact[name]}; x{worst['pt'] / worst[name]:.2f} "
                  "pt-table-sync")  # fmt: skip
        print(f"{'pt-table-sync --print':30} {worst['pt']:7.1f}s "
              f"{args.rows / worst['pt']:9.0f} rows/s printed {pt_found} statements")  # fmt: skip
    finally:
        box.down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
