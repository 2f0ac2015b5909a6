"""`drc snapshot` of a channel whose remote is a replicator group given as ``zk://``: the
origin's stream is asked of the member ZooKeeper names, and a ZooKeeper that does not answer
is a clear error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drc.config import load_config
from drc.sandbox.procs import free_port
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from drc.snapshot.driver import run_snapshot
from drc.snapshot.origin import SnapshotError
from tests.support.apply import apply_process_config
from tests.support.config import server_toml
from tests.support.group import Group
from tests.support.servers import execute, query
from tests.support.snapshot import prepare
from tests.support.two_way import source_position

pytestmark = pytest.mark.integration


def _config(tmp: Path, dc1: ServerInfo, dc2: ServerInfo, remote: str, schema: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    secret = tmp / "origin.password"
    secret.write_text(dc1.password)
    path = apply_process_config(tmp, dc2, remote, "snap", [f"{schema}.*"])
    origin = server_toml("channels.origin_db", dc1, password_file=secret)
    path.write_text(path.read_text() + f"\n{origin}\n")
    return path


def test_a_snapshot_reads_the_origin_stream_through_the_groups_zookeeper(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "snap_zk"
    prepare(dc1, dc2, schema)
    execute(dc1, f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v INT)",
            f"INSERT INTO {schema}.t VALUES (1, 1), (2, 2), (3, 3)")  # fmt: skip
    name = f"snz{time.time_ns() % 10**9}"
    group = Group.create(sandbox, dc1, tmp_path / "group", 1, 2.0, name)
    group.start()
    try:
        group.wait_started(group.wait_leader(60), 60)
        execute(dc1, f"INSERT INTO {schema}.t VALUES (4, 4)")  # captured: a last SCN
        group.wait_caught_up(source_position(dc1))
        remote = f"zk://{sandbox.zookeeper.connect}/drc-sandbox/{name}"
        config = load_config(_config(tmp_path, dc1, dc2, remote, schema))
        summary = run_snapshot(config, "snap", master="local[1]", out=lambda _l: None)
        down = f"zk://127.0.0.1:{free_port()}/drc-sandbox/{name}"
        unreachable = load_config(_config(tmp_path / "down", dc1, dc2, down, schema))
        with pytest.raises(SnapshotError, match=r"did not answer.*ZooKeeper is reachable"):
            run_snapshot(unreachable, "snap", out=lambda _l: None)
    finally:
        group.stop()
    assert summary.copied == {f"{schema}.t": 4}
    ordered = f"SELECT * FROM {schema}.t ORDER BY id"
    assert query(dc2, ordered) == query(dc1, ordered)
