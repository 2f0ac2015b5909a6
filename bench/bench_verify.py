"""`drc verify` against `pt-table-sync --print` (percona-toolkit) on the same table pair, same run.

A fresh sandbox gets the same ``--rows``-row table on dc1 and dc2 (written on each with
sql_log_bin=0), then ``--diffs`` rows are changed, deleted and inserted on dc2 only. Both tools
compare dc1 (source) with dc2 (target):
  - ``drc verify --channel from-dc1 --format json --no-recheck`` (Spark local[2], JVM start
    included; no replication runs, so there is nothing to recheck);
  - ``pt-table-sync --print`` with both DSNs (its chunked checksums, then the differing rows);
each timed from start to exit. Reported: seconds, rows/s, and the differences each found
(DRC's must be exactly the injected ones). Usage:

    python bench/bench_verify.py [--rows 1000000] [--diffs 30]
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
        drc_s, found = run_drc(path)
        pt_s, pt_found = run_pt(tmp, dc1, dc2)
        print(f"rows {args.rows}, injected differences {len(expected)}")
        print(f"drc verify       {drc_s:7.1f}s  {args.rows / drc_s:9.0f} rows/s  found "
              f"{len(found)} (exactly the injected: {found == expected})")  # fmt: skip
        print(f"pt-table-sync    {pt_s:7.1f}s  {args.rows / pt_s:9.0f} rows/s  printed "
              f"{pt_found} statements")  # fmt: skip
        print(f"speed-up {pt_s / drc_s:.2f}x")
    finally:
        box.down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
