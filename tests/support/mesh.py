"""Three datacenters in a full mesh: each runs ``drc run`` (replicator + pull API + a channel
from each other datacenter) as a process of its own, so a test can kill -9 one and start it
again; writers that update shared rows and log each transaction they commit.

The workload's tables (``mesh_db``), the same on every datacenter:

    shared   lww on updated_at, ``hits`` a counter (delta_columns): every transaction adds 1
             to one random row, so the sum of hits is the number of transactions committed
             anywhere, on every datacenter, only if each was applied exactly once everywhere
    ledger   one row per transaction (id = seq * 10 + the datacenter's number): disjoint keys,
             so each datacenter's capture says what it wrote and what it applied
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from drc.client.status import fetch_status
from drc.core.errors import DrcError
from drc.core.scn import SCN
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import ServerInfo
from tests.support.servers import connect, master_position, query, retrying

SCHEMA = "mesh_db"
SHARED_ROWS = 20
TABLES = (
    "CREATE TABLE shared (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, "
    "hits BIGINT NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL "
    "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))",
    "CREATE TABLE ledger (id BIGINT PRIMARY KEY, dc VARCHAR(8) NOT NULL, seq INT NOT NULL)",
)
SEED = "INSERT INTO shared (id, v, hits, updated_at) SELECT seq, 'seed', 0, '2020-01-01' FROM "


def seed_sql() -> str:
    """The shared rows every datacenter starts with (written out of the binlog, identical)."""
    return f"{SEED}seq_1_to_{SHARED_ROWS}"


@dataclass
class MeshWriter:
    """Transactions on one datacenter until stopped: each updates one random shared row (its
    ``v`` to this writer's mark, ``hits`` + 1) and inserts its ledger row; ``written`` holds the
    ledger ids of those that committed, in commit order. ``skew_s``: the session's clock moved
    by that much before each transaction (``SET timestamp``), as a host clock off by it would."""

    server: ServerInfo
    number: int
    seed: int
    skew_s: float = 0.0
    pause_s: float = 0.01
    written: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        rng = random.Random(self.seed)
        try:
            conn = connect(self.server, autocommit=False, database=SCHEMA)
            with conn.cursor() as cur:
                seq = 0
                while not self.stop.is_set():
                    seq += 1
                    ledger = seq * 10 + self.number
                    row = rng.randint(1, SHARED_ROWS)
                    retrying(partial(self._transaction, conn, cur, ledger, seq, row))
                    self.written.append(ledger)
                    time.sleep(self.pause_s)
            conn.close()
        except BaseException as exc:  # the test thread reports it
            self.error = exc

    def _transaction(self, conn: Any, cur: Any, ledger: int, seq: int, row: int) -> None:
        try:
            self._clock(cur)
            cur.execute(
                "UPDATE shared SET v = %s, hits = hits + 1 WHERE id = %s",
                (f"{self.server.datacenter}-{ledger}", row),
            )
            cur.execute(
                "INSERT INTO ledger VALUES (%s, %s, %s)", (ledger, self.server.datacenter, seq)
            )
            conn.commit()
        except BaseException:
            conn.rollback()
            raise

    def _clock(self, cur: Any) -> None:
        if self.skew_s:
            # SET timestamp freezes the session's clock: set it afresh from the real one
            # (SYSDATE ignores it) before each transaction.
            cur.execute("SET timestamp = UNIX_TIMESTAMP(SYSDATE(6)) + %s", (self.skew_s,))

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "the writer did not stop"
        assert self.error is None, self.error


def rows(server: ServerInfo, table: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in query(server, f"SELECT * FROM {SCHEMA}.{table} ORDER BY id")]


def has_triggers(server: ServerInfo) -> bool:
    """Whether the lww guard gave ``shared`` its conflict triggers (writes before would not be
    dated for lww)."""
    found = query(
        server,
        "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s "
        "AND EVENT_OBJECT_TABLE = 'shared'",
        (SCHEMA,),
    )
    return int(found[0][0]) == 3


class Nodes:
    """One ``drc run`` process per datacenter (config paths by datacenter), logs in ``logs``."""

    def __init__(self, configs: dict[str, Path], ports: dict[str, int], logs: Path) -> None:
        self.configs, self.ports, self.logs = configs, ports, logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, dc: str) -> None:
        argv = [sys.executable, "-m", "drc.cli", "run", "--config", str(self.configs[dc])]
        with open(self.logs / f"{dc}.log", "ab") as log:
            self.procs[dc] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill_9(self, dc: str) -> None:
        proc = self.procs.pop(dc)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> None:
        for dc in list(self.procs):
            proc = self.procs.pop(dc)
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)

    def status(self, dc: str) -> dict[str, Any] | None:
        try:
            return fetch_status(f"http://127.0.0.1:{self.ports[dc]}", timeout=5)
        except DrcError:
            return None

    def check_running(self) -> None:
        for dc, proc in self.procs.items():
            assert proc.poll() is None, f"{dc} exited:\n{self.tail(dc)}"

    def tail(self, dc: str) -> str:
        return (self.logs / f"{dc}.log").read_text(errors="replace")[-3000:]

    def wait_captured(self, servers: dict[str, ServerInfo], timeout: float = 60.0) -> None:
        """Until every replicator's buffer reaches its source's binlog position as of now (so
        each capture holds what its channels applied) and every channel is running."""
        ends = {dc: master_position(server) for dc, server in servers.items()}

        def ready() -> bool:
            self.check_running()
            for dc, (log_file, log_pos) in ends.items():
                found = self.status(dc)
                if found is None or found["buffer"]["last_scn"] is None:
                    return False
                last = SCN.parse(found["buffer"]["last_scn"])
                if (last.log_index, last.log_pos) < (int(log_file.rsplit(".", 1)[1]), log_pos):
                    return False
                if any(c["state"] != "running" for c in found["channels"]):
                    return False
            return True

        assert wait_for(ready, timeout, interval=0.5), {dc: self.tail(dc) for dc in self.procs}
