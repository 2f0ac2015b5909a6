"""End-to-end latency, and CPU per replicated transaction, under sustained two-way load: DRC
against native MariaDB circular replication on the same sandbox, same load, same invocation.

A fresh two-datacenter sandbox; for each rate of the sweep, DRC then native replication
(bench/_latency_systems.py) replicate both servers into each other while sysbench
oltp_write_only runs on both sides at once at that rate (its own schema per side, replicated to
the other) and each side inserts probe rows (``created_at = NOW(6)``) a few times a second. A
poller on each side reads the other side's probes a few ms apart; latency = arrival - creation
on the host's one clock. After the load a last probe on each side is waited for: then
everything before it has arrived. CPU = utime + stime from /proc of both MariaDB servers and,
for DRC, both ``drc run`` processes, from the load's start to that last arrival, divided by the
transactions replicated (sysbench's on both sides, probes included).

    python bench/bench_latency.py [--rates 200,300,400,500] [--seconds 30] [--profile DIR]
        [--drc-applied full|marker|full,marker] [--transport stream|pull|stream,pull]
        [--roles one|split|one,split]

``--drc-applied full,marker`` runs DRC twice per rate, back to back, with each value of the
nodes' ``[replicator] drc_applied`` (the echo of applied transactions captured with its rows,
or as a marker without them), and reports the nodes' CPU per transaction of each.
``--transport stream,pull`` likewise with each value of the channels' ``transport`` (one
long-lived GET /v1/stream, or a pull per batch). ``--roles one,split``: each datacenter's DRC
as one ``drc run``, then as two (``--role replicator`` and ``--role apply``, no shared GIL).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _latency_systems import (  # noqa: E402
    PROBE_TABLE,
    Drc,
    Native,
    Poller,
    Prober,
    cpu_seconds,
    sql,
    wait_arrived,
)

from drc.sandbox.procs import wait_for  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402

SB_DBS = ("sb_dc1", "sb_dc2")
ARRIVAL_TIMEOUT_S = 300


@dataclass
class Phase:
    system: str
    rate: int
    tps: tuple[float, float] = (0.0, 0.0)
    latencies: dict[str, list[float]] = field(default_factory=dict)  # "dc1 -> dc2": ms
    cpu_s: float = 0.0
    server_cpu_s: float = 0.0  # of it, the two MariaDB servers
    transactions: int = 0
    captured: tuple[int, int] = (0, 0)  # DRC: transactions stored, of them without rows
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at start and end
    complete: bool = True

    @property
    def all_latencies(self) -> list[float]:
        return [v for values in self.latencies.values() for v in values]

    @property
    def cpu_us_per_txn(self) -> float:
        return self.cpu_s * 1e6 / max(1, self.transactions)

    @property
    def nodes_us_per_txn(self) -> float:
        """Of it, the DRC nodes' share (0 for native)."""
        return (self.cpu_s - self.server_cpu_s) * 1e6 / max(1, self.transactions)


def sysbench(
    server: ServerInfo, db: str, command: str, rate: int = 0, seconds: int = 0
) -> list[str]:
    return [
        "sysbench", "oltp_write_only", "--db-driver=mysql", f"--mysql-host={server.host}",
        f"--mysql-port={server.port}", f"--mysql-user={server.user}",
        f"--mysql-password={server.password}", f"--mysql-db={db}", "--tables=4",
        "--table-size=10000", "--threads=4", f"--rate={rate}", f"--time={seconds}",
        "--report-interval=0", command,
    ]  # fmt: skip


def prepare(native: Native, dc1: ServerInfo, dc2: ServerInfo) -> None:
    """The schemas and sysbench tables, created once (replicated natively, the fast way)."""
    native.start()
    sql(dc1, "CREATE DATABASE lat", PROBE_TABLE, *(f"CREATE DATABASE {db}" for db in SB_DBS))
    for server, db in ((dc1, "sb_dc1"), (dc2, "sb_dc2")):
        assert wait_for(lambda s=server, d=db: _tables(s, d) >= 0, 60), "schema did not replicate"
        subprocess.run(sysbench(server, db, "prepare"), check=True, capture_output=True)
    assert wait_for(lambda: _same(dc1, dc2), 300, interval=0.5), "prepare did not replicate"
    native.stop()


def _tables(server: ServerInfo, db: str) -> int:
    rows = sql(server, f"SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name='{db}'")
    return int(rows[0][0]) - 1  # type: ignore[call-overload]


def _same(dc1: ServerInfo, dc2: ServerInfo) -> bool:
    def counts(server: ServerInfo) -> list[object]:
        tables = [f"{db}.sbtest{n}" for db in SB_DBS for n in range(1, 5)]
        try:
            return [sql(server, f"SELECT COUNT(*) FROM {t}")[0][0] for t in tables]
        except Exception:  # noqa: BLE001 - not created there yet
            return [None]

    return counts(dc1) == counts(dc2)


