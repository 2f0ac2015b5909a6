"""Consumer groups on real MariaDB and ZooKeeper: four SDK members share a table's 64 ranges
under writes that insert, update, delete and change primary keys; one member dies without
leaving and its ranges move to the others; the rebalancer moves to another API node (a leader
failover) without losing the group or its checkpoints; every change arrives, duplicates only
dropped by SCN, and a key's changes are seen in order across a key change.

The replicator captures dc1 in this process; two API servers read its buffer and keep the
groups in one ZooKeeper path, as two members of a replicator group do: the one that "leads"
runs the rebalancer.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.group_service import GroupService
from drc.api.server import ApiServer
from drc.client import GroupConsumer, RangeBatch
from drc.core.events import Op
from drc.core.partitions import key_partition, range_index
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import FragmentLimits
from drc.replicator.group_store import ZkGroupStore
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.capture import Capture, capturing, read_all
from tests.support.servers import connect, fresh_database, master_position
from tests.support.two_way import started_group

pytestmark = pytest.mark.integration

TOKEN = "groups-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ADMIN_TOKEN = "groups-test-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DB = "cg_db"
RANGES = 64
HEARTBEAT_TIMEOUT_S = 4.0
Ident = tuple[SCN, int, str]  # (scn, key, op) of one delivered row change


@dataclass
class Collected:
    """What the members processed, as one consumer application would keep it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    last: dict[int, SCN] = field(default_factory=dict)  # per key: the SCN processed last
    order: dict[Ident, int] = field(default_factory=dict)  # accepted, in processing order
    duplicates: list[tuple[int, SCN]] = field(default_factory=list)  # (range, scn) dropped
    misplaced: list[str] = field(default_factory=list)

    def handle(self, batch: RangeBatch) -> None:
        with self.lock:
            for txn in batch.transactions:
                for change in txn.changes:
                    image = change.after if change.after is not None else change.before
                    assert image is not None
                    key = int(image["id"])
                    if range_index(key_partition(DB, "t", (key,)), RANGES) != batch.range:
                        self.misplaced.append(f"{key} in range {batch.range}")
                    if txn.scn <= self.last.get(key, SCN.zero()):
                        self.duplicates.append((batch.range, txn.scn))  # dropped by SCN
                        continue
                    self.last[key] = txn.scn
                    self.order[(txn.scn, key, change.op.value)] = len(self.order)
                    if change.before is not None:  # an update may change the key in its range
                        self.rows.pop(int(change.before["id"]), None)
                    if change.after is not None:
                        self.rows[key] = dict(change.after or {})


def _writes(server: ServerInfo, stop: threading.Event, seed: int) -> int:
    """Inserts, updates, deletes and key changes, one per transaction, until ``stop``."""
    rng = random.Random(seed)
    ids: list[int] = []
    fresh = iter(range(1, 10**9))
    done = 0
    conn = connect(server, autocommit=True)
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                pick = rng.random()
                if pick < 0.4 or len(ids) < 20:
                    new = next(fresh)
                    cur.execute(f"INSERT INTO {DB}.t VALUES (%s, %s)", (new, 0))
                    ids.append(new)
                elif pick < 0.7:
                    cur.execute(f"UPDATE {DB}.t SET v = v + 1 WHERE id = %s", (rng.choice(ids),))
                elif pick < 0.9:  # a primary-key change: the row moves to another partition
                    old, new = ids.pop(rng.randrange(len(ids))), next(fresh)
                    cur.execute(f"UPDATE {DB}.t SET id = %s, v = v + 1 WHERE id = %s", (new, old))
                    ids.append(new)
                else:
                    cur.execute(f"DELETE FROM {DB}.t WHERE id = %s", (ids.pop(),))
                done += 1
                time.sleep(0.003)
    finally:
        conn.close()
    return done


def _expected(capture: Capture, after: SCN) -> tuple[set[Ident], list[tuple[SCN, int, int]]]:
    """Every change a group member must process, and the key changes (scn, old, new)."""
    wanted: set[Ident] = set()
    moves = []
    for txn in read_all(capture.buffer, after):
        for c in txn.changes:
            if (c.schema, c.table) != (DB, "t"):
                continue
            before = None if c.before is None else int(c.before["id"])
            after_id = None if c.after is None else int(c.after["id"])
            if c.op is Op.UPDATE and before != after_id:
                assert before is not None and after_id is not None
                old_range = range_index(key_partition(DB, "t", (before,)), RANGES)
                new_range = range_index(key_partition(DB, "t", (after_id,)), RANGES)
                if old_range != new_range:
                    wanted |= {(txn.scn, before, "delete"), (txn.scn, after_id, "insert")}
                    moves.append((txn.scn, before, after_id))
                    continue
            key = after_id if after_id is not None else before
            assert key is not None
            wanted.add((txn.scn, key, c.op.value))
    return wanted, moves


