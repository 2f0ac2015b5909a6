"""kill -9 of the apply process at random moments loses nothing and applies nothing twice.

The channel runs in a subprocess (``python -m drc.apply``) and is killed and restarted while
dc1 takes a write workload (counters incremented by updates, inserts, deletes, multi-statement
and big fragmented transactions, DDL). Afterwards dc2 equals dc1 row for row, no idempotent fix
was ever needed (nothing was re-applied), and the checkpoint SCNs the channel wrote into dc2's
binlog never went backwards (a re-applied range would have rewritten an older one).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from drc.replicator.assembler import FragmentLimits
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import apply_process_config, apply_user, assert_same, serving
from tests.support.capture import checkpoint_scns
from tests.support.servers import connect, drop_everywhere, execute, position
from tests.support.waits import mark_end, wait_end

SCHEMA = "apply_crash"
TXNS = 1000
KILLS = 5


def _config(tmp: Path, dc2: ServerInfo, url: str, workers: int) -> Path:
    return apply_process_config(tmp, dc2, url, "crash", [f"{SCHEMA}.*"],
                                max_txns_per_commit=50, max_commit_delay_ms=20,
                                parallel_workers=workers)  # fmt: skip


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "drc.apply", "--config", str(config), "--stats-every", "0.2"]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _workload(server: ServerInfo, kills_done: threading.Event, done: threading.Event) -> None:
    """At least TXNS transactions, and on until every kill has happened (a fast host would
    otherwise finish writing before the later kills and test only the catch-up)."""
    rng = random.Random(11)
    conn = connect(server, autocommit=False)
    ids: list[int] = []
    next_id = 1
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {SCHEMA}.counter VALUES (1, 0), (2, 0), (3, 0)")
        n = 0
        while n < TXNS or not kills_done.is_set():
            roll = rng.random()
            if n == TXNS // 2:
                cur.execute(f"ALTER TABLE {SCHEMA}.t ADD COLUMN extra INT NOT NULL DEFAULT 1")
            if roll < 0.3 or len(ids) < 10:
                count = 800 if n % 250 == 100 else rng.randint(1, 5)  # some big transactions
                rows = [(next_id + k, f"v{next_id + k}") for k in range(count)]
                cur.executemany(f"INSERT INTO {SCHEMA}.t (id, v) VALUES (%s, %s)", rows)
                ids += [r[0] for r in rows]
                next_id += count
            elif roll < 0.7:
                cur.execute(f"UPDATE {SCHEMA}.counter SET n = n + 1 WHERE id = %s",
                            (rng.randint(1, 3),))  # fmt: skip
            elif roll < 0.85:
                cur.execute(
                    f"DELETE FROM {SCHEMA}.t WHERE id = %s", (ids.pop(rng.randrange(len(ids))),)
                )
            else:
                cur.execute(f"UPDATE {SCHEMA}.counter SET n = n + 100 WHERE id = 1")
                cur.execute(
                    f"UPDATE {SCHEMA}.t SET v = %s WHERE id = %s", (f"m{n}", rng.choice(ids))
                )
                cur.execute(f"UPDATE {SCHEMA}.counter SET n = n + 1000 WHERE id = 2")
            conn.commit()
            n += 1
            time.sleep(0.003)
    conn.close()
    done.set()


def _fixes(log: Path) -> int:
    """Idempotent fixes over all runs (each run's highest count; counters restart per run)."""
    total, run_max = 0, 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and line.endswith("}"):  # a killed process may cut its last
            fixes = json.loads(line)["idempotent_fixes"]
            if fixes < run_max:  # a new process
                total += run_max
            run_max = fixes
        elif "resumes after" in line:
            total, run_max = total + run_max, 0
    return total + run_max


def _wait_resumed(log: Path, runs: int, timeout: float = 60.0) -> None:
    """Until ``runs`` processes have read their checkpoint (a kill before is no test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and log.read_text(errors="replace").count("resumes after") >= runs:
            return
        time.sleep(0.05)
    raise AssertionError(f"apply process {runs} did not start: {log.read_text()[-2000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 3], ids=["one-connection", "parallel"])
def test_kill_9_at_random_moments_loses_and_repeats_nothing(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, workers: int
) -> None:
    """With ``parallel_workers`` a kill may also fall between a group's parts and its
    checkpoint (drc.apply.parallel): what the parts committed is skipped on restart."""
    drop_everywhere(SCHEMA, dc1, dc2)
    apply_user(dc2)
    start, target_start = position(dc1), position(dc2)
    execute(dc1, f"CREATE DATABASE {SCHEMA}",
            f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40))",
            f"CREATE TABLE {SCHEMA}.counter (id INT PRIMARY KEY, n INT NOT NULL)")  # fmt: skip
    log = tmp_path / "apply.log"
    limits = FragmentLimits(rows=200)
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start, fragments=limits) as (_, url):
        config = _config(tmp_path, dc2, url, workers)
        kills_done, done = threading.Event(), threading.Event()
        writer = threading.Thread(target=_workload, args=(dc1, kills_done, done), daemon=True)
        rng = random.Random(20261122)
        proc = _start(config, log)
        writer.start()
        during = 0  # kills while the workload was still writing
        try:
            for run in range(KILLS):
                _wait_resumed(log, run + 1)  # a loaded machine starts a process slowly
                time.sleep(rng.uniform(0.3, 1.2))
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                during += not done.is_set()
                proc = _start(config, log)
            kills_done.set()
            writer.join(timeout=300)
            assert done.is_set(), "the workload did not finish (see its thread's error above)"
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), timeout=120)
            assert proc.poll() is None, log.read_text()[-3000:]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    resumed = {line.rsplit(" ", 1)[1] for line in log.read_text().splitlines()
               if "resumes after" in line}  # fmt: skip
    assert during >= 2 and len(resumed) >= 3, f"kills too early or late: {during}, {resumed}"
    assert_same(dc1, dc2, SCHEMA)
    assert _fixes(log) == 0, f"something was applied twice: {log.read_text()[-3000:]}"
    scns = checkpoint_scns(dc2, target_start)
    assert len(scns) > 20
    back = [(a, b) for a, b in zip(scns, scns[1:], strict=False) if b < a]
    assert not back, f"a checkpoint went back: {back}"
