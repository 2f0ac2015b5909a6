"""Apply throughput with lww conflict resolution, with and without conflicts, against the same
apply without a conflict policy, on the same binlog range, in the same run (issue #6).

Workload on dc1 of a fresh sandbox: ``bench.t`` (id, k, v, updated_at DATETIME(6) ON UPDATE
CURRENT_TIMESTAMP(6)) with ``--rows`` rows, then ``--txns`` transactions of 1-4 row changes
(80% updates, 10% inserts, 10% deletes). dc1 carries the tombstone table and triggers every
datacenter of a lww deployment has (drc.conflicts.tombstones), so its deletes travel with their
time. The range is captured once and served by the pull API; a ``python -m drc.apply`` channel
(grouped, max_txns_per_commit=500) then applies it into ``bench_drc.t`` on dc2, re-created from
the same starting rows before each run (with drc.checkpoint's row, drc.conflicts and the
tombstone table dropped):

  1. no conflict policy (today's apply);
  2. lww on updated_at, no conflicts: every touched row is probed, none differs;
  3. lww on updated_at, ``--conflict-share`` of the touched rows changed on the target first
     (v = 'local'): half stamped 1 s before the stream's first change of the row (the incoming
     change wins: one conflict), half 1 s after its last change (the local row wins every
     change of it, deletes included).

Each is timed from the channel's start (its setup done) until its checkpoint reaches the end of
the range. Runs 1 and 2 must leave bench_drc.t equal to bench.t (CHECKSUM); run 3 must differ
from the source in exactly the rows where the local version won, each still 'local'. Usage:

    python bench/bench_conflicts.py [--rows 100000] [--txns 20000] [--conflict-share 0.1]
                                    [--quick]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_apply import Served, checksums, copy_schema, drc_apply  # noqa: E402
from bench.bench_replicator import _first_binlog, connect, native_replication, position  # noqa: E402
from drc.conflicts import log as conflict_log  # noqa: E402
from drc.conflicts import tombstones  # noqa: E402
from drc.core.markers import CHECKPOINT_SCHEMA, CHECKPOINT_TABLE  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

SCHEMA, TABLE, COLUMN = "bench", "t", "updated_at"
TARGET = f"{SCHEMA}_drc"  # map_tables bench.* -> bench_drc.*
COLUMNS = ("id", "k", "v", COLUMN)
LWW = f"""
[conflicts]
priority = ["dc2", "dc1"]
[[conflicts.tables]]
table = "{TARGET}.{TABLE}"
policy = "lww"
column = "{COLUMN}"
"""
SKEW_S = 1.0  # local versions are this much older than / newer than the incoming ones


@dataclass
class Stream:
    """What the workload wrote on dc1, and when each row was first and last changed."""

    transactions: int = 0
    ops: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("update", "insert",
                                                                      "delete"), 0))  # fmt: skip
    first: dict[int, float] = field(default_factory=dict)  # id -> before its first change
    last: dict[int, float] = field(default_factory=dict)  # id -> after its last change commits
    inserted: set[int] = field(default_factory=set)

    @property
    def changes(self) -> int:
        return sum(self.ops.values())


@dataclass(frozen=True)
class Local:
    """Run 3's changes on the target: rows the incoming version beats, rows it does not."""

    older: tuple[int, ...] = ()
    newer: tuple[int, ...] = ()


@dataclass(frozen=True)
class Outcome:
    seconds: float
    decisions: dict[str, tuple[int, int]]  # decision -> (conflicts, distinct keys)
    verdict: str


def setup_source(dc1: ServerInfo, rows: int) -> None:
    """bench.t with ``rows`` rows, and the tombstone table and triggers of a lww table."""
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")  # as every session writing the table here
        cur.execute(f"CREATE DATABASE {SCHEMA}")
        cur.execute(f"USE {SCHEMA}")  # the sequence engine's seq_1_to_N needs a database
        cur.execute(
            f"CREATE TABLE {SCHEMA}.{TABLE} (id BIGINT PRIMARY KEY, k INT NOT NULL, "
            f"v VARCHAR(64) NOT NULL, {COLUMN} DATETIME(6) NOT NULL DEFAULT "
            "CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))"
        )
        cur.execute(
            f"INSERT INTO {SCHEMA}.{TABLE} (id, k, v) "
            f"SELECT seq, seq % 1000, CONCAT('row ', seq) FROM seq_1_to_{rows}"
        )
        stamp = tombstones.StampType.of("datetime", 6, COLUMN, f"{SCHEMA}.{TABLE}")
        key = [tombstones.KeyColumn("id", "bigint(20)")]
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {tombstones.SCHEMA}")
        cur.execute(tombstones.create_table(SCHEMA, TABLE, key, stamp))
        triggers = tombstones.create_triggers(
            schema=SCHEMA, table=TABLE, key=["id"], column=COLUMN, stamp=stamp, datacenter="dc1"
        )
        for trigger in triggers:
            cur.execute(trigger)
    conn.close()


