"""A replicator group: failover time and the apply-side lag spike over leader kills, and a
follower's copy throughput against the leader's capture.

Failover (``--part failover``): a fresh two-datacenter sandbox; three members of dc1's group
(2 s session timeout), an apply channel into dc2 reading the group through ``zk://``, and a
probe inserting ``--rate`` single-row transactions a second on dc1, each recording its commit
time. dc2 is polled every 50 ms; a row's lag is the time from its commit on dc1 to the poll
that first saw it on dc2 (so +-50 ms). The leader is killed with SIGKILL ``--kills`` times,
``--gap`` seconds apart, and restarted (``--fault stop``: paused with SIGSTOP for ``--pause``
seconds instead, a hung host as ZooKeeper sees it; once continued it finds itself deposed,
exits, and is restarted). Reported: failover time (kill to a new member answering
/v1/status as leader); per kill, the largest lag of rows committed from 2 s before it until
2 s before the next (rows committed just before a kill wait for the failover too), and the
time back to normal: from the kill until dc2 shows the first row from which every row
committed in the next 2 s has a normal lag (at most twice the steady-state p99 and at least
p99 + 100 ms); the lag over time around a kill (the largest lag per second of commit time,
median over kills); all against the steady state: the lag of the rows committed from 8 s
before the first kill on but not from 2 s before to 6 s after any kill.

Throughput (``--part throughput``): on a fresh one-datacenter sandbox, N transactions are
written first; then member r1 starts alone from the position before them (it leads and
captures the backlog from the binlog), and once it holds everything member r2 starts empty
and copies the leader's buffer and history through the pull API. Each rate is transactions
over the time from its process start to its buffer's last SCN reaching the end. Usage:

    python bench/bench_group.py [--part all|failover|throughput] [--kills 10] [--rate 100]
                                [--fault kill|stop] [--pause 5] [--txns 20000] [--rows 5]
                                [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drc.eventbuffer import EventBuffer  # noqa: E402
from drc.sandbox.group import member_config, start_member  # noqa: E402
from drc.sandbox.procs import free_port, start_detached, stop_pid, wait_for  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

DB = "bench_grp"
POLL_S = 0.05
STEADY_S = (
    8.0  # the steady state: rows committed from this long before the 1st kill, away from kills
)
PROFILE_S = 6  # the lag profile covers this many seconds after each kill
PRE_S = 2.0  # ... and this many before it (rows committed then wait for the failover too)
STAY_S = 2.0  # back to normal: the lag stays normal for this long


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


def fresh_table(server: ServerInfo) -> None:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(60), n INT)")
    conn.close()


def write(server: ServerInfo, txns: int, rows: int) -> None:
    fresh_table(server)
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        for t in range(txns):
            values = [(t * rows + k, f"row {t} {k} " + "x" * 30, k) for k in range(rows)]
            cur.executemany(f"INSERT INTO {DB}.t VALUES (%s, %s, %s)", values)
            conn.commit()
    conn.close()


def last_scn_at(buffer_dir: Path) -> tuple[int, int] | None:
    try:
        reader = EventBuffer.open_read_only(buffer_dir)
    except Exception:
        return None
    try:
        last = reader.last_scn
        return None if last is None else (last.log_index, last.log_pos)
    finally:
        reader.close()


def reached(buffer_dir: Path, end: tuple[int, int]) -> bool:
    last = last_scn_at(buffer_dir)
    return last is not None and last >= end


@dataclass
class Member:
    member_id: str
    config: Path
    log: Path
    url: str
    pid: int = 0

    def start(self) -> None:
        self.pid = start_member(self.config, self.log)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.reap()

    def reap(self) -> None:
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def role(self) -> str | None:
        try:
            response = httpx.get(self.url + "/v1/status", timeout=1.0)
            return str(response.json().get("role")) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None


def make_member(
    base: Path, server: ServerInfo, zk: str, member: str, dc: str, start: str = "current"
) -> Member:
    port = free_port()
    config = member_config(
        base / member, datacenter=dc, member_id=member, source_host=server.host,
        source_port=server.port, user=server.user, password=server.password, zookeeper=zk,
        port=port, start_from=start,
    )  # fmt: skip
    return Member(member, config, base / member / "replicator.log", f"http://127.0.0.1:{port}")


def timed_member(
    base: Path, server: ServerInfo, zk: str, member: str, start: str, end: tuple[int, int],
    started: list[tuple[int, str]],
) -> float:  # fmt: skip
    made = make_member(base, server, zk, member, "bench", start)
    began = time.monotonic()
    made.start()
    started.append((made.pid, str(made.config)))
    while not reached(base / member / "buffer", end):
        time.sleep(0.05)
    return time.monotonic() - began


def throughput(args: argparse.Namespace) -> None:
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
        print(f"\n{args.txns} txns x {args.rows} rows")
        print(f"leader captures the backlog: {leader_s:.1f} s, {lead:,.0f} txn/s")
        print(f"follower copies it:          {follower_s:.1f} s, {follow:,.0f} txn/s")
        print(f"follower / leader: {follow / lead:.2f}x")
    finally:
        for pid, config in started:
            stop_pid(pid, config)
        box.down()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class Probe:
    """Rows committed on dc1 (id -> commit time) and first seen on dc2 (id -> poll time)."""

    committed: dict[int, float] = field(default_factory=dict)
    seen: dict[int, float] = field(default_factory=dict)
    stop_writing: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def write(self, server: ServerInfo, rate: float) -> None:
        conn = connect(server)
        n = 0
        began = time.monotonic()
        with conn.cursor() as cur:
            while not self.stop_writing.is_set():
                n += 1
                cur.execute(f"INSERT INTO {DB}.t VALUES (%s, 'probe', 0)", (n,))
                self.committed[n] = time.monotonic()
                time.sleep(max(0.0, began + n / rate - time.monotonic()))
        conn.close()

    def watch(self, server: ServerInfo) -> None:
        conn = connect(server)
        last = 0
        with conn.cursor() as cur:
            while not self.stop.is_set():
                cur.execute(f"SELECT id FROM {DB}.t WHERE id > %s", (last,))
                now = time.monotonic()
                for (row_id,) in cur.fetchall():
                    self.seen.setdefault(row_id, now)
                    last = max(last, row_id)
                time.sleep(POLL_S)
        conn.close()

    def lags(self, start: float, end: float) -> list[float]:
        """Lag of each row committed in [start, end) that reached dc2."""
        seen = self.seen
        return [seen[i] - t for i, t in self.committed.items() if start <= t < end and i in seen]


def apply_config(directory: Path, dc2: ServerInfo, url: str) -> Path:
    secret = directory / "dc2.password"
    secret.write_text(dc2.password)
    secret.chmod(0o600)
    config = directory / "dc2-apply.toml"
    q = json.dumps
    config.write_text(
        f"""[datacenter]
