"""`drc snapshot` against `mariadb-dump --single-transaction | mariadb`, same table, same run.

A fresh sandbox; dc1 gets one table of ``--rows`` rows (BIGINT key, INT, VARCHAR, DECIMAL,
DATETIME), its replicator runs in this process. The table is copied into dc2 three ways, each
into its own database, timed from the command's start (JVM start included) to its exit:

  - ``mariadb-dump --single-transaction`` piped into ``mariadb`` (the baseline; its default
    --opt: extended inserts, keys disabled during the load);
  - ``drc snapshot`` (Spark local mode, ``--partitions`` tasks);
  - with ``--jdbc``, also Spark's own JDBC source and sink through MariaDB Connector/J
    (partitioned read by key range, batched inserts): the alternative the snapshot's design
    was measured against.

While each copy runs, a probe writer updates random rows of the table on dc1 (about 50
transactions/s) and records its slowest transaction: the longest any writer waited.
The copies are compared with dc1 by count and CRC32 of the columns the probe leaves alone. Usage:

    python bench/bench_snapshot.py [--rows 5000000] [--partitions 2] [--jdbc] [--quick]
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_apply import Served  # noqa: E402
from bench.bench_replicator import connect, position  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

SCHEMA = "bs"
VERBOSE = False  # True: the snapshot's progress lines too
JAR = "/usr/share/java/mariadb-java-client.jar"


def setup(dc1: ServerInfo, rows: int) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(f"USE {SCHEMA}")  # the sequence tables (seq_1_to_N) live in any database
        cur.execute(f"CREATE TABLE {SCHEMA}.big (id BIGINT PRIMARY KEY, a INT NOT NULL, "
                    "b VARCHAR(60), c DECIMAL(12,2), d DATETIME)")  # fmt: skip
        for start in range(0, rows, 500_000):
            cur.execute(
                f"INSERT INTO {SCHEMA}.big SELECT seq, seq % 1000, CONCAT('row-', seq, '-', "
                "MD5(seq)), seq / 100, '2024-01-01' + INTERVAL (seq % 100000) SECOND FROM "
                f"seq_{start + 1}_to_{min(start + 500_000, rows)}"
            )
    conn.close()


class Probe:
    """Updates random rows on dc1 until stopped; ``slowest`` is its longest transaction."""

    def __init__(self, server: ServerInfo, rows: int) -> None:
        self.server, self.rows = server, rows
        self.slowest = 0.0
        self.count = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        conn, rng = connect(self.server, autocommit=False), random.Random(3)
        with conn.cursor() as cur:
            while not self.stop.wait(0.02):
                began = time.monotonic()
                cur.execute(f"UPDATE {SCHEMA}.big SET a = a + 1 WHERE id = %s",
                            (rng.randint(1, self.rows),))  # fmt: skip
                conn.commit()
                self.slowest = max(self.slowest, time.monotonic() - began)
                self.count += 1
        conn.close()


COPY_PHASE = re.compile(r"(?:copied \d+ chunks, \d+ rows|JDBC copy) in ([0-9.]+)s")


def timed(command: list[str] | str, shell: bool = False) -> tuple[float, float | None]:
    """Seconds the command took, and those of its copy phase (after Spark started) if it
    says them."""
    began = time.monotonic()
    done = subprocess.run(command, shell=shell, check=True, capture_output=True, text=True)
    if VERBOSE:
        print(done.stdout)
    phase = COPY_PHASE.search(done.stdout)
    return time.monotonic() - began, float(phase[1]) if phase else None


def dump_pipe(dc1: ServerInfo, dc2: ServerInfo, copy: str) -> tuple[float, float | None]:
    def options(s: ServerInfo) -> str:
        return f"--no-defaults -h{s.host} -P{s.port} -u{s.user} -p{s.password}"

    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {copy}")
        cur.execute(f"CREATE DATABASE {copy}")
    conn.close()
    return timed(f"mariadb-dump {options(dc1)} --single-transaction {SCHEMA} big | "
                 f"mariadb {options(dc2)} {copy}", shell=True)  # fmt: skip


def snapshot(dc1: ServerInfo, dc2: ServerInfo, url: str, tmp: Path, copy: str,
             partitions: int) -> tuple[float, float | None]:  # fmt: skip
    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {copy}")
        for table in ("checkpoint", "snapshot_run", "snapshot_chunk", "snapshot_tables"):
            cur.execute(f"DROP TABLE IF EXISTS drc.{table}")
    conn.close()
    (tmp / "dc1.pw").write_text(dc1.password)
    (tmp / "dc2.pw").write_text(dc2.password)
    config = tmp / "dc2.toml"
    config.write_text(f"""