def _source_rows(server: ServerInfo) -> dict[int, dict[str, Any]]:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, v FROM {DB}.t")
            return {int(i): {"id": int(i), "v": int(v)} for i, v in cur.fetchall()}
    finally:
        conn.close()


@contextmanager
def _api(capture: Capture, groups: GroupService) -> Iterator[str]:
    deps = ApiDeps(
        buffer=capture.buffer,
        metastore=capture.metastore,
        tokens=(TOKEN, ADMIN_TOKEN),
        admin_tokens={"ops": ADMIN_TOKEN},
        groups=groups,
    )
    server = ApiServer(create_app(deps), "127.0.0.1", 0, open_access=False, stop_event=deps.stop)
    rebalancer = threading.Thread(target=groups.run_rebalancer, args=(deps.stop, 0.3))
    with server:
        rebalancer.start()
        yield server.url
    rebalancer.join()
    groups.close()


def _owners(url: str) -> dict[int, tuple[str | None, int]]:
    shown = httpx.get(f"{url}/v1/groups/g", headers=AUTH).json()
    return {r["range"]: (r["owner"], r["version"]) for r in shown["ranges"]}


def _until(what: str, done: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout}s"
        time.sleep(0.2)


def test_four_members_share_64_ranges_through_a_kill_and_a_failover(
    sandbox: SandboxDescription, dc1: ServerInfo, tmp_path: Path
) -> None:
    fresh_database(dc1, DB, "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL)")
    start = master_position(dc1)
    options = CaptureOptions(
        capture=TableFilter.build([f"{DB}.*"]),
        start_from=f"{start[0]}:{start[1]}",
        fragments=FragmentLimits(rows=40, bytes=1 << 20),
        commit_max_ms=5,
    )
    zk_path = f"/drc-test-groups/{time.time_ns()}"
    leader = {"api": 1}
    collected = Collected()
    with capturing(dc1, tmp_path / "buf", options) as capture, ExitStack() as apis:
        capture.wait_for(start)
        begin = capture.buffer.last_scn or SCN.zero()
        urls = [
            apis.enter_context(
                _api(
                    capture,
                    GroupService(
                        ZkGroupStore(sandbox.zookeeper.connect, zk_path),
                        lambda n=n: leader["api"] == n,
                    ),
                )  # fmt: skip
            )
            for n in (1, 2)
        ]
        body = {"name": "g", "tables": f"{DB}.t", "ranges": RANGES, "after": str(begin),
                "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S}  # fmt: skip
        assert httpx.post(f"{urls[0]}/v1/groups", json=body, headers=ADMIN).status_code == 201

        stop_all, stop_writes = threading.Event(), threading.Event()
        members = [
            # the last one (killed) commits seldom: it dies holding changes it did not commit
            GroupConsumer(
                urls[i % 2],
                "g",
                collected.handle,
                token=TOKEN,
                commit_interval_s=0.5 if i < 3 else 30,
            )  # fmt: skip
            for i in range(4)
        ]
        threads = [threading.Thread(target=m.run, args=(stop_all,)) for m in members]
        for thread in threads:
            thread.start()
        writer_result: list[int] = []
        writer = threading.Thread(
            target=lambda: writer_result.append(_writes(dc1, stop_writes, 28))
        )
        writer.start()
        try:
            _until("all four members hold ranges", lambda: len(
                {o for o, _ in _owners(urls[0]).values() if o is not None}) == 4)  # fmt: skip
            time.sleep(3)
            leader["api"] = 2  # failover: the other node rebalances from the state in ZooKeeper
            victim = members[3]
            held = victim.assignment()
            assert held, "the victim held ranges"
            victim.abandon()  # dies: no more heartbeats, no commit, no leave
            threads[3].join(30)
            shown = httpx.get(f"{urls[1]}/v1/groups/g", headers=AUTH).json()["ranges"]
            last_commit = {r["range"]: SCN.parse(r["checkpoint"]) for r in shown}
            _until("the dead member's ranges moved", lambda: all(
                o not in (None, victim.member) for o, _ in _owners(urls[1]).values()))  # fmt: skip
            owners = _owners(urls[1])
            moved = next(iter(held))
            new_owner, version = owners[moved]
            assert version > held[moved]
            stale = httpx.get(
                f"{urls[1]}/v1/groups/g/ranges/{moved}/events",
                params={"member": new_owner, "version": held[moved], "after": str(begin)},
                headers=AUTH,
            )
            assert stale.status_code == 409, stale.text
            assert stale.json()["error"] == "stale_assignment"
            gone = httpx.get(
                f"{urls[1]}/v1/groups/g/ranges/{moved}/events",
                params={"member": victim.member, "version": version, "after": str(begin)},
                headers=AUTH,
            )
            assert gone.status_code == 410, gone.text
            time.sleep(3)
        finally:
            stop_writes.set()
            writer.join()
        capture.wait_for(master_position(dc1), 120)
        wanted, moves = _expected(capture, begin)
        try:
            _until("every change was processed", lambda: set(collected.order) >= wanted, 180)
        finally:
            stop_all.set()
            for thread in threads:
                thread.join(30)
        checkpoints = httpx.get(f"{urls[1]}/v1/groups/g", headers=AUTH).json()["ranges"]

    assert writer_result and writer_result[0] > 100
    assert collected.misplaced == []
    for index, scn in collected.duplicates:  # only what the dead member did after committing
        assert index in held and scn > last_commit[index], (index, scn)
    assert set(collected.order) == wanted, "every change once, none lost, none out of order"
    assert collected.rows == _source_rows(dc1)
    assert len(moves) > 20
    for scn, old, new in moves:
        earlier = [i for (s, k, _), i in collected.order.items() if k == old and s < scn]
        assert all(i < collected.order[(scn, new, "insert")] for i in earlier), (
            f"key {old} -> {new} at {scn}: the new key was seen before the old key's changes"
        )
    assert all(SCN.parse(r["checkpoint"]) > begin for r in checkpoints)


def _inserts(server: ServerInfo, stop: threading.Event) -> list[int]:
    done: list[int] = []
    conn = connect(server, autocommit=True)
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                n = len(done) + 1
                cur.execute("INSERT INTO grp_db.t VALUES (%s, %s)", (n, f"v{n}"))
                done.append(n)
                time.sleep(0.01)
    finally:
        conn.close()
    return done


def test_a_replicator_leader_failover_keeps_the_group_and_its_checkpoints(
    sandbox: SandboxDescription, dc1: ServerInfo, tmp_path: Path
) -> None:
    """Three ``drc run`` members in ZooKeeper; the consumers read through the two followers;
    kill -9 of the leader, then one consumer dies: only a leader rebalances, so its ranges
    move only if the new leader took the group over; no change is lost."""
    seen: set[int] = set()
    lock = threading.Lock()

    def handle(batch: RangeBatch) -> None:
        with lock:
            seen.update(int((c.after or {})["id"]) for t in batch.transactions for c in t.changes)

    with started_group(sandbox, dc1, tmp_path, "cg", 2.0) as group:
        leader = group.wait_leader(60)
        group.wait_started(leader)
        group.wait_roles(["follower", "follower", "leader"], 60)
        followers = [m for m in group.members if m is not leader]
        body = {"name": "g", "tables": "grp_db.t", "ranges": 8, "heartbeat_timeout_s": 3.0}
        created = httpx.post(f"{followers[0].url}/v1/groups", json=body, timeout=30)
        assert created.status_code == 201, created.text
        stop, stop_writes = threading.Event(), threading.Event()
        members = [GroupConsumer(f.url, "g", handle, commit_interval_s=0.5) for f in followers]
        threads = [threading.Thread(target=m.run, args=(stop,)) for m in members]
        for thread in threads:
            thread.start()
        written: list[int] = []
        writer = threading.Thread(target=lambda: written.extend(_inserts(dc1, stop_writes)))
        writer.start()
        try:
            _until("both members hold ranges", lambda: all(m.assignment() for m in members))
            time.sleep(2)
            before = httpx.get(f"{followers[0].url}/v1/groups/g", timeout=30).json()
            leader.kill()
            group.wait_leader(60, exclude=leader)
            members[1].abandon()
            _until("the new leader moved the dead consumer's ranges", lambda: all(
                r["owner"] == members[0].member
                for r in httpx.get(f"{followers[0].url}/v1/groups/g", timeout=30).json()["ranges"]
            ))  # fmt: skip
            time.sleep(1)
        finally:
            stop_writes.set()
            writer.join()
        try:
            _until("every insert was consumed", lambda: seen >= set(written), 180)
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        after = httpx.get(f"{followers[1].url}/v1/groups/g", timeout=30).json()
    assert len(written) > 100
    assert seen == set(written)
    assert members[0].joins == 1, "the failover dropped no member"
    old = {r["range"]: SCN.parse(r["checkpoint"]) for r in before["ranges"]}
    assert all(SCN.parse(r["checkpoint"]) >= old[r["range"]] for r in after["ranges"])
    assert any(SCN.parse(r["checkpoint"]) > old[r["range"]] for r in after["ranges"])
