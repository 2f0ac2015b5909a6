"""A datacenter's replicator group on real ZooKeeper and MariaDB: election, followers copying
the leader byte for byte, failover on kill -9 without gap, duplicate or renumbering, fencing of
a paused leader, and a ZooKeeper outage."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.core.scn import SCN
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.integration.capture import master_position
from tests.integration.group import Group, assert_identical_on_common_range
from tests.integration.servers import connect

SESSION_S = 2.0


def _position(server: ServerInfo) -> SCN:
    log_file, pos = master_position(server)
    return SCN(0, 0, int(log_file.rsplit(".", 1)[1]), pos)


def _writes(server: ServerInfo, db: str, stop: threading.Event, first: int = 1) -> list[int]:
    """Insert rows one transaction each until ``stop``; the ids committed."""
    done: list[int] = []
    conn = connect(server, autocommit=True)
    try:
        with conn.cursor() as cur:
            n = first
            while not stop.is_set():
                cur.execute(f"INSERT INTO {db}.t VALUES (%s, %s)", (n, f"v{n}"))
                done.append(n)
                n += 1
                time.sleep(0.005)
    finally:
        conn.close()
    return done


@pytest.fixture
def group(sandbox: SandboxDescription, dc1: ServerInfo, tmp_path: Path) -> Iterator[Group]:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS grp_db")
        cur.execute("CREATE DATABASE grp_db")
        cur.execute("CREATE TABLE grp_db.t (id INT PRIMARY KEY, v VARCHAR(20))")
    conn.close()
    made = Group.create(sandbox, dc1, tmp_path, 3, SESSION_S, name=f"grp{time.time_ns() % 10**9}")
    made.start()
    try:
        yield made
    finally:
        made.stop()


def test_one_leader_and_followers_hold_the_same_bytes(group: Group, dc1: ServerInfo) -> None:
    leader = group.wait_leader(30)
    roles = group.roles()
    assert sorted(r or "" for r in roles.values()) == ["follower", "follower", "leader"], roles
    stop = threading.Event()
    timer = threading.Timer(2.0, stop.set)
    timer.start()
    _writes(dc1, "grp_db", stop)
    group.wait_caught_up(_position(dc1))
    status = leader.status()
    assert status is not None and status["group"]["term"] >= 1
    assert assert_identical_on_common_range([m.buffer_dir for m in group.members]) > 100
