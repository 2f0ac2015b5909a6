"""Both datacenters write at once (disjoint rows): they converge, and every change crosses once.

Two DRC nodes (replicator + pull API + channel from the other side) run in this process against
the sandbox's dc1 and dc2. Random workloads with inserts, updates, deletes, multi-statement
transactions and DDL run on both sides at once; after quiescing, both sides hold the same rows
(per-row comparison and CHECKSUM TABLE), and each side's own binlog capture shows every change
of the other side applied exactly once and none of its own changes coming back.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from drc.config import load_config
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.ledger import stored_changes
from tests.support.servers import connect, drop_everywhere, execute, query

SCHEMA = "bidi_db"
TXNS_PER_SIDE = 400


def _workload(server: ServerInfo, parity: int, seed: int, ddl: str) -> None:
    rng = random.Random(seed)
    conn = connect(server, autocommit=False, database=SCHEMA)
    ids: list[int] = []
    next_id = parity
    with conn.cursor() as cur:
        for n in range(TXNS_PER_SIDE):
            if n == TXNS_PER_SIDE // 2:
                cur.execute(ddl)  # DDL in the middle of the traffic
            roll = rng.random()
            if roll < 0.4 or len(ids) < 5:
                count = rng.randint(1, 4)
                rows = [
                    (next_id + 2 * k, f"{server.datacenter}-{next_id + 2 * k}", 0)
                    for k in range(count)
                ]
                cur.executemany("INSERT INTO t1 (id, v, n) VALUES (%s, %s, %s)", rows)
                ids.extend(r[0] for r in rows)
                next_id += 2 * count
            elif roll < 0.7:
                cur.execute("UPDATE t1 SET n = n + 1 WHERE id = %s", (rng.choice(ids),))
            elif roll < 0.85:
                cur.execute("DELETE FROM t1 WHERE id = %s", (ids.pop(rng.randrange(len(ids))),))
            else:  # several statements over two tables in one transaction
                key = rng.choice(ids)
                cur.execute("INSERT INTO t2 VALUES (%s, %s)", (n * 2 + parity, f"log {n}"))
                cur.execute("UPDATE t1 SET v = %s WHERE id = %s", (f"multi {n}", key))
                cur.execute("UPDATE t2 SET note = 'changed' WHERE id = %s", (n * 2 + parity,))
            conn.commit()
    conn.close()


def _rows(server: ServerInfo, table: str) -> tuple[list[tuple[Any, ...]], int]:
    conn = connect(server, database=SCHEMA)
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}` ORDER BY id")
        rows = list(cur.fetchall())
        cur.execute(f"CHECKSUM TABLE `{table}`")
        checksum = cur.fetchone()[1]
    conn.close()
    return rows, checksum


def _tables(server: ServerInfo) -> list[str]:
    found = query(
        server,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
        "ORDER BY table_name",
        (SCHEMA,),
    )
    return [row[0] for row in found]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 3], ids=["one-connection", "parallel"])
def test_concurrent_disjoint_writes_converge_and_cross_exactly_once(
    sandbox: SandboxDescription, tmp_path: Path, workers: int
) -> None:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    drop_everywhere(SCHEMA, dc1, dc2)
    configs = write_configs(
        sandbox, tmp_path, schema=SCHEMA, channel_extra=f"parallel_workers = {workers}\n"
    )
    stop = threading.Event()
    nodes = {dc: Node(load_config(path)) for dc, path in configs.items()}
    try:
        for node in nodes.values():
            node.start(stop)
        execute(
            dc1,
            f"CREATE DATABASE {SCHEMA}",
            f"CREATE TABLE {SCHEMA}.t1 (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
            f"CREATE TABLE {SCHEMA}.t2 (id INT PRIMARY KEY, note VARCHAR(40))",
        )
        assert wait_for(lambda: _tables(dc2) == ["t1", "t2"], 30), "schema did not reach dc2"

        writers = [
            threading.Thread(
                target=_workload,
                args=(dc1, 1, 11, "ALTER TABLE t1 ADD COLUMN extra INT NOT NULL DEFAULT 5"),
            ),
            threading.Thread(
                target=_workload,
                args=(dc2, 2, 22, "CREATE TABLE t3 (id INT PRIMARY KEY, made_on VARCHAR(8))"),
            ),
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(timeout=300)
        execute(dc2, f"INSERT INTO {SCHEMA}.t3 VALUES (1, 'dc2')")  # into the replicated DDL

        def converged() -> bool:
            return _tables(dc1) == _tables(dc2) == ["t1", "t2", "t3"] and all(
                _rows(dc1, t) == _rows(dc2, t) for t in ("t1", "t2", "t3")
            )

        assert wait_for(converged, 120, interval=0.25), {
            t: (_rows(dc1, t)[1], _rows(dc2, t)[1]) for t in _tables(dc1)
        }
        time.sleep(1.0)  # let each replicator capture what its channel applied last
        captured = {dc: stored_changes(node, SCHEMA) for dc, node in nodes.items()}
        channels = {dc: node.channels[0].stats for dc, node in nodes.items()}
    finally:
        stop.set()
        for node in nodes.values():
            node.close()

    # Exactly once: what one side wrote itself is what the other side applied, row for row,
    # and nothing a side applied came back to it (that would inflate its applied count).
    assert captured["dc1"][True] == captured["dc2"][False]
    assert captured["dc2"][True] == captured["dc1"][False]
    assert captured["dc1"][False] > TXNS_PER_SIDE and captured["dc2"][False] > TXNS_PER_SIDE
    for stats in channels.values():
        assert stats.duplicate_inserts == stats.missing_updates == stats.missing_deletes == 0
    if workers > 1:  # some groups went out in parts
        assert sum(stats.parallel_parts for stats in channels.values()) > 0
