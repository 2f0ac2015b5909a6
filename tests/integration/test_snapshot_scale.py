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

import itertools
import multiprocessing
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pymysql
import pytest

from drc.config import load_config
from drc.conflicts import tombstones
from drc.core.scn import SCN
from drc.core.windows import Window
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from drc.snapshot.driver import run_snapshot
from tests.support.apply import assert_same, running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.servers import connect, execute, query
from tests.support.snapshot import Background, mark, prepare, seen, two_way_configs
from tests.support.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCHEMA, BACK = "snap_scale", "snap_scale_back"
TOP = 18_446_744_073_709_551_615  # BIGINT UNSIGNED's largest value
# name -> (columns, rows, the SELECT over seq that fills it). The lww table is the biggest:
# Spark slices the list of chunks in order, so its chunks straddle the two partitions and its
# window spans most of the copy.
TABLES: dict[str, tuple[str, int, str]] = {
    "ints": ("id INT PRIMARY KEY, v INT NOT NULL, pad VARCHAR(40)", 50_000,
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
           "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)", 400_000,
           "SELECT seq, 0, TIMESTAMP '2025-01-01 00:00:00' + INTERVAL seq SECOND"),
    "bag": ("kind VARCHAR(8), v INT", 30_000, "SELECT 'b', seq % 10"),  # keyless
}  # fmt: skip
# lww on the table both sides write; overwrite on two that only dc1 writes, so that a false
# conflict would be logged there.
CONFLICTS = conflicts_toml(
    conflict_rule(f"{SCHEMA}.lw", "lww", column="ts"),
    conflict_rule(f"{SCHEMA}.ints", "overwrite"),
    conflict_rule(f"{SCHEMA}.skey", "overwrite"),
)
DC1_RATE, DC2_RATE = 300.0, 50.0  # transactions/s: 300 on the copied tables, 350 in total
DC1_LANES, DC2_LANES = 4, 2  # writer threads: a busy host makes each commit take a while
HOT = 3_000  # the lww rows both sides update: often one with a change still in the window
CHUNK_ROWS = 20_000  # so every table with a key, the lww one too, is several chunks


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
FRESH = itertools.count(10_000_000)  # keys of new rows, never used twice in a run


