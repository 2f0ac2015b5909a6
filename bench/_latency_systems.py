"""What bench_latency.py compares: DRC and native MariaDB circular replication on one sandbox,
and how it measures them (arrival polling, CPU from /proc).

Both systems replicate the same two servers, one after the other, never at once:

- DRC: a fresh ``drc run`` per datacenter (new buffer directories, capture from the current
  position, no channel checkpoint), stopped at the end of its phase.
- native: each server a GTID replica of the other (one SQL thread each, log_slave_updates, a
  server ignores its own events coming back), started at the other's current GTID position
  and stopped at the end of its phase.

Arrival is measured the same way for both: a poller on each target reads the probe rows of the
other side a few ms apart, and a probe's latency is the server's NOW(6) at the first poll that
sees it, minus half the time since the poll before (the row became visible between the two),
minus its ``created_at`` (NOW(6) on the source). Both servers share the host's clock. (A
replica's SQL thread reports the source event's time for NOW(), so a trigger cannot stamp
native arrival.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pymysql

from drc.sandbox.demo import start_nodes, wait_healthy, write_configs
from drc.sandbox.procs import free_port, wait_for
from drc.sandbox.sandbox import ServerInfo

PROBE_TABLE = (
    "CREATE TABLE lat.probe (id BIGINT PRIMARY KEY, origin VARCHAR(8), "
    "created_at DATETIME(6) NOT NULL)"
)
_TICK = os.sysconf("SC_CLK_TCK")


def connect(server: ServerInfo, **kw: object) -> pymysql.connections.Connection:
    options: dict[str, object] = {"autocommit": True, **kw}
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, **options
    )


def sql(server: ServerInfo, *statements: str) -> list[tuple[object, ...]]:
    """Run statements on a fresh connection; the last one's rows."""
    conn = connect(server)
    rows: list[tuple[object, ...]] = []
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
            rows = list(cur.fetchall())
    conn.close()
    return rows


class Native:
    """Circular native replication between the two servers."""

    name = "native"

    def __init__(self, dc1: ServerInfo, dc2: ServerInfo) -> None:
        self.servers = (dc1, dc2)

    def start(self) -> None:
        for replica, source in (self.servers, self.servers[::-1]):
            pos = sql(source, "SELECT @@gtid_binlog_pos")[0][0]
            conn = connect(replica)
            with conn.cursor() as cur:
                cur.execute("STOP SLAVE")
                cur.execute("RESET SLAVE ALL")
                cur.execute("SET GLOBAL gtid_slave_pos = %s", (pos,))
                cur.execute(
                    "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, "
                    "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos",
                    (source.host, source.port, source.user, source.password),
                )
                cur.execute("START SLAVE")
            conn.close()

    def pids(self) -> list[int]:
        return [s.pid for s in self.servers]

    def stop(self) -> None:
        for server in self.servers:
            sql(server, "STOP SLAVE", "RESET SLAVE ALL")


