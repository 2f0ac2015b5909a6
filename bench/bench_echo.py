"""Capture's CPU for the echo (what the channels applied into its source): ``[replicator]
drc_applied = "full"`` against ``"marker"``, on one binlog, in one process (issue #16).

A one-server sandbox gets ``--txns`` sysbench oltp_write_only transactions (the datacenter's
own writes), then, for each ``--groups`` size G, the echo of as many source transactions as an
apply channel writes them: one target transaction per G of them, on a session with
``skip_replication = 1``, each source transaction the same four statements as sysbench's (two
updates, a delete and an insert of one row), and the channel's checkpoint upsert in
``drc.checkpoint`` (drc.apply.checkpoint's statement) at the end. Each range is then captured
whole into a fresh EventBuffer with each mode in turn (``--rounds`` times, alternating);
CPU seconds of this process per source transaction, best of the rounds.

    python bench/bench_echo.py [--txns 5000] [--groups 1,3,20] [--rounds 3]

In a two-way pair at R tps per side each replicator captures R own transactions and the echo
of R applied ones per second: the capture CPU per replicated transaction is the own figure
plus the echo figure of the channel's grouping (a channel that keeps up applies 1-3 per
target transaction; one catching up, hundreds).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pymysql  # noqa: E402
from bench_hotpath import _position, _sysbench, capture_until  # noqa: E402

from drc.apply.checkpoint import CheckpointRow, create_statements, upsert  # noqa: E402
from drc.core.scn import SCN  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

TABLE_SIZE = 10_000


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _connect(server: ServerInfo) -> pymysql.connections.Connection:
    return pymysql.connect(host=server.host, port=server.port, user=server.user,
                           password=server.password, autocommit=False)  # fmt: skip


def write_echo(server: ServerInfo, txns: int, group: int, seed: int) -> None:
    """``txns`` sysbench-shaped source transactions applied ``group`` per target transaction,
    as an apply session writes them (skip_replication, checkpoint row last)."""
    rng = random.Random(seed)
    conn = _connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1, @drc_apply = 1")
        for done in range(0, txns, group):
            for n in range(done, min(done + group, txns)):
                table = f"sbtest.sbtest{rng.randint(1, 4)}"
                key = rng.randint(1, TABLE_SIZE)
                cur.execute(f"UPDATE {table} SET k = k + 1 WHERE id = %s", (key,))
                text = f"{rng.getrandbits(120):036d}-echo-{n}".ljust(120, "x")
                cur.execute(f"UPDATE {table} SET c = %s WHERE id = %s", (text, key))
                row = cur.execute(f"SELECT k, c, pad FROM {table} WHERE id = %s", (key,))
                k, c, pad = cur.fetchone() if row else (0, text, "p" * 60)
                cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                cur.execute(f"INSERT INTO {table} (id, k, c, pad) VALUES (%s, %s, %s, %s)",
                            (key, k, c, pad))  # fmt: skip
            scn = SCN(1, 2, 1, 1000 + done)
            statement = upsert(CheckpointRow("from-dc2", scn, "dc2", "epoch-1"))
            cur.execute(statement.sql, statement.params)
            conn.commit()
    conn.close()


def capture_cpu(work: Path, server: ServerInfo, start: tuple[str, int], end: tuple[str, int],
                marker: bool) -> tuple[float, int]:  # fmt: skip
    """CPU seconds to capture [start, end) into a fresh buffer, and the markers stored."""
    from drc.eventbuffer import EventBuffer
    from drc.metastore.store import MetaStore
    from drc.replicator.replicator import CaptureOptions, Replicator
    from drc.replicator.source import SourceSettings

    shutil.rmtree(work, ignore_errors=True)
    settings = SourceSettings(server.host, server.port, server.user, server.password, 99007)
    buffer = EventBuffer.open(work / "buffer")
    store = MetaStore.open(work / "metastore.sqlite3")
    options = CaptureOptions(start_from=f"{start[0]}:{start[1]}", omit_drc_rows=marker)
    rep = Replicator(settings, buffer, store, options)
    spent = capture_until(rep, buffer, end)
    buffer.close()
    store.close()
    return spent, rep.stats.drc_applied_markers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--txns", type=int, default=5000, help="source transactions per range")
    parser.add_argument("--groups", default="1,3,20", help="source transactions per target one")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    groups = [int(g) for g in args.groups.split(",")]
    work = Path(tempfile.mkdtemp(prefix="drc-echo-"))
    box = Sandbox(work / "sbx")
    try:
        server = box.up(1).server("dc1")
        conn = _connect(server)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE sbtest")
            for statement in create_statements():
                cur.execute(statement)
        conn.commit()
        conn.close()
        _sysbench(server, "--threads=2", f"--table-size={TABLE_SIZE}", "prepare")
        ranges: list[tuple[str, tuple[str, int], tuple[str, int]]] = []
        start = _position(server)
        _sysbench(server, "--threads=2", f"--events={args.txns}", "--time=0", "run")
        ranges.append(("own: sysbench oltp_write_only", start, _position(server)))
        for group in groups:
            start = _position(server)
            write_echo(server, args.txns, group, seed=group)
            ranges.append((f"echo, {group} per target transaction", start, _position(server)))
        rows = []
        load = os.getloadavg()[0]
        for label, start, end in ranges:
            best = {False: float("inf"), True: float("inf")}
            for _ in range(args.rounds):
                for marker in (False, True):
                    spent, markers = capture_cpu(work / "capture", server, start, end, marker)
                    assert marker or not markers
                    best[marker] = min(best[marker], spent)
            full, marked = (best[m] * 1e6 / args.txns for m in (False, True))
            rows.append(f"| {label} | {full:,.0f} | {marked:,.0f} | {full / marked:.2f}x |")
        load = max(load, os.getloadavg()[0])
    finally:
        box.down()
        shutil.rmtree(work, ignore_errors=True)
    print(f"# Capture CPU of the echo (`python bench/bench_echo.py --txns {args.txns} "
          f"--groups {args.groups} --rounds {args.rounds}`, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"load average up to {load:.1f})\n")  # fmt: skip
    print("CPU us per source transaction, best of the rounds\n")
    print('| range | drc_applied = "full" | "marker" | less |')
    print("| --- | ---: | ---: | ---: |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