[datacenter]
name = "dc2"
[source]
host = "{dc2.host}"
port = {dc2.port}
user = "{dc2.user}"
password_file = "{tmp / "dc2.pw"}"
[replicator]
buffer_dir = "{tmp / "unused"}"
[[channels]]
name = "bench"
origin = "dc1"
remote = ["{url}"]
tables = ["{SCHEMA}.*"]
map_tables = {{ "{SCHEMA}.*" = "{copy}.*" }}
[channels.origin_db]
host = "{dc1.host}"
port = {dc1.port}
user = "{dc1.user}"
password_file = "{tmp / "dc1.pw"}"
""")
    return timed([sys.executable, "-m", "drc.cli", "snapshot", "--config", str(config),
                  "--channel", "bench", "--master", "local[2]", "--partitions",
                  str(partitions)])  # fmt: skip


JDBC_COPY = """
import sys, time
from drc.spark.session import build_session
src, dst, user, password, rows, parts = sys.argv[1:7]
spark = build_session("local[2]", "jdbc-copy", jars=[{jar!r}])
began = time.monotonic()
props = {{"user": user, "password": password, "driver": "org.mariadb.jdbc.Driver"}}
frame = spark.read.jdbc(src, "big", column="id", lowerBound=1, upperBound=int(rows),
                        numPartitions=int(parts), properties=props)
frame.write.jdbc(dst, "big", mode="append",
                 properties={{**props, "batchsize": "5000", "rewriteBatchedStatements": "true"}})
print(f"JDBC copy in {{time.monotonic() - began:.1f}}s")
spark.stop()
"""


def jdbc(
    dc1: ServerInfo, dc2: ServerInfo, copy: str, rows: int, partitions: int
) -> tuple[float, float | None]:
    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {copy}")
        cur.execute(f"CREATE DATABASE {copy}")
        cur.execute(f"CREATE TABLE {copy}.big (id BIGINT PRIMARY KEY, a INT NOT NULL, "
                    "b VARCHAR(60), c DECIMAL(12,2), d DATETIME)")  # fmt: skip
    conn.close()
    return timed([sys.executable, "-c", JDBC_COPY.format(jar=JAR),
                  f"jdbc:mysql://{dc1.host}:{dc1.port}/{SCHEMA}",
                  f"jdbc:mysql://{dc2.host}:{dc2.port}/{copy}", dc1.user, dc1.password,
                  str(rows), str(partitions)])  # fmt: skip


def digest(server: ServerInfo, schema: str) -> tuple[object, ...]:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*), BIT_XOR(CRC32(CONCAT_WS('|', id, b, c, d))) FROM "
                    f"{schema}.big")  # fmt: skip
        found = tuple(cur.fetchone())
    conn.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--jdbc", action="store_true", help="also time Spark's JDBC copy")
    parser.add_argument("--quick", action="store_true", help="200k rows, for a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.rows = 200_000
    workdir = Path(tempfile.mkdtemp(prefix="drc-bench-snapshot-"))
    box = Sandbox(workdir / "sbx")
    served = None
    try:
        description = box.up(2)
        dc1, dc2 = description.server("dc1"), description.server("dc2")
        began = time.monotonic()
        setup(dc1, args.rows)
        print(f"# Snapshot (`python bench/bench_snapshot.py --rows {args.rows}`, "
              f"{time.strftime('%Y-%m-%d')}): {args.rows:,} rows loaded in "
              f"{time.monotonic() - began:.0f}s")  # fmt: skip
        served = Served(dc1, position(dc1), workdir / "buffer")
        conn = connect(dc1)
        with conn.cursor() as cur:  # something for the replicator to have captured
            cur.execute(f"UPDATE {SCHEMA}.big SET a = a + 1 WHERE id = 1")
        conn.close()
        served.wait_for(position(dc1))
        url = served.api.url
        results = []
        with Probe(dc1, args.rows) as probe:
            results.append(("mariadb-dump --single-transaction | mariadb",
                            dump_pipe(dc1, dc2, "dumped"), probe))  # fmt: skip
        with Probe(dc1, args.rows) as probe:
            seconds = snapshot(dc1, dc2, url, workdir, "snapped", args.partitions)
            results.append((f"drc snapshot (local[2], {args.partitions} partitions)", seconds,
                            probe))  # fmt: skip
        if args.jdbc:
            with Probe(dc1, args.rows) as probe:
                seconds = jdbc(dc1, dc2, "jdbc", args.rows, args.partitions)
                results.append(("Spark JDBC read + write (Connector/J)", seconds, probe))
        base = results[0][1][0]
        print("| copy | seconds | rows/s | vs dump | copy phase (after Spark started) | "
              "probe writer's slowest txn |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- |")
        for what, (seconds, phase), probe in results:
            shown = "" if phase is None else f"{phase:.1f} s ({args.rows / phase:,.0f} rows/s)"
            print(f"| {what} | {seconds:.1f} | {args.rows / seconds:,.0f} | "
                  f"{base / seconds:.2f}x | {shown} | {probe.slowest * 1000:.0f} ms "
                  f"({probe.count} txns) |")  # fmt: skip
        source = digest(dc1, SCHEMA)
        copies = {name: digest(dc2, name) == source for name in ("dumped", "snapped")}
        print(f"copies equal to dc1 (count and CRC32 of id, b, c, d; the probe changes only a): "
              f"{copies}")  # fmt: skip
    finally:
        if served is not None:
            served.close()
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
