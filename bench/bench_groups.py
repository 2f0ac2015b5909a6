"""Consumer group rebalance time: how long until a group's ranges are all OPEN, owned by live
members and balanced, after a member joins and after one dies without leaving.

One API server over an empty EventBuffer keeps the groups in a real ZooKeeper (the sandbox's
start, a temp dir, a free port; ``--store memory`` keeps them in the process instead) and runs
the rebalancer every ``--rebalance-ms``. ``--members`` SDK consumers (drc.client.GroupConsumer,
threads of this process, heartbeat every ``--heartbeat-ms``) join a group of ``--ranges``
ranges one at a time; then one is abandoned (stops heartbeating, as a crashed process would).

Reported, each the worst and the median of ``--runs``:
- join: from the last member's join until every range is OPEN with a live owner and no member
  holds more than one range more than another (ranges moved away go CLOSING, are released by
  their holder at its next heartbeat, then reopen elsewhere with a new version);
- death: from the abandon until every range is OPEN with a live owner again; bounded below by
  the group's heartbeat timeout (``--timeout-s``), which is what it mostly measures.

    python bench/bench_groups.py [--members 4] [--ranges 64] [--runs 3] [--timeout-s 4]
        [--heartbeat-ms 500] [--rebalance-ms 300] [--store zookeeper|memory]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drc.api.app import create_app  # noqa: E402
from drc.api.deps import ApiDeps  # noqa: E402
from drc.api.group_service import GroupService, MemoryGroupStore  # noqa: E402
from drc.api.server import ApiServer  # noqa: E402
from drc.client import GroupConsumer  # noqa: E402
from drc.eventbuffer import EventBuffer  # noqa: E402
from drc.replicator.group_store import ZkGroupStore  # noqa: E402
from drc.sandbox import zookeeper  # noqa: E402
from drc.sandbox.procs import free_port, stop_pid  # noqa: E402

POLL_S = 0.02
GIVE_UP_S = 60.0


def settled(url: str, group: str, live: set[str]) -> bool:
    shown = httpx.get(f"{url}/v1/groups/{group}", timeout=5).json()
    ranges = shown["ranges"]
    if any(r["state"] != "open" or r["owner"] not in live for r in ranges):
        return False
    held = Counter(r["owner"] for r in ranges)
    counts = [held.get(member, 0) for member in live]
    return max(counts) - min(counts) <= 1


def wait_settled(url: str, group: str, live: set[str]) -> float:
    start = time.monotonic()
    while not settled(url, group, live):
        if time.monotonic() - start > GIVE_UP_S:
            shown = httpx.get(f"{url}/v1/groups/{group}", timeout=5).json()
            raise SystemExit(f"the group did not settle within {GIVE_UP_S:.0f} s: {shown}")
        time.sleep(POLL_S)
    return time.monotonic() - start


def one_run(url: str, number: int, args: argparse.Namespace) -> tuple[float, float]:
    group = f"bench{number}"
    body = {"name": group, "ranges": args.ranges, "heartbeat_timeout_s": args.timeout_s}
    httpx.post(f"{url}/v1/groups", json=body, timeout=10).raise_for_status()
    stop = threading.Event()
    members: list[GroupConsumer] = []
    threads: list[threading.Thread] = []

    def handle(_batch: Any) -> None:
        pass

    try:
        for _ in range(args.members):
            member = GroupConsumer(
                url, group, handle, heartbeat_interval_s=args.heartbeat_ms / 1000,
                commit_interval_s=0.5,
            )  # fmt: skip
            thread = threading.Thread(target=member.run, args=(stop,), daemon=True)
            thread.start()
            members.append(member)
            threads.append(thread)
            while member.member is None:
                time.sleep(POLL_S)
        joined = wait_settled(url, group, {m.member for m in members if m.member})
        victim = members[-1]
        victim.abandon()
        live = {m.member for m in members[:-1] if m.member}
        died = wait_settled(url, group, live)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    return joined, died


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--ranges", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=4.0, help="heartbeat timeout")
    parser.add_argument("--heartbeat-ms", type=float, default=500)
    parser.add_argument("--rebalance-ms", type=float, default=300)
    parser.add_argument("--store", choices=["zookeeper", "memory"], default="zookeeper")
    parser.add_argument("--quick", action="store_true", help="one run")
    args = parser.parse_args()
    if args.quick:
        args.runs = 1
    work = Path(tempfile.mkdtemp(prefix="drc-bench-groups-"))
    zk_pid = None
    try:
        if args.store == "zookeeper":
            port = free_port()
            zk_pid = zookeeper.start(work / "zk", port)
            store: Any = ZkGroupStore(f"127.0.0.1:{port}", "/drc-bench")
        else:
            store = MemoryGroupStore()
        groups = GroupService(store)
        with EventBuffer.open(work / "buf") as buffer:
            deps = ApiDeps(buffer=buffer, groups=groups)
            server = ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True,
                               stop_event=deps.stop)  # fmt: skip
            rebalancer = threading.Thread(
                target=groups.run_rebalancer, args=(deps.stop, args.rebalance_ms / 1000)
            )
            with server:
                rebalancer.start()
                results = [one_run(server.url, n, args) for n in range(args.runs)]
            rebalancer.join()
            groups.close()
    finally:
        if zk_pid is not None:
            stop_pid(zk_pid, str(work / "zk"))
        shutil.rmtree(work, ignore_errors=True)
    joins, deaths = [r[0] for r in results], [r[1] for r in results]
    print(f"\n## Consumer group rebalance: {args.members} members, {args.ranges} ranges, "
          f"store {args.store}, heartbeat {args.heartbeat_ms:.0f} ms, timeout "
          f"{args.timeout_s:g} s, rebalancer every {args.rebalance_ms:.0f} ms, "
          f"{args.runs} runs")  # fmt: skip
    print("\n| event | median s | worst s |\n|---|---:|---:|")
    print(f"| {args.members} members joined, until balanced | "
          f"{statistics.median(joins):.2f} | {max(joins):.2f} |")  # fmt: skip
    print(f"| one member died (no leave), until its ranges are open elsewhere | "
          f"{statistics.median(deaths):.2f} | {max(deaths):.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