def workload(dc1: ServerInfo, rows: int, txns: int, rng: random.Random) -> Stream:
    """``txns`` transactions of 1-4 changes: 80% updates, 10% inserts, 10% deletes."""
    stream, live, next_id = Stream(), list(range(1, rows + 1)), rows + 1
    conn = connect(dc1, autocommit=False)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for n in range(txns):
            began, touched = time.time(), []
            for j in range(rng.randint(1, 4)):
                roll = rng.random()
                if roll < 0.1:
                    row, next_id = next_id, next_id + 1
                    cur.execute(f"INSERT INTO {SCHEMA}.{TABLE} (id, k, v) VALUES (%s, %s, %s)",
                                (row, row % 1000, f"ins {n}.{j}"))  # fmt: skip
                    live.append(row)
                    stream.inserted.add(row)
                    op = "insert"
                elif roll < 0.2:
                    at = rng.randrange(len(live))
                    row, live[at] = live[at], live[-1]
                    live.pop()
                    cur.execute(f"DELETE FROM {SCHEMA}.{TABLE} WHERE id = %s", (row,))
                    op = "delete"
                else:
                    row = live[rng.randrange(len(live))]
                    cur.execute(f"UPDATE {SCHEMA}.{TABLE} SET k = k + 1, v = %s WHERE id = %s",
                                (f"upd {n}.{j}", row))  # fmt: skip
                    op = "update"
                stream.ops[op] += 1
                touched.append(row)
            conn.commit()
            ended = time.time()
            for row in touched:
                stream.first.setdefault(row, began)
                stream.last[row] = ended
            stream.transactions += 1
    conn.close()
    return stream


def reset_target(dc2: ServerInfo) -> None:
    """bench_drc as it started; no checkpoint row, conflict log or tombstones left over."""
    copy_schema(dc2, f"{SCHEMA}_start", TARGET)  # drops the old copy, and its triggers with it
    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        tomb = tombstones.name(TARGET, TABLE)
        cur.execute(f"DROP TABLE IF EXISTS {conflict_log.SCHEMA}.{conflict_log.TABLE}, "
                    f"{tombstones.SCHEMA}.`{tomb}`")  # fmt: skip
        if _exists(cur, CHECKPOINT_SCHEMA, CHECKPOINT_TABLE):
            cur.execute(f"DELETE FROM {CHECKPOINT_SCHEMA}.{CHECKPOINT_TABLE}")
    conn.close()


def write_locally(dc2: ServerInfo, stream: Stream, share: float, rng: random.Random) -> Local:
    """Change ``share`` of the touched rows on the target, before the channel applies them."""
    existing = sorted(set(stream.first) - stream.inserted)  # rows the target already has
    chosen = rng.sample(existing, min(len(existing), round(share * len(stream.first))))
    local = Local(tuple(chosen[::2]), tuple(chosen[1::2]))
    stamps = [(stream.first[row] - SKEW_S, row) for row in local.older]
    stamps += [(stream.last[row] + SKEW_S, row) for row in local.newer]
    conn = connect(dc2, autocommit=False)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("SET time_zone = '+00:00'")
        for when, row in stamps:  # as an application would: the row's clock is the session's
            cur.execute("SET TIMESTAMP = %s", (when,))
            cur.execute(f"UPDATE {TARGET}.{TABLE} SET v = 'local' WHERE id = %s", (row,))
        cur.execute("SET TIMESTAMP = DEFAULT")
        conn.commit()
    conn.close()
    return local


def decisions(dc2: ServerInfo) -> dict[str, tuple[int, int]]:
    """drc.conflicts on the target: decision -> (conflicts, distinct keys); {} if no log."""
    conn = connect(dc2)
    with conn.cursor() as cur:
        found = {}
        if _exists(cur, conflict_log.SCHEMA, conflict_log.TABLE):
            cur.execute(
                "SELECT decision, COUNT(*), COUNT(DISTINCT primary_key) "
                f"FROM {conflict_log.SCHEMA}.{conflict_log.TABLE} GROUP BY decision"
            )
            found = {d: (int(n), int(keys)) for d, n, keys in cur.fetchall()}
    conn.close()
    return found


def _exists(cur: Any, schema: str, table: str) -> bool:
    cur.execute(
        "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
        (schema, table),
    )
    return cur.fetchone() is not None


def rows_of(server: ServerInfo, schema: str) -> dict[int, tuple[object, ...]]:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(COLUMNS)} FROM {schema}.{TABLE}")
        rows = {int(r[0]): tuple(r) for r in cur.fetchall()}
    conn.close()
    return rows


def verify(dc1: ServerInfo, dc2: ServerInfo, local: Local | None, found: dict) -> str:
    """Runs 1-2: the copy equals the source. Run 3: it differs exactly where local won."""
    if local is None:
        if checksums(dc1, SCHEMA) != checksums(dc2, TARGET):
            raise AssertionError("bench_drc.t differs from bench.t after a run without conflicts")
        if found:
            raise AssertionError(f"conflicts logged where none were made: {found}")
        return "= source (CHECKSUM)"
    if not found:
        raise AssertionError("run 3 logged no conflict in drc.conflicts")
    source, target = rows_of(dc1, SCHEMA), rows_of(dc2, TARGET)
    differing = {k for k in source.keys() | target.keys() if source.get(k) != target.get(k)}
    not_local = sorted(k for k in differing if k not in target or target[k][2] != "local")
    kept, won = found.get("local", (0, 0)), found.get("incoming", (0, 0))
    expected = (len(local.newer), len(local.newer), len(local.older), [])
    if (len(differing), kept[1], won[0], not_local[:10]) != expected:
        raise AssertionError(
            f"run 3: {len(differing)} rows differ from the source, {kept[1]} keys kept local, "
            f"{won[0]} incoming wins, not local {not_local[:10]}; expected {expected}"
        )
    return f"differs in {len(differing):,} rows = the {kept[1]:,} keys where local won"


