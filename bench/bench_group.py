"""A replicator group follower's copy throughput against the leader's capture, same backlog.

On a fresh one-datacenter sandbox: N transactions are written first; then member r1 starts
alone from the position before them (it leads and captures the backlog from the binlog), and
once it holds everything member r2 starts empty and copies the leader's buffer and history
through the pull API. Each rate is transactions over the time from its process start to its
buffer's last SCN reaching the end. Usage:

    python bench/bench_group.py [--txns 20000] [--rows 5] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drc.eventbuffer import EventBuffer  # noqa: E402
from drc.sandbox.group import member_config, start_member  # noqa: E402
from drc.sandbox.procs import free_port, stop_pid  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402


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


def write(server: ServerInfo, txns: int, rows: int) -> None:
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS bench_grp")
        cur.execute("CREATE DATABASE bench_grp")
        cur.execute("CREATE TABLE bench_grp.t (id INT PRIMARY KEY, v VARCHAR(60), n INT)")
        for t in range(txns):
            values = [(t * rows + k, f"row {t} {k} " + "x" * 30, k) for k in range(rows)]
            cur.executemany("INSERT INTO bench_grp.t VALUES (%s, %s, %s)", values)
            conn.commit()
    conn.close()


def reached(buffer_dir: Path, end: tuple[int, int]) -> bool:
    try:
        reader = EventBuffer.open_read_only(buffer_dir)
    except Exception:
        return False
    try:
        last = reader.last_scn
        return last is not None and (last.log_index, last.log_pos) >= end
    finally:
        reader.close()


def timed_member(
    base: Path, server: ServerInfo, zk: str, member: str, start: str, end: tuple[int, int],
    started: list[tuple[int, str]],
) -> float:  # fmt: skip
    port = free_port()
    config = member_config(
        base / member, datacenter="bench", member_id=member, source_host=server.host,
        source_port=server.port, user=server.user, password=server.password, zookeeper=zk,
        port=port, start_from=start,
    )  # fmt: skip
    began = time.monotonic()
    started.append((start_member(config, base / member / "replicator.log"), str(config)))
    while not reached(base / member / "buffer", end):
        time.sleep(0.05)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--txns", type=int, default=20000)
    parser.add_argument("--rows", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run (2000 transactions)")
    args = parser.parse_args()
    if args.quick:
        args.txns = 2000
    directory = Path(tempfile.mkdtemp(prefix="drc-bgrp-"))
    box = Sandbox(directory)
    started: list[tuple[int, str]] = []
    try:
        description = box.up(datacenters=1)
        server, zk = description.servers[0], description.zookeeper.connect
        file, pos = position(server)
        write(server, args.txns, args.rows)
        end_file, end_pos = position(server)
        end = (int(end_file.rsplit(".", 1)[1]), end_pos)
        leader_s = timed_member(directory, server, zk, "r1", f"{file}:{pos}", end, started)
        follower_s = timed_member(directory, server, zk, "r2", "current", end, started)
        lead, follow = args.txns / leader_s, args.txns / follower_s
        print(f"{args.txns} txns x {args.rows} rows")
        print(f"leader captures the backlog: {leader_s:.1f} s, {lead:,.0f} txn/s")
        print(f"follower copies it:          {follower_s:.1f} s, {follow:,.0f} txn/s")
        print(f"follower / leader: {follow / lead:.2f}x")
    finally:
        for pid, config in started:
            stop_pid(pid, config)
        box.down()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
