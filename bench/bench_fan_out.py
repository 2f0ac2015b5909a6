"""Fan-out: the API's CPU per record per stream reader, and its RSS, from 1 to 500 readers.

A server process (this file with ``--serve``) opens an empty EventBuffer and serves it with
:class:`drc.api.server.ApiServer`, as ``drc run`` does; once every reader's ``/v1/stream`` is
open it appends ``--txns`` transactions (1-4 row changes, about 600 bytes each), one commit
each, every ``--interval-ms``, as a replicator capturing a steady source would. The readers,
spread over ``--procs`` processes (asyncio + httpx), read every frame until the last SCN and
check their record count. Reported per reader count: the server process's CPU (utime + stime
from /proc, from the first append to the last reader done) divided by records x readers, its
peak RSS, and wall time; each count runs ``--repeat`` times in a fresh server, the worst kept.
Capture's own cost is not in it (the same for any number of readers).

    .venv/bin/python bench/bench_fan_out.py [--readers 0,1,10,100,500] [--txns 2000]
                                            [--interval-ms 2] [--repeat 3] [--procs 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.bench_api import make_txn, scn_of  # noqa: E402
from drc.api import streamwire  # noqa: E402
from drc.core.codec import encode_transaction  # noqa: E402
from drc.core.scn import SCN  # noqa: E402
from tests.support.fanout import Reader, Target  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


# -- the server process ---------------------------------------------------------------------------


def serve(directory: Path, txns: int, interval_s: float) -> None:
    from drc.api.app import create_app
    from drc.api.deps import ApiDeps
    from drc.api.longpolls import LongPollGate, LongPollLimits
    from drc.api.server import ApiServer
    from drc.eventbuffer import EventBuffer

    with EventBuffer.open(directory) as buffer:
        gate = LongPollGate(LongPollLimits(total=5000, per_token=5000))
        deps = ApiDeps(buffer=buffer, long_polls=gate)
        with ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True) as api:
            print(api.url, flush=True)
            sys.stdin.readline()  # "go": every reader's stream is open
            rng = random.Random(1)
            began = time.monotonic()
            for n in range(txns):
                t = make_txn(n, rng)
                buffer.append(t.scn, encode_transaction(t), t.timestamp * 1000)
                buffer.commit()
                pause = began + (n + 1) * interval_s - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            print("written", flush=True)
            sys.stdin.readline()  # "quit"


class Server:
    def __init__(self, txns: int, interval_ms: float) -> None:
        self._dir = tempfile.TemporaryDirectory()
        argv = [sys.executable, __file__, "--serve", self._dir.name, "--txns", str(txns),
                "--interval-ms", str(interval_ms)]  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.url = self.proc.stdout.readline().strip()
        self.peak_rss = 0
        self._sampling = threading.Event()

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def sample_rss(self) -> None:
        while not self._sampling.wait(0.1):
            self.peak_rss = max(self.peak_rss, self.rss())

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait_written(self) -> None:
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "written"

    def close(self) -> None:
        self._sampling.set()
        self.send("quit")
        self.proc.wait(30)
        self._dir.cleanup()


# -- reader processes -----------------------------------------------------------------------------


def read_streams(url: str, count: int, last: str, opened: object) -> list[int]:
    """``count`` streams read to ``last``; each one's record count."""
    return asyncio.run(_read_streams(url, count, SCN.parse(last), opened))


async def _read_streams(url: str, count: int, last: SCN, opened: object) -> list[int]:
    target = Target(last)
    readers = [Reader() for _ in range(count)]
    path = f"{streamwire.PATH_STREAM}?after=0:0:0:0&wait_ms=1000"
    limits = httpx.Limits(max_connections=count + 1)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=300) as client:
        tasks = [asyncio.create_task(r.run(client, path, target)) for r in readers]
        opened.release()  # type: ignore[attr-defined]
        await asyncio.gather(*tasks)
    return [r.count for r in readers]


def run_once(readers: int, txns: int, interval_ms: float, procs: int) -> tuple[float, int, float]:
    """(server CPU s per record per reader, peak RSS, wall s)."""
    server = Server(txns, interval_ms)
    sampler = threading.Thread(target=server.sample_rss, daemon=True)
    sampler.start()
    ctx = get_context("spawn")
    manager = ctx.Manager()
    opened = manager.Semaphore(0)
    parts = [readers // procs + (1 if i < readers % procs else 0) for i in range(procs)]
    parts = [p for p in parts if p]  # none: the server's own cost (appends, commits)
    last = str(scn_of(txns - 1))
    try:
        with ProcessPoolExecutor(max(len(parts), 1), mp_context=ctx) as pool:
            futures = [pool.submit(read_streams, server.url, p, last, opened) for p in parts]
            for _ in parts:
                opened.acquire()
            time.sleep(1.0)  # the last streams' first frames
            cpu, began = server.cpu_s(), time.monotonic()
            server.send("go")
            counts = [c for f in futures for c in f.result()]
            server.wait_written()
            cpu, wall = server.cpu_s() - cpu, time.monotonic() - began
        assert counts == [txns] * readers, f"a reader missed records: {set(counts)}"
        return cpu / (txns * max(readers, 1)), server.peak_rss, wall
    finally:
        server.close()
        manager.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--readers", default="0,1,10,100,500", help="0: the server alone")
    parser.add_argument("--txns", type=int, default=2000)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--procs", type=int, default=4)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.txns, args.interval_ms / 1000)
        return
    print(f"`{' '.join([Path(sys.executable).name, *sys.argv])}`")
    print("| readers | CPU µs / record / reader (worst) | all runs | CPU µs / record | peak RSS MB "
          "| wall s |")  # fmt: skip
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    for readers in (int(r) for r in args.readers.split(",")):
        runs = [
            run_once(readers, args.txns, args.interval_ms, args.procs) for _ in range(args.repeat)
        ]
        worst = max(runs)
        shown = ", ".join(f"{r[0] * 1e6:.1f}" for r in runs)
        rss = max(r[1] for r in runs) >> 20
        wall = max(r[2] for r in runs)
        total = worst[0] * 1e6 * max(readers, 1)
        print(f"| {readers} | {worst[0] * 1e6:.1f} | {shown} | {total:.0f} | {rss} | {wall:.1f} |",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