def run_case(
    dc1: ServerInfo, dc2: ServerInfo, served: Served, end: tuple[str, int], workdir: Path,
    label: str, lww: bool, local: Local | None,
) -> Outcome:  # fmt: skip
    seconds = drc_apply(dc2, served.api.url, SCHEMA, end, workdir, True, label=label,
                        extra_toml=LWW if lww else "")  # fmt: skip
    found = decisions(dc2)
    return Outcome(seconds, found, verify(dc1, dc2, local, found))


def measure(args: argparse.Namespace, dc1: ServerInfo, dc2: ServerInfo, workdir: Path) -> list[str]:
    rng = random.Random(6)
    setup_source(dc1, args.rows)
    before = position(dc1)
    native_replication(dc1, dc2, _first_binlog(dc1), before)  # dc2 holds the starting rows
    copy_schema(dc2, SCHEMA, f"{SCHEMA}_start")
    stream = workload(dc1, args.rows, args.txns, rng)
    end = position(dc1)
    served = Served(dc1, before, workdir / "buffer")
    outcomes: dict[str, Outcome] = {}
    try:
        served.wait_for(end)
        for label, lww, share in (("off", False, 0.0), ("lww-0", True, 0.0),
                                  ("lww-conflicts", True, args.conflict_share)):  # fmt: skip
            reset_target(dc2)
            local = write_locally(dc2, stream, share, rng) if share else None
            outcomes[label] = run_case(dc1, dc2, served, end, workdir, label, lww, local)
    finally:
        served.close()
    return report(args, stream, outcomes, local)


def report(
    args: argparse.Namespace, stream: Stream, outcomes: dict[str, Outcome], local: Local | None
) -> list[str]:
    touched, txns, rows = len(stream.first), stream.transactions, stream.changes
    made = 0 if local is None else len(local.older) + len(local.newer)
    lines = [
        f"\n### {txns:,} transactions, {rows:,} row changes ({stream.ops['update']:,} updates, "
        f"{stream.ops['insert']:,} inserts, {stream.ops['delete']:,} deletes) on a "
        f"{args.rows:,}-row table, touching {touched:,} rows\n",
        "| apply | seconds | txn/s | rows/s | vs no policy | conflicts logged | result |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    base = outcomes["off"].seconds
    for label, name in (
        ("off", "no conflict policy (baseline)"),
        ("lww-0", "lww on updated_at, 0% conflicts"),
        ("lww-conflicts", f"lww on updated_at, {made / touched:.0%} of touched rows conflicting"),
    ):
        o = outcomes[label]
        logged = "- (no policy)"
        if label != "off":
            total = sum(n for n, _ in o.decisions.values())
            parts = ", ".join(f"{n:,} {d}" for d, (n, _) in sorted(o.decisions.items()))
            logged = f"{total:,}" + (f" ({parts})" if parts else "")
        lines.append(
            f"| {name} | {o.seconds:.2f} | {txns / o.seconds:,.0f} | {rows / o.seconds:,.0f} "
            f"| {base / o.seconds:.2f}x | {logged} | {o.verdict} |"
        )
    if local is not None:
        logged = sum(n for n, _ in outcomes["lww-conflicts"].decisions.values())
        lines.append(
            f"\nRun 3 changed {made:,} of the {touched:,} touched rows on the target first "
            f"({made / touched:.1%}): {len(local.older):,} older than the incoming change "
            f"(incoming wins, one conflict each), {len(local.newer):,} newer than every incoming "
            "change of the row (local wins each of them, so a row changed k times logs k). "
            f"drc.conflicts: {logged:,} rows, {logged / touched:.1%} of the touched rows."
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=100_000, help="rows in the table at start")
    parser.add_argument("--txns", type=int, default=20_000, help="transactions written on dc1")
    parser.add_argument("--conflict-share", type=float, default=0.1)
    parser.add_argument("--quick", action="store_true", help="small workloads, for a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.txns = 5_000, 1_000
    workdir = Path(tempfile.mkdtemp(prefix="drc-bench-conflicts-"))
    box = Sandbox(workdir / "sbx")
    try:
        description = box.up(2)
        dc1, dc2 = description.server("dc1"), description.server("dc2")
        print(f"# Conflict resolution overhead (`python bench/bench_conflicts.py`, "
              f"{time.strftime('%Y-%m-%d')})")  # fmt: skip
        print("\n".join(measure(args, dc1, dc2, workdir)))
    finally:
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