def run_phase(system: Drc | Native, number: int, rate: int, args: argparse.Namespace) -> Phase:
    dc1, dc2 = system.servers
    system.start()
    base = number * 10_000_000
    probers = [Prober(dc1, base, 1), Prober(dc2, base, 2)]
    warm = [Poller(dc2, probers[0], 0.01), Poller(dc1, probers[1], 0.01)]
    for prober in probers:  # the path is open both ways before the load starts
        prober.fence()
    for poller in warm:
        poller.start()
    assert wait_arrived(warm, 120), f"{system.name} did not replicate a probe"
    phase = Phase(system.name, rate)
    pollers = [
        Poller(dc2, probers[0], args.poll_ms / 1000),
        Poller(dc1, probers[1], args.poll_ms / 1000),
    ]
    pids = system.pids()
    load_start = os.getloadavg()[0]
    servers = [s.pid for s in system.servers]
    cpu_before, server_before = cpu_seconds(pids), cpu_seconds(servers)
    for poller in pollers:
        poller.start()
    load = [
        subprocess.Popen(
            sysbench(s, db, "run", rate, args.seconds), stdout=subprocess.PIPE, text=True
        )
        for s, db in ((dc1, "sb_dc1"), (dc2, "sb_dc2"))
    ]
    profilers = _profile(system, args, number, rate)
    probing = [
        threading.Thread(target=p.run, args=(args.seconds, args.probes_per_second)) for p in probers
    ]
    for thread in probing:
        thread.start()
    outputs = [proc.communicate()[0] for proc in load]
    for thread in probing:
        thread.join()
    for prober in probers:
        prober.fence()
    phase.complete = wait_arrived(pollers, ARRIVAL_TIMEOUT_S)
    phase.cpu_s = cpu_seconds(pids) - cpu_before
    phase.server_cpu_s = cpu_seconds(servers) - server_before
    phase.load = (load_start, os.getloadavg()[0])
    if isinstance(system, Drc):
        phase.captured = system.captured()
    for proc in profilers:
        proc.wait()
    system.stop()
    phase.tps = (_count(outputs[0], "transactions:", 1), _count(outputs[1], "transactions:", 1))
    sent = sum(p.expected for p in pollers)
    phase.transactions = int(sum(_count(o, "transactions:", 0) for o in outputs)) + sent
    for poller in pollers:
        origin, target = poller.prober.origin.datacenter, poller.target.datacenter
        phase.latencies[f"{origin} -> {target}"] = poller.latencies
    return phase