class Drc:
    """One ``drc run`` per datacenter, fresh for each phase."""

    def __init__(
        self,
        description: object,
        dc1: ServerInfo,
        dc2: ServerInfo,
        work: Path,
        drc_applied: str = "full",
        transport: str = "stream",
        roles: str = "one",
    ) -> None:
        """``drc_applied``: the nodes' ``[replicator] drc_applied`` (how the echo of what
        their channels applied is captured), ``transport`` their channels' (stream or pull);
        ``roles``: "one" process per datacenter (``drc run``), or "split" into ``--role
        replicator`` and ``--role apply`` (capture and API off the channels' GIL); each named
        in the system's name unless the default."""
        modes = [m for m in (drc_applied, transport, roles) if m not in ("full", "stream", "one")]
        self.name = " ".join(["DRC", *modes])
        self.drc_applied = drc_applied
        self.transport = transport
        self.roles = roles
        self.description = description
        self.servers = (dc1, dc2)
        self.work = work
        self.runs = 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.configs: dict[str, Path] = {}

    def start(self) -> None:
        self.runs += 1
        nodes = self.work / f"nodes-{self.drc_applied}-{self.transport}-{self.roles}-{self.runs}"
        for server in self.servers:  # a fresh buffer: channels start from its beginning
            sql(server, "SET SESSION sql_log_bin = 0", "DROP DATABASE IF EXISTS drc")
        configs = write_configs(
            self.description,  # type: ignore[arg-type]
            nodes,
            schema="*",
            drc_applied=self.drc_applied,
            transport=self.transport,
        )
        if self.roles == "split":
            self.procs = {}
            for dc, path in configs.items():
                text = path.read_text().replace("[api]\n", f"[api]\napply_port = {free_port()}\n")
                path.write_text(text)
                for role in ("replicator", "apply"):
                    with open(nodes / f"{dc}-{role}.log", "ab") as log:
                        argv = [sys.executable, "-m", "drc.cli", "run", "--config", str(path),
                                "--role", role]  # fmt: skip
                        self.procs[f"{dc}-{role}"] = subprocess.Popen(
                            argv, stdout=log, stderr=log, start_new_session=True
                        )
        else:
            self.procs = start_nodes(configs, nodes)
        wait_healthy(configs)
        self.configs = configs

    def captured(self) -> tuple[int, int]:
        """(transactions stored, of them stored without rows) by both nodes' capture."""
        import tomllib

        from drc.client.status import fetch_status

        found = [0, 0]
        for path in self.configs.values():
            port = tomllib.loads(path.read_text())["api"]["port"]
            capture = fetch_status(f"http://127.0.0.1:{port}", timeout=5)["capture"]
            found[0] += int(capture["transactions"])
            found[1] += int(capture["drc_applied_markers"])
        return found[0], found[1]

    def pids(self) -> list[int]:
        return [s.pid for s in self.servers] + [p.pid for p in self.procs.values()]

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            proc.wait(timeout=60)
        self.procs = {}


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes (all their threads)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICK


class Prober:
    """Inserts probe rows on ``origin`` (ids ``base + 2k + parity``) a few times a second."""

    def __init__(self, origin: ServerInfo, base: int, parity: int) -> None:
        self.origin, self.base, self.parity = origin, base, parity
        self.sent = 0

    def insert(self, cur: object) -> None:
        cur.execute(  # type: ignore[attr-defined]
            "INSERT INTO lat.probe (id, origin, created_at) VALUES (%s, %s, NOW(6))",
            (self.base + self.sent * 2 + self.parity, self.origin.datacenter),
        )
        self.sent += 1

    def run(self, seconds: float, per_second: float) -> None:
        conn = connect(self.origin)
        deadline = time.monotonic() + seconds
        with conn.cursor() as cur:
            while time.monotonic() < deadline:
                self.insert(cur)
                time.sleep(1 / per_second)
        conn.close()

    def fence(self) -> None:
        """One last probe, written after the load: once it arrives, everything before has."""
        conn = connect(self.origin)
        with conn.cursor() as cur:
            self.insert(cur)
        conn.close()


class Poller(threading.Thread):
    """Reads ``prober``'s rows on ``target`` every ``interval_s`` until all have arrived."""

    def __init__(self, target: ServerInfo, prober: Prober, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.target, self.prober, self.interval_s = target, prober, interval_s
        self.skip = prober.sent  # probes sent before this poller: not its to wait for
        self.latencies: list[float] = []
        self.done = threading.Event()
        self.stop = threading.Event()

    @property
    def arrived(self) -> int:
        return len(self.latencies)

    @property
    def expected(self) -> int:
        return self.prober.sent - self.skip

    def run(self) -> None:
        conn = connect(self.target)
        last = self.prober.base + (self.skip - 1) * 2 + self.prober.parity
        previous: float | None = None
        with conn.cursor() as cur:
            while not self.stop.is_set():
                now = time.time()  # the servers' clock too: they share the host
                cur.execute(
                    "SELECT id, TIMESTAMPDIFF(MICROSECOND, created_at, NOW(6)) FROM lat.probe "
                    "WHERE id > %s AND origin = %s ORDER BY id",
                    (last, self.prober.origin.datacenter),
                )
                half_gap_ms = 0.0 if previous is None else (now - previous) * 500
                for ident, age_us in cur.fetchall():
                    self.latencies.append(max(0.0, int(age_us) / 1000 - half_gap_ms))
                    last = ident
                previous = now
                if self.done.is_set() and self.arrived >= self.expected:
                    break
                time.sleep(self.interval_s)
        conn.close()


def wait_arrived(pollers: list[Poller], timeout: float) -> bool:
    for poller in pollers:
        poller.done.set()
    ok = wait_for(lambda: all(p.arrived >= p.expected for p in pollers), timeout, 0.05)
    for poller in pollers:
        poller.stop.set()
        poller.join()
    return ok