def dc1_ops(lane: int, lanes: int) -> list[Op]:
    """Small transactions on the copied tables; lane ``lane`` of ``lanes`` touches only its
    own keys, so the writers never wait for each other's row locks."""

    def pick(rng: random.Random, rows: int) -> int:
        return rng.randrange(rows // lanes) * lanes + lane + 1

    s = SCHEMA

    def ints(cur: Any, rng: random.Random, n: int) -> None:
        if n % 3 == 0:
            cur.execute(f"INSERT INTO {s}.ints VALUES (%s, %s, 'new')", (next(FRESH), n))
        elif n % 3 == 1:
            cur.execute(f"DELETE FROM {s}.ints WHERE id = %s", (pick(rng, 50_000),))
        else:
            cur.execute(f"UPDATE {s}.ints SET v = v + 1 WHERE id = %s", (pick(rng, 50_000),))

    def ubig(cur: Any, rng: random.Random, n: int) -> None:
        key = TOP - pick(rng, 150_000) * 3
        if n % 2:
            cur.execute(f"UPDATE {s}.ubig SET v = v + 1 WHERE id = %s", (key,))
        else:  # a moved key: the old one gone, a new one (between two loaded keys) written
            cur.execute(f"UPDATE {s}.ubig SET id = id - 1 WHERE id = %s", (key,))

    def skey(cur: Any, rng: random.Random, n: int) -> None:
        cur.execute(f"UPDATE {s}.skey SET n = n + 1 WHERE code = %s",
                    (f"k{pick(rng, 150_000):08d}",))  # fmt: skip
        cur.execute(f"REPLACE INTO {s}.skey VALUES (%s, %s)", (f"w{next(FRESH)}", n))

    def comp(cur: Any, rng: random.Random, n: int) -> None:
        i = pick(rng, 150_000)
        cur.execute(f"UPDATE {s}.comp SET v = v + 1 WHERE a = %s AND b = %s AND c = TIMESTAMP "
                    "'2024-01-01 00:00:00' + INTERVAL %s SECOND + INTERVAL %s MICROSECOND",
                    (i % 97, f"b{i % 1009}", i, i))  # fmt: skip
        cur.execute(f"INSERT INTO {s}.comp VALUES (%s, %s, UTC_TIMESTAMP(6), %s)",
                    (lane, f"w{next(FRESH)}", n))  # fmt: skip

    def dec(cur: Any, rng: random.Random, n: int) -> None:
        amount = f"{pick(rng, 100_000) * 1.0001:.4f}"
        if n % 2:
            cur.execute(f"UPDATE {s}.dec SET note = %s WHERE amount = %s", (f"u{n}", amount))
        else:
            cur.execute(f"DELETE FROM {s}.dec WHERE amount = %s", (amount,))

    def lw(cur: Any, rng: random.Random, n: int) -> None:
        cur.execute(f"UPDATE {s}.lw SET v = v + 1 WHERE id = %s", (pick(rng, HOT),))

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


def dc2_ops(joined: Any) -> list[Op]:
    """dc2's own table (replicated to dc1) and, once joined, the lww table's rows, the same
    rows dc1 updates."""

    mine: list[str] = []

    def back(cur: Any, rng: random.Random, n: int) -> None:
        if joined.is_set() and n % 2:
            cur.execute(f"UPDATE {SCHEMA}.lw SET v = v + 1000 WHERE id = %s",
                        (rng.randrange(1, HOT + 1),))  # fmt: skip
            return
        mine.append(f"r{next(FRESH)}")
        cur.execute(f"INSERT INTO {BACK}.skey VALUES (%s, %s)", (mine[-1], n))
        cur.execute(f"UPDATE {BACK}.skey SET n = n + 1 WHERE code = %s", (rng.choice(mine),))

    return [back]


class PacedWriter(Background):
    """Runs ``ops`` round robin in a thread, one small transaction each, at ``rate`` per
    second (a schedule: a writer that fell behind catches up without sleeping), and keeps
    ``stats[3 * slot:][:3]`` = transactions, seconds, longest transaction (BEGIN to COMMIT).

    ``lock_wait_s``: its session's innodb_lock_wait_timeout (a row lock held that long against
    it is an error, 1205, the test reports)."""

    def __init__(
        self, server: ServerInfo, ops: Sequence[Op], rate: float, lock_wait_s: int,
        stats: Any, slot: int,
    ) -> None:  # fmt: skip
        super().__init__(server)
        self.ops, self.rate, self.lock_wait_s = list(ops), rate, lock_wait_s
        self.stats, self.slot = stats, slot

    def _write(self) -> None:
        rng = random.Random(self.slot)
        conn = connect(self.server, autocommit=False)
        began, longest, at = time.monotonic(), 0.0, 3 * self.slot
        with conn.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = %s", (self.lock_wait_s,))
            while not self.stop.is_set():
                due = began + self.done / self.rate
                if (wait := due - time.monotonic()) > 0:
                    self.stop.wait(wait)
                start = time.monotonic()
                self.ops[self.done % len(self.ops)](cur, rng, self.done)
                conn.commit()
                longest = max(longest, time.monotonic() - start)
                self.done += 1
                self.stats[at : at + 3] = [self.done, time.monotonic() - began, longest]
        conn.close()


def write_load(
    server: ServerInfo, lanes: int, rate: float, first_key: int, stop: Any, joined: Any,
    stats: Any, errors: Any,
) -> None:  # fmt: skip
    """One datacenter's writers (``lanes`` threads), in a process of their own: in the test's
    process the two nodes' capture and apply would starve them of its GIL."""
    global FRESH
    FRESH = itertools.count(first_key)
    source = server.datacenter == "dc1"
    writers = [
        PacedWriter(server, dc1_ops(lane, lanes) if source else dc2_ops(joined), rate / lanes,
                    1 if source else 50, stats, lane)
        for lane in range(lanes)
    ]  # fmt: skip
    for writer in writers:
        writer.thread.start()
    while not stop.wait(0.2) and all(w.error is None for w in writers):
        pass
    for writer in writers:
        writer.stop.set()
        writer.thread.join(60)
        if writer.error is not None:
            errors.put(f"{server.datacenter} writer {writer.slot}: {writer.error!r}")


class Load:
    """The two-way load: writers on dc1 (lanes of their own keys) and on dc2, a process each,
    about DC1_RATE + DC2_RATE transactions/s. The dc1 writers' sessions fail on a row lock
    held 1 s against them (innodb_lock_wait_timeout = 1)."""

    def __init__(
        self, dc1: ServerInfo, dc2: ServerInfo, joined: Any, first_key: int, ctx: Any
    ) -> None:
        self.stop, self.errors = ctx.Event(), ctx.Queue()
        self.sides = []
        for server, lanes, rate in ((dc1, DC1_LANES, DC1_RATE), (dc2, DC2_LANES, DC2_RATE)):
            stats = ctx.Array("d", 3 * lanes, lock=False)
            process = ctx.Process(target=write_load, daemon=True, args=(
                server, lanes, rate, first_key, self.stop, joined, stats, self.errors))  # fmt: skip
            self.sides.append((server.datacenter, process, stats))

    def __enter__(self) -> Load:
        for _dc, process, _stats in self.sides:
            process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for _dc, process, _stats in self.sides:
            process.join(90)
        self._raise()

    def _raise(self) -> None:
        if not self.errors.empty():
            raise AssertionError(f"a writer failed: {self.errors.get()}")

    def lanes(self, dc: str | None = None) -> list[list[float]]:
        """[transactions, seconds, longest] of each writer (of ``dc``)."""
        return [list(stats[i : i + 3]) for d, _p, stats in self.sides if dc in (None, d)
                for i in range(0, len(stats), 3)]  # fmt: skip

    @property
    def done(self) -> int:
        self._raise()
        return int(sum(lane[0] for lane in self.lanes()))

    def longest(self, dc: str) -> float:
        return max(lane[2] for lane in self.lanes(dc))

    def report(self) -> str:
        """Transactions, achieved rate and longest transaction per datacenter, and in total."""
        parts, total = [], 0.0
        for dc in ("dc1", "dc2"):
            lanes = self.lanes(dc)
            rate = sum(n / s for n, s, _l in lanes if s)
            total += rate
            parts.append(f"{dc} {sum(n for n, _s, _l in lanes):.0f} txns at {rate:.0f}/s "
                         f"(longest {self.longest(dc) * 1000:.0f} ms)")  # fmt: skip
        return ", ".join(parts) + f"; {total:.0f} txns/s in all"


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
    ctx = multiprocessing.get_context("spawn")
    joined = ctx.Event()
    with running_nodes(configs):
        with Load(dc1, dc2, joined, 10_000_000, ctx) as load_:
            wait_for(lambda: load_.done > 300, "the two-way load under way")
            # The source's lock waits during the copy, measured on dc1 two ways: InnoDB's own
            # counters, read before and after (Innodb_row_lock_waits counts every row lock
            # wait; Innodb_row_lock_time_max is the longest, in ms, since the server started,
            # so a new maximum is one of this copy), and the writers' sessions, which fail on
            # a row lock held 1 s against them (innodb_lock_wait_timeout = 1). The writers'
            # longest transaction, BEGIN to COMMIT, is printed: on a busy shared host it also
            # holds CPU and fsync stalls, which are no lock wait.
            locks = lock_status(dc1)
            lines: list[str] = []
            config = load_config(configs["dc2"])
            summary = run_snapshot(config, "from-dc1", patterns=[f"{SCHEMA}.*"],
                                   master="local[2]", chunk_rows=CHUNK_ROWS, partitions=2,
                                   out=lines.append)  # fmt: skip
            after = lock_status(dc1)
            during = load_.report()
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
        for schema in (SCHEMA, BACK):
            assert_same(dc1, dc2, schema)
        with Load(dc1, dc2, joined, 20_000_000, ctx) as load_:
            written = load_.done
            wait_for(lambda: load_.done > written + 3000, "more writes", 120)
        print(f"after the join: {load_.report()}")
        converged(dc1, dc2)
        for schema in (SCHEMA, BACK):
            assert_same(dc1, dc2, schema)
    window = next(w for w in summary.windows if w.source == (SCHEMA, "lw"))
    found = conflicts(dc1) + conflicts(dc2)
    kinds = Counter((c["datacenter"], c["table_name"], c["kind"], c["decision"]) for c in found)
    print(f"lw window {window.copied_at} .. {window.converge_until}; conflicts {dict(kinds)}")
    assert false_conflicts(found, window) == [], "no false conflict"