def _profile(
    system: Drc | Native, args: argparse.Namespace, number: int, rate: int
) -> list[subprocess.Popen[bytes]]:
    """py-spy on each DRC node for the middle of the load (``--profile DIR``)."""
    if args.profile is None or not isinstance(system, Drc):
        return []
    out = Path(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    duration = max(5, args.seconds - 10)
    py_spy = str(Path(sys.executable).with_name("py-spy"))
    procs = []
    # Only the thread holding the GIL is sampled (--gil), so samples are Python CPU time. The
    # nodes do the same work: dc1's is drawn (SVG), dc2's kept as collapsed stacks to count.
    for (dc, proc), (fmt, suffix) in zip(
        system.procs.items(), (("flamegraph", "svg"), ("raw", "txt")), strict=False
    ):
        target = out / f"drc-{dc}-{rate}tps-{number}.{suffix}"
        argv = [py_spy, "record", "--pid", str(proc.pid), "--duration", str(duration)]
        argv += ["--rate", "100", "--gil", "--format", fmt, "--output", str(target)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def _count(output: str, label: str, which: int) -> float:
    """From sysbench's summary line ``transactions: N (R per sec.)``: N (0) or R (1)."""
    for line in output.splitlines():
        if label in line:
            total, rate = line.split(label)[1].split("(")
            return float(total) if which == 0 else float(rate.split()[0])
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(phases: list[Phase], args: argparse.Namespace) -> None:
    rates = ",".join(map(str, args.rates))
    command = f"python bench/bench_latency.py --rates {rates} --seconds {args.seconds}"
    if args.drc_applied != "full":
        command += f" --drc-applied {args.drc_applied}"
    if args.transport != "stream":
        command += f" --transport {args.transport}"
    if args.roles != "one":
        command += f" --roles {args.roles}"
    print(f"# End-to-end latency, DRC vs native (`{command}`, {time.strftime('%Y-%m-%d %H:%M')})\n")
    print(
        f"Arrival polled every {args.poll_ms:g} ms on each side; load average = the host's "
        "1-minute load at the phase's start and end.\n"
    )
    print(
        "| tps/side | system | achieved dc1/dc2 | dc1->dc2 p50/p99 ms | dc2->dc1 p50/p99 ms "
        "| p50 ms | p99 ms | max ms | CPU s (servers) | txns | CPU us/txn | nodes us/txn "
        "| load avg |"
    )
    print("| ---: | --- |" + " ---: |" * 11)
    for phase in phases:
        values = phase.all_latencies
        directions = [phase.latencies[k] for k in ("dc1 -> dc2", "dc2 -> dc1")]
        cells = [f"{percentile(v, 0.5):.1f} / {percentile(v, 0.99):.1f}" for v in directions]
        mark = "" if phase.complete else " (incomplete)"
        print(
            f"| {phase.rate} | {phase.system}{mark} | {phase.tps[0]:.0f} / {phase.tps[1]:.0f} "
            f"| {cells[0]} | {cells[1]} | {percentile(values, 0.5):.1f} "
            f"| {percentile(values, 0.99):.1f} | {max(values, default=float('nan')):.1f} "
            f"| {phase.cpu_s:.1f} ({phase.server_cpu_s:.1f}) | {phase.transactions} "
            f"| {phase.cpu_us_per_txn:.0f} | {phase.nodes_us_per_txn:.0f} "
            f"| {phase.load[0]:.1f} / {phase.load[1]:.1f} |"
        )
    print()
    for phase in phases:
        if phase.system != "native":
            stored, markers = phase.captured
            print(
                f"- {phase.system} at {phase.rate}: the nodes' capture stored {stored} "
                f"transactions, {markers} of them as echo markers without rows "
                "(only `drc_applied = marker` stores those)"
            )
    print("\n| tps/side | system | p50 DRC/native | p99 DRC/native | CPU per txn DRC/native |")
    print("| ---: | --- | ---: | ---: | ---: |")
    by = {(p.system, p.rate): p for p in phases}
    names = list(dict.fromkeys(p.system for p in phases))
    for rate in args.rates:
        native = by.get(("native", rate))
        for drc in [by.get((name, rate)) for name in names if name != "native"]:
            if drc is None or native is None:
                continue
            d, n = drc.all_latencies, native.all_latencies
            print(
                f"| {rate} | {drc.system} | {_ratio(percentile(d, 0.5), percentile(n, 0.5))} "
                f"| {_ratio(percentile(d, 0.99), percentile(n, 0.99))} "
                f"| {_ratio(drc.cpu_us_per_txn, native.cpu_us_per_txn)} |"
            )
    print()
    for system in names:
        ok = [
            p.rate
            for p in phases
            if p.system == system and p.complete and percentile(p.all_latencies, 0.99) < 1000
        ]
        print(f"- {system}: highest rate with p99 < 1 s: {max(ok) if ok else 'none'} tps/side")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rates", type=lambda s: [int(x) for x in s.split(",")], default=[200, 300, 400, 500],
        help="sysbench tps per side, comma-separated (each runs DRC, then native)",
    )  # fmt: skip
    parser.add_argument("--rate", type=int, help="one rate (same as --rates R)")
    parser.add_argument("--seconds", type=int, default=30, help="load per phase")
    parser.add_argument("--systems", default="drc,native", help="drc, native or both")
    parser.add_argument("--probes-per-second", type=float, default=20)
    parser.add_argument("--poll-ms", type=float, default=3.0, help="arrival polling interval")
    parser.add_argument("--profile", metavar="DIR", help="py-spy the DRC nodes into DIR")
    parser.add_argument("--quick", action="store_true", help="300 tps, 8 s")
    parser.add_argument("--keep", action="store_true", help="keep the nodes' logs (path printed)")
    parser.add_argument(
        "--drc-applied", default="full", choices=["full", "marker", "full,marker", "marker,full"],
        help="the DRC nodes' [replicator] drc_applied; two values: DRC runs with each in turn",
    )  # fmt: skip
    parser.add_argument(
        "--transport", default="stream", choices=["stream", "pull", "stream,pull", "pull,stream"],
        help="the DRC channels' transport; two values: DRC runs with each in turn",
    )  # fmt: skip
    parser.add_argument(
        "--roles", default="one", choices=["one", "split", "one,split", "split,one"],
        help="DRC as one process per datacenter, or split into --role replicator and --role "
        "apply; two values: DRC runs with each in turn",
    )  # fmt: skip
    args = parser.parse_args()
    if args.rate:
        args.rates = [args.rate]
    if args.quick:
        args.rates, args.seconds = [300], 8
    workdir = Path(tempfile.mkdtemp(prefix="drc-lat-"))
    box = Sandbox(workdir / "sbx")
    drcs: list[Drc] = []
    try:
        description = box.up(2)
        dc1, dc2 = description.server("dc1"), description.server("dc2")
        native = Native(dc1, dc2)
        wanted = args.systems.lower().split(",")
        drcs = [
            Drc(description, dc1, dc2, workdir, mode, transport, roles)
            for mode in args.drc_applied.split(",")
            for transport in args.transport.split(",")
            for roles in args.roles.split(",")
        ]
        prepare(native, dc1, dc2)
        systems: list[Drc | Native] = [*drcs, native] if "drc" in wanted else [native]
        systems = [s for s in systems if s is not native or "native" in wanted]
        phases = []
        number = 0
        for rate in args.rates:
            for system in systems:
                number += 1
                phases.append(run_phase(system, number, rate, args))
                print(f"({system.name} at {rate} tps/side done)", file=sys.stderr, flush=True)
        report(phases, args)
    finally:
        for drc in drcs:
            if drc.procs:
                drc.stop()
        box.down()
        if args.keep:
            print(f"(logs kept in {workdir})", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
