"""kill -9 of the replicator at random moments during a write workload loses and repeats nothing.

The buffer is compared, transaction by transaction (GTID, row images, order), with the source
binlog read independently by python-mysql-replication.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from drc.core.errors import BufferStateError
from drc.eventbuffer import EventBuffer
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import read_all, source_table_rows
from tests.support.config import server_toml
from tests.support.servers import connect, fresh_database, master_position

TXNS = 1200
KILLS = 5


def _config(tmp: Path, server: ServerInfo, start: tuple[str, int]) -> Path:
    secret = tmp / "password"
    secret.write_text(server.password)
    secret.chmod(0o600)
    config = tmp / "dc.toml"
    config.write_text(
        f"""
[datacenter]
name = "crash"
{server_toml("source", server, password_file=secret, replica_server_id=88001)}
[replicator]
buffer_dir = "{tmp / "buf"}"
start_from = "{start[0]}:{start[1]}"
include = ["crash_db.*"]
heartbeat_interval_s = 0  # compared with the source's own transactions: no DRC heartbeats
fragment_rows = 300
commit_max_ms = 20
[replicator.buffer]
segment_mb = 1
[api]
port = 0
"""
    )
    return config


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "drc.cli", "replicator", "run", "--config", str(config)]
    with open(log, "ab") as out:
        return subprocess.Popen([*argv, "--progress-every", "0"], stdout=out, stderr=out)


def _workload(
    server: ServerInfo, seed: int, kills_done: threading.Event, done: threading.Event
) -> None:
    """At least TXNS transactions, and on until every kill has happened (a fast host would
    otherwise finish writing before the later kills)."""
    rng = random.Random(seed)
    conn = connect(server, autocommit=False)
    ids: list[int] = []
    next_id = 1
    with conn.cursor() as cur:
        n = 0
        while n < TXNS or not kills_done.is_set():
            kind = rng.random()
            if kind < 0.4 or len(ids) < 10:
                count = 1000 if n % 300 == 150 else rng.randint(1, 5)  # some big transactions
                rows = [(next_id + k, f"v{next_id + k}", rng.randint(0, 99)) for k in range(count)]
                cur.executemany("INSERT INTO crash_db.t VALUES (%s, %s, %s)", rows)
                ids.extend(r[0] for r in rows)
                next_id += count
            elif kind < 0.7:
                cur.execute("UPDATE crash_db.t SET n = n + 1 WHERE id = %s", (rng.choice(ids),))
            elif kind < 0.85:
                victim = ids.pop(rng.randrange(len(ids)))
                cur.execute("DELETE FROM crash_db.t WHERE id = %s", (victim,))
            else:  # several statements, two tables, one transaction
                cur.execute("INSERT INTO crash_db.u VALUES (%s, %s)", (n, "multi"))
                cur.execute(
                    "UPDATE crash_db.t SET v = %s WHERE id = %s", (f"m{n}", rng.choice(ids))
                )
                cur.execute("UPDATE crash_db.u SET note = 'changed' WHERE id = %s", (n,))
            conn.commit()
            n += 1
            time.sleep(0.002)
    conn.close()
    done.set()


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_and_duplicates_nothing(
    dc2: ServerInfo, tmp_path: Path
) -> None:
    fresh_database(
        dc2,
        "crash_db",
        "CREATE TABLE crash_db.t (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
        "CREATE TABLE crash_db.u (id INT PRIMARY KEY, note VARCHAR(20))",
    )
    start = master_position(dc2)
    config, log = _config(tmp_path, dc2, start), tmp_path / "replicator.log"
    rng = random.Random(20261122)
    kills_done, done = threading.Event(), threading.Event()
    writer = threading.Thread(target=_workload, args=(dc2, 7, kills_done, done), daemon=True)
    proc = _start(config, log)
    writer.start()
    kills = 0
    while kills < KILLS:
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
        proc = _start(config, log)
    kills_done.set()
    writer.join(timeout=300)
    assert done.is_set(), "the workload did not finish (see its thread's error above)"
    end = master_position(dc2)
    try:
        stored = _wait_and_read(tmp_path / "buf", end, proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    expected = source_table_rows(dc2, start, "crash_db")
    by_scn: dict[Any, list[Any]] = {}
    gtids: dict[Any, str | None] = {}
    for txn in stored:
        by_scn.setdefault(txn.scn, []).extend((c.table, c.before, c.after) for c in txn.changes)
        gtids[txn.scn] = txn.gtid
    got = [(gtids[scn], rows) for scn, rows in by_scn.items() if rows]
    assert [g for g, _ in got] == [g for g, _ in expected], "same transactions, once, in order"
    assert got == expected, "same row images"
    scns = list(by_scn)
    assert scns == sorted(scns)
    assert len(expected) > TXNS * 0.9


def _wait_and_read(directory: Path, end: tuple[str, int], proc: Any, log: Path) -> list[Any]:
    target = (int(end[0].rsplit(".", 1)[1]), end[1])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"replicator exited: {log.read_text()[-3000:]}"
        try:
            reader = EventBuffer.open_read_only(directory)
        except BufferStateError:  # every kill came before the buffer was created: not yet
            time.sleep(0.2)
            continue
        try:
            last = reader.last_scn
            if last is not None and (last.log_index, last.log_pos) >= target:
                return read_all(reader)
        finally:
            reader.close()
        time.sleep(0.2)
    raise AssertionError(f"replicator did not catch up to {end}: {log.read_text()[-3000:]}")