name = "dc2"
[source]
host = {q(dc2.host)}
port = {dc2.port}
user = {q(dc2.user)}
password_file = {q(str(secret))}
[replicator]
buffer_dir = {q(str(directory / "unused"))}
[[channels]]
name = "bench_grp"
origin = "dc1"
remote = [{q(url)}]
tables = ["{DB}.*"]
wait_ms = 200
max_commit_delay_ms = 20
"""
    )
    return config


def leader_of(members: list[Member], exclude: Member | None = None) -> Member | None:
    leaders = [m for m in members if m is not exclude and m.role() == "leader"]
    return leaders[0] if len(leaders) == 1 else None


def failover(args: argparse.Namespace) -> None:
    directory = Path(tempfile.mkdtemp(prefix="drc-bgfo-"))
    box = Sandbox(directory)
    members: list[Member] = []
    apply_pid = 0
    probe = Probe()
    try:
        description = box.up(datacenters=2)
        dc1, dc2 = description.servers
        zk = description.zookeeper.connect
        fresh_table(dc1)
        fresh_table(dc2)
        members = [make_member(directory, dc1, zk, f"r{n}", "bench") for n in (1, 2, 3)]
        for member in members:
            member.start()
        if not wait_for(lambda: leader_of(members) is not None, 60, 0.2):
            raise SystemExit("no leader elected")
        config = apply_config(directory, dc2, f"zk://{zk}/drc-sandbox/bench")
        argv = [sys.executable, "-m", "drc.apply", "--config", str(config)]
        apply_pid = start_detached(argv, directory / "apply.log")
        threads = [
            threading.Thread(target=probe.write, args=(dc1, args.rate), daemon=True),
            threading.Thread(target=probe.watch, args=(dc2,), daemon=True),
        ]
        for thread in threads:
            thread.start()
        if not wait_for(lambda: bool(probe.seen), 120, 0.2):
            raise SystemExit(f"the apply channel applies nothing: see {directory / 'apply.log'}")
        time.sleep(args.warmup)  # from the first row applied: the steady state
        kills, times = kill_leaders(members, args.kills, args.gap, args.fault, args.pause)
        end = time.monotonic()
        probe.stop_writing.set()
        threads[0].join(timeout=30)
        wait_for(lambda: len(probe.seen) >= len(probe.committed), 120, 0.5)
        probe.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        report(probe, kills, times, end, args)
    finally:
        probe.stop_writing.set()
        probe.stop.set()
        if apply_pid:
            stop_pid(apply_pid, str(directory / "dc2-apply.toml"))
        for member in members:
            stop_pid(member.pid, str(member.config))
        box.down()
        if args.keep:
            print(f"kept {directory} (members' logs: */replicator.log)")
        else:
            shutil.rmtree(directory, ignore_errors=True)


def kill_leaders(
    members: list[Member], kills: int, gap: float, fault: str = "kill", pause: float = 5.0
) -> tuple[list[float], list[float]]:
    """Kill the leader ``kills`` times (``fault`` "stop": SIGSTOP it for ``pause`` seconds,
    after which it finds itself deposed and exits); the fault instants and each failover's
    time (to another member answering as leader)."""
    at: list[float] = []
    took: list[float] = []
    for _ in range(kills):
        leader = leader_of(members)
        while leader is None:
            time.sleep(0.1)
            leader = leader_of(members)
        killed = time.monotonic()
        if fault == "stop":
            os.kill(leader.pid, signal.SIGSTOP)
        else:
            leader.kill()
        at.append(killed)
        while leader_of(members, exclude=leader) is None:
            time.sleep(0.05)
        took.append(time.monotonic() - killed)
        print(f"{time.strftime('%T')} {fault} of {leader.member_id}: {took[-1]:.2f} s", flush=True)
        if fault == "stop":
            time.sleep(max(0.0, killed + pause - time.monotonic()))
            os.kill(leader.pid, signal.SIGCONT)
            leader.reap()  # deposed: it stops by itself
        leader.start()
        time.sleep(max(0.0, killed + gap - time.monotonic()))
    return at, took


def back_to_normal(probe: Probe, kill: float, end: float, normal: float) -> float | None:
    """Seconds from ``kill`` until dc2 shows the first row from which every row committed in
    the next STAY_S seconds reached it within ``normal`` (rows committed before ``end``);
    None if the lag was not back to normal by then."""
    timed = sorted(
        (t, probe.seen[i] - t)
        for i, t in probe.committed.items()
        if kill <= t < end and i in probe.seen
    )
    for first, (t, lag) in enumerate(timed):
        if t + STAY_S > end:
            return None
        stay = [lag for u, lag in timed[first:] if u < t + STAY_S]
        if max(stay) <= normal:
            return t + lag - kill
    return None


def profile(probe: Probe, kills: list[float]) -> list[tuple[int, float, float]]:
    """Per second of commit time around a kill (-PRE_S .. PROFILE_S): the median over kills
    of the largest lag of the rows committed in that second, and the largest of all."""
    out = []
    for second in range(-int(PRE_S), PROFILE_S):
        peaks = [max(probe.lags(k + second, k + second + 1) or [0.0]) for k in kills]
        out.append((second, statistics.median(peaks), max(peaks)))
    return out


def steady_lags(probe: Probe, kills: list[float], end: float) -> list[float]:
    """Sorted lags of the rows committed away from every kill (from STEADY_S before the first
    kill, outside [kill - PRE_S, kill + PROFILE_S)): the steady state."""
    return sorted(
        probe.seen[i] - t
        for i, t in probe.committed.items()
        if kills[0] - STEADY_S <= t < end
        and i in probe.seen
        and not any(k - PRE_S <= t < k + PROFILE_S for k in kills)
    )


def report(
    probe: Probe, kills: list[float], took: list[float], end: float, args: argparse.Namespace
) -> None:
    before = steady_lags(probe, kills, end)
    p99 = before[int(0.99 * (len(before) - 1))] if before else 0.0
    median = statistics.median(before) if before else 0.0
    normal = max(2 * p99, p99 + 0.1)
    # A kill holds up the rows committed shortly before it too (not yet on dc2): each kill's
    # window starts PRE_S before it and ends PRE_S before the next.
    bounds = [*kills, end + PRE_S]
    windows = [(bounds[i], bounds[i + 1] - PRE_S) for i in range(len(kills))]
    peaks = [max(probe.lags(a - PRE_S, b) or [0.0]) for a, b in windows]
    recovered = [back_to_normal(probe, a, b, normal) for a, b in windows]
    lost = len(probe.committed) - len(probe.seen)
    what = "kills (SIGKILL)" if args.fault == "kill" else f"pauses (SIGSTOP, {args.pause:.0f} s)"
    print(f"\n{len(kills)} leader {what}, {args.gap:.0f} s apart, probe {args.rate:.0f} txn/s")
    print("| | min | median | max |")
    print("| --- | ---: | ---: | ---: |")
    back = [r for r in recovered if r is not None]
    rows = [("failover time", took), ("apply lag peak around a kill", peaks)]
    if back:
        rows.append(
            (f"kill to lag back to normal (<= {normal * 1000:.0f} ms for {STAY_S:.0f} s)", back)
        )
    for what, values in rows:
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"| {what} (s) | {low:.2f} | {mid:.2f} | {high:.2f} |")
    if len(back) < len(recovered):
        print(f"{len(recovered) - len(back)} kill(s) not back to normal before the next")
    print("\n| commit time from the kill (s) | largest lag, median of kills (s) | largest (s) |")
    print("| ---: | ---: | ---: |")
    for second, mid, high in profile(probe, kills):
        print(f"| {second} to {second + 1} | {mid:.2f} | {high:.2f} |")
    print(
        f"\nsteady-state lag ({len(before)} rows committed away from the kills): median "
        f"{median * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
    )
    print(f"rows committed {len(probe.committed)}, not seen on dc2: {lost}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("all", "failover", "throughput"), default="all")
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--gap", type=float, default=12.0, help="seconds between kills")
    parser.add_argument(
        "--fault", choices=("kill", "stop"), default="kill",
        help="kill -9 the leader, or pause it (SIGSTOP) for --pause seconds",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the failover sandbox's files")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds a paused leader stays")
    parser.add_argument("--rate", type=float, default=100.0, help="probe txn/s on dc1")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds before 1st kill")
    parser.add_argument("--txns", type=int, default=20000)
    parser.add_argument("--rows", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.txns, args.kills, args.warmup = 2000, 2, 5.0
    if args.part in ("all", "failover"):
        failover(args)
    if args.part in ("all", "throughput"):
        throughput(args)


if __name__ == "__main__":
    main()
