"""`drc snapshot` at the scale of issue 15's acceptance: about 1M rows over tables of several
key types (INT, BIGINT UNSIGNED near 2^64, VARCHAR, a composite key over INT, VARCHAR and
DATETIME(6), a DECIMAL key, a keyless table, and an lww table), copied from dc1 into dc2 while a
two-way load of about 300 transactions/s runs: dc1 writes to the copied tables, dc2 to a table
of its own that dc1's channel replicates, and, once the tables are joined, to the lww table too
(while dc2's channel is still inside the table's window).

Both datacenters run `drc run` (drc.node.Node) in this process; the snapshot runs on Spark in
local mode.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pymysql
import pytest

from drc.apply import tombstones
from drc.config import load_config
from drc.core.scn import SCN
from drc.core.windows import Window
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from drc.snapshot.driver import run_snapshot
from tests.integration.servers import connect
from tests.integration.test_apply_support import (
    assert_same,
    execute,
    query,
    running_nodes,
    wait_for,
)
from tests.integration.test_snapshot import mark, prepare, seen, two_way_configs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCHEMA, BACK = "snap_scale", "snap_scale_back"
TOP = 18_446_744_073_709_551_615  # BIGINT UNSIGNED's largest value
# name -> (columns, rows, the SELECT over seq that fills it)
TABLES: dict[str, tuple[str, int, str]] = {
    "ints": ("id INT PRIMARY KEY, v INT NOT NULL, pad VARCHAR(40)", 400_000,
             "SELECT seq, seq % 1000, CONCAT('pad-', seq)"),
    "ubig": ("id BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL", 150_000,
             f"SELECT {TOP} - seq * 3, seq"),
    "skey": ("code VARCHAR(20) PRIMARY KEY, n INT NOT NULL", 150_000,
             "SELECT CONCAT('k', LPAD(seq, 8, '0')), seq"),
    "comp": ("a INT, b VARCHAR(12), c DATETIME(6), v INT NOT NULL, PRIMARY KEY (a, b, c)",
             150_000, "SELECT seq % 97, CONCAT('b', seq % 1009), "
             "TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND + INTERVAL seq MICROSECOND, "
             "seq"),
    "dec": ("amount DECIMAL(20,4) PRIMARY KEY, note VARCHAR(20)", 100_000,
            "SELECT seq * 1.0001, CONCAT('d', seq)"),
    "lw": ("id INT PRIMARY KEY, v INT NOT NULL, ts DATETIME(6) NOT NULL "
           "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)", 5_000,
           "SELECT seq, 0, TIMESTAMP '2025-01-01 00:00:00' + INTERVAL seq SECOND"),
    "bag": ("kind VARCHAR(8), v INT", 30_000, "SELECT 'b', seq % 10"),  # keyless
}  # fmt: skip
CONFLICTS = f"""
[conflicts]
priority = ["dc1", "dc2"]
[[conflicts.tables]]
table = "{SCHEMA}.lw"
policy = "lww"
column = "ts"
"""
DC1_RATE, DC2_RATE = 250.0, 50.0  # transactions/s: 300 in total


def load(server: ServerInfo) -> int:
    """The tables, filled from MariaDB's seq_1_to_N sequence engine, outside the binlog (the
    snapshot reads them; nothing captures them)."""
    execute(server, f"CREATE DATABASE {SCHEMA}")
    total = 0
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for name, (columns, rows, select) in TABLES.items():
            cur.execute(f"CREATE TABLE {SCHEMA}.{name} ({columns})")
            cur.execute(f"INSERT INTO {SCHEMA}.{name} {select} FROM {SCHEMA}.seq_1_to_{rows}")
            total += rows
    conn.close()
    return total


Op = Callable[[Any, random.Random, int], None]


def dc1_ops(lane: int, lanes: int) -> list[Op]:
    """Small transactions on the copied tables; lane ``lane`` of ``lanes`` touches only its
    own keys, so the writers never wait for each other's row locks."""

    def pick(rng: random.Random, rows: int) -> int:
        return rng.randrange(rows // lanes) * lanes + lane + 1

    fresh = iter(range(10_000_000 + lane, 1 << 30, lanes))
    s = SCHEMA

    def ints(cur: Any, rng: random.Random, n: int) -> None:
        if n % 3 == 0:
            cur.execute(f"INSERT INTO {s}.ints VALUES (%s, %s, 'new')", (next(fresh), n))
        elif n % 3 == 1:
            cur.execute(f"DELETE FROM {s}.ints WHERE id = %s", (pick(rng, 400_000),))
        else:
            cur.execute(f"UPDATE {s}.ints SET v = v + 1 WHERE id = %s", (pick(rng, 400_000),))

    def ubig(cur: Any, rng: random.Random, n: int) -> None:
        key = TOP - pick(rng, 150_000) * 3
        if n % 2:
            cur.execute(f"UPDATE {s}.ubig SET v = v + 1 WHERE id = %s", (key,))
        else:  # a moved key: the old one gone, a new one (between two loaded keys) written
            cur.execute(f"UPDATE {s}.ubig SET id = id - 1 WHERE id = %s", (key,))

    def skey(cur: Any, rng: random.Random, n: int) -> None:
        cur.execute(f"UPDATE {s}.skey SET n = n + 1 WHERE code = %s",
                    (f"k{pick(rng, 150_000):08d}",))  # fmt: skip
        cur.execute(f"REPLACE INTO {s}.skey VALUES (%s, %s)", (f"w{next(fresh)}", n))

    def comp(cur: Any, rng: random.Random, n: int) -> None:
        i = pick(rng, 150_000)
        cur.execute(f"UPDATE {s}.comp SET v = v + 1 WHERE a = %s AND b = %s AND c = TIMESTAMP "
                    "'2024-01-01 00:00:00' + INTERVAL %s SECOND + INTERVAL %s MICROSECOND",
                    (i % 97, f"b{i % 1009}", i, i))  # fmt: skip
        cur.execute(f"INSERT INTO {s}.comp VALUES (%s, %s, UTC_TIMESTAMP(6), %s)",
                    (lane, f"w{next(fresh)}", n))  # fmt: skip

    def dec(cur: Any, rng: random.Random, n: int) -> None:
        amount = f"{pick(rng, 100_000) * 1.0001:.4f}"
        if n % 2:
            cur.execute(f"UPDATE {s}.dec SET note = %s WHERE amount = %s", (f"u{n}", amount))
        else:
            cur.execute(f"DELETE FROM {s}.dec WHERE amount = %s", (amount,))

    def lw(cur: Any, rng: random.Random, n: int) -> None:
        cur.execute(f"UPDATE {s}.lw SET v = v + 1 WHERE id = %s", (pick(rng, 5_000),))

    def bag(cur: Any, rng: random.Random, n: int) -> None:
        v = rng.randrange(10)
        if n % 3 == 0:
            cur.execute(f"INSERT INTO {s}.bag VALUES ('w', %s), ('w', %s)", (v, v))
        elif n % 3 == 1:
            cur.execute(f"DELETE FROM {s}.bag WHERE v = %s LIMIT 1", (v,))
        else:
            cur.execute(f"UPDATE {s}.bag SET kind = 'u' WHERE v = %s LIMIT 1", (v,))

    # A keyless table's DELETE .. LIMIT 1 scans and locks rows: one lane writes it
    return [ints, ubig, skey, comp, dec, lw, *([bag] if lane == 0 else [])]


def dc2_ops(joined: threading.Event) -> list[Op]:
    """dc2's own table (replicated to dc1) and, once joined, the lww table's rows, the same
    rows dc1 updates."""

    def back(cur: Any, rng: random.Random, n: int) -> None:
        if joined.is_set() and n % 2:
            cur.execute(f"UPDATE {SCHEMA}.lw SET v = v + 1000 WHERE id = %s",
                        (rng.randrange(1, 5_001),))  # fmt: skip
            return
        cur.execute(f"INSERT INTO {BACK}.skey VALUES (%s, %s)", (f"r{n:09d}", n))
        cur.execute(f"UPDATE {BACK}.skey SET n = n + 1 WHERE code = %s",
                    (f"r{rng.randrange(n + 1):09d}",))  # fmt: skip

    return [back]


class PacedWriter:
    """Runs ``ops`` round robin in a thread, one small transaction each, at ``rate`` per
    second (a schedule: a writer that fell behind catches up without sleeping).

    ``lock_wait_s``: its session's innodb_lock_wait_timeout (a row lock held that long against
    it is an error, 1205, the test reports); ``longest`` is its longest transaction, BEGIN to
    COMMIT."""

    def __init__(
        self, server: ServerInfo, ops: Sequence[Op], rate: float, seed: int, lock_wait_s: int = 50
    ) -> None:
        self.server, self.ops, self.rate, self.seed = server, list(ops), rate, seed
        self.lock_wait_s = lock_wait_s
        self.stop = threading.Event()
        self.done = 0
        self.longest = 0.0
        self.seconds = 0.0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PacedWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        if self.error is not None:
            raise self.error

    @property
    def achieved(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # reported by __exit__
            self.error = exc

    def _write(self) -> None:
        rng = random.Random(self.seed)
        conn = connect(self.server, autocommit=False)
        began = time.monotonic()
        with conn.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = %s", (self.lock_wait_s,))
            while not self.stop.is_set():
                due = began + self.done / self.rate
                if (wait := due - time.monotonic()) > 0:
                    self.stop.wait(wait)
                start = time.monotonic()
                self.ops[self.done % len(self.ops)](cur, rng, self.done)
                conn.commit()
                self.longest = max(self.longest, time.monotonic() - start)
                self.done += 1
                self.seconds = time.monotonic() - began
        conn.close()


class Load:
    """The two-way load: two dc1 writers (their own keys each) and one dc2 writer."""

    def __init__(self, dc1: ServerInfo, dc2: ServerInfo, joined: threading.Event) -> None:
        self.writers = [
            PacedWriter(dc1, dc1_ops(lane, 2), DC1_RATE / 2, seed=lane, lock_wait_s=1)
            for lane in range(2)
        ]
        self.writers.append(PacedWriter(dc2, dc2_ops(joined), DC2_RATE, seed=7))

    def __enter__(self) -> Load:
        for writer in self.writers:
            writer.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for writer in self.writers:
            writer.stop.set()
        for writer in self.writers:
            writer.__exit__()

    @property
    def done(self) -> int:
        return sum(w.done for w in self.writers)

    def report(self) -> str:
        return ", ".join(f"{w.server.datacenter} {w.done} txns at {w.achieved:.0f}/s (longest "
                         f"{w.longest * 1000:.0f} ms)" for w in self.writers)  # fmt: skip


def lock_status(server: ServerInfo) -> dict[str, int]:
    rows = query(server, "SHOW GLOBAL STATUS WHERE Variable_name IN "
                 "('Innodb_row_lock_waits', 'Innodb_row_lock_time_max')")  # fmt: skip
    return {str(k): int(v) for k, v in rows}


def converged(dc1: ServerInfo, dc2: ServerInfo) -> None:
    """Everything written so far applied on both sides (a marker row each way)."""
    for here, there, schema in ((dc1, dc2, SCHEMA), (dc2, dc1, BACK)):
        token = mark(here, schema)
        wait_for(partial(seen, there, schema, token), f"{here.datacenter}'s last write", 300)


def conflicts(server: ServerInfo) -> list[dict[str, Any]]:
    conn = connect(server, cursorclass=pymysql.cursors.DictCursor)
    with conn.cursor() as cur:  # this test's schemas only: the sandbox is shared
        cur.execute("SELECT channel, datacenter, origin, scn, schema_name, table_name, "
                    "primary_key, kind, decision, reason, local_row, incoming_before, "
                    "incoming_after FROM drc.conflicts WHERE schema_name IN (%s, %s) ORDER BY id",
                    (SCHEMA, BACK))  # fmt: skip
        found = list(cur.fetchall())
    conn.close()
    return found


def false_conflicts(found: list[dict[str, Any]], window: Window) -> list[dict[str, Any]]:
    """Conflicts only a snapshot could cause: on a table dc2 never writes, or decided by dc2's
    channel inside the lww table's window. The lww table written on both sides may have real
    conflicts after its window (both sides changed a row within a replication delay)."""
    return [
        c for c in found
        if c["table_name"] != "lw"
        or (c["datacenter"] == "dc2" and SCN.parse(c["scn"]) <= window.converge_until)
    ]  # fmt: skip


def test_a_million_rows_snapshot_under_two_way_load_ends_and_stays_equal(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    prepare(dc1, dc2, SCHEMA, BACK)
    for server in (dc1, dc2):
        execute(server, *(f"DROP TABLE IF EXISTS drc.`{tombstones.name(SCHEMA, t)}`"
                          for t in TABLES))  # fmt: skip
        execute(server, f"CREATE DATABASE {BACK}",
                f"CREATE TABLE {BACK}.skey {TABLES['skey'][0].join('()')}")  # fmt: skip
    began = time.monotonic()
    total = load(dc1)
    print(f"loaded {total} rows on dc1 in {time.monotonic() - began:.1f}s")
    configs = two_way_configs(sandbox, tmp_path / "cfg", [f"{BACK}.*"], [f"{SCHEMA}.*"],
                              extra=CONFLICTS)  # fmt: skip
    joined = threading.Event()
    with running_nodes(configs):
        with Load(dc1, dc2, joined) as load_:
            wait_for(lambda: load_.done > 300, "the two-way load under way")
            # The source's lock waits during the copy, two ways: InnoDB's own counters on dc1
            # (Innodb_row_lock_waits counts every row lock wait; Innodb_row_lock_time_max is the
            # longest, in ms, since the server started, so a new maximum is one of this copy),
            # and dc1's writers' longest transaction, BEGIN to COMMIT (their sessions also fail
            # on a row lock held 1 s against them: innodb_lock_wait_timeout = 1).
            locks = lock_status(dc1)
            lines: list[str] = []
            summary = run_snapshot(load_config(configs["dc2"]), "from-dc1",
                                   patterns=[f"{SCHEMA}.*"], master="local[2]",
                                   chunk_rows=25_000, partitions=2, out=lines.append)  # fmt: skip
            after = lock_status(dc1)
            during = load_.report()
            longest = max(w.longest for w in load_.writers if w.server is dc1)
            joined.set()  # dc2 writes to the lww table while its channel replays the window
            written = load_.done
            wait_for(lambda: load_.done > written + 3000, "writes after the join", 120)
        converged(dc1, dc2)
        print("\n".join(lines))
        print(f"during the copy: {during}; dc1 row lock waits "
              f"+{after['Innodb_row_lock_waits'] - locks['Innodb_row_lock_waits']}, longest "
              f"{after['Innodb_row_lock_time_max']} ms (before "
              f"{locks['Innodb_row_lock_time_max']})")  # fmt: skip
        assert sorted(summary.copied) == sorted(f"{SCHEMA}.{t}" for t in TABLES)
        assert sum(summary.copied.values()) >= total * 0.99 and not summary.skipped
        if after["Innodb_row_lock_time_max"] > locks["Innodb_row_lock_time_max"]:
            assert after["Innodb_row_lock_time_max"] < 1000, "a row lock wait of 1 s on dc1"
        assert longest < 1.0, "a transaction of 1 s on the source during the copy"
        for schema in (SCHEMA, BACK):
            assert_same(dc1, dc2, schema)
        with Load(dc1, dc2, joined) as load_:
            written = load_.done
            wait_for(lambda: load_.done > written + 3000, "more writes", 120)
        print(f"after the join: {load_.report()}")
        converged(dc1, dc2)
        for schema in (SCHEMA, BACK):
            assert_same(dc1, dc2, schema)
    window = next(w for w in summary.windows if w.source == (SCHEMA, "lw"))
    found = conflicts(dc1) + conflicts(dc2)
    print(f"lw window {window.copied_at} .. {window.converge_until}; {len(found)} conflicts")
    assert false_conflicts(found, window) == [], "no false conflict"
