"""The sandbox starts real servers configured the way DRC needs, and stops exactly them."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from drc.sandbox.procs import pid_alive
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.servers import connect

DRC = [sys.executable, "-m", "drc.cli"]


def query_one(server: ServerInfo, sql: str) -> tuple:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            assert row is not None
            return row
    finally:
        conn.close()


def test_each_datacenter_has_distinct_ids_and_full_row_binlog(sandbox: SandboxDescription) -> None:
    seen_ids = set()
    for server in sandbox.servers:
        row = query_one(
            server,
            "SELECT @@server_id, @@gtid_domain_id, @@log_bin, @@binlog_format, "
            "@@binlog_row_image, @@binlog_row_metadata, @@character_set_server",
        )
        assert row == (
            server.server_id,
            server.gtid_domain_id,
            1,
            "ROW",
            "FULL",
            "FULL",
            "utf8mb4",
        )
        seen_ids.add(server.server_id)
    assert len(seen_ids) == len(sandbox.servers) == 2


def test_binlog_carries_column_names_of_a_write(dc1: ServerInfo) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS smoke")
        cur.execute("CREATE TABLE IF NOT EXISTS smoke.t (id INT PRIMARY KEY, note VARCHAR(20))")
        cur.execute("SHOW MASTER STATUS")
        log_file, log_pos = cur.fetchone()[:2]
        cur.execute("INSERT INTO smoke.t VALUES (1, 'héllo 😀')")
    conn.close()
    reader = BinLogStreamReader(
        connection_settings={
            "host": dc1.host,
            "port": dc1.port,
            "user": dc1.user,
            "passwd": dc1.password,
        },
        server_id=9999,
        log_file=log_file,
        log_pos=log_pos,
        resume_stream=True,
        blocking=False,
        is_mariadb=False,  # True ignores log_file/log_pos without a GTID (library bug)
        only_events=[WriteRowsEvent],
    )
    try:
        rows = [row["values"] for event in reader for row in event.rows]
    finally:
        reader.close()
    assert rows == [{"id": 1, "note": "héllo 😀"}]


def test_zookeeper_accepts_sessions_and_writes(sandbox: SandboxDescription) -> None:
    client = KazooClient(hosts=sandbox.zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        client.ensure_path("/drc-smoke")
        client.set("/drc-smoke", b"alive")
        assert client.get("/drc-smoke")[0] == b"alive"
    finally:
        client.stop()
        client.close()


def test_down_stops_every_process_it_started_and_up_twice_is_harmless() -> None:
    directory = Path(tempfile.mkdtemp(prefix="drc-sbx-cli-"))
    try:
        first = _cli("sandbox", "up", "--dir", str(directory), "--datacenters", "2")
        again = _cli("sandbox", "up", "--dir", str(directory), "--datacenters", "2")
        printed = json.loads(first.stdout)
        assert json.loads(again.stdout) == printed
        description = SandboxDescription.from_json((directory / "sandbox.json").read_text())
        password = description.servers[0].password
        assert password not in first.stdout + first.stderr
        assert stat.S_IMODE(os.stat(directory / "sandbox.json").st_mode) == 0o600
        pids = [s.pid for s in description.servers] + [description.zookeeper.pid]
        assert len(set(pids)) == 3 and all(pid_alive(pid) for pid in pids)

        status = _cli("sandbox", "status", "--dir", str(directory))
        assert "server_id=1" in status.stdout and "server_id=2" in status.stdout

        _cli("sandbox", "down", "--dir", str(directory))
        assert [pid for pid in pids if pid_alive(pid)] == []
        stopped = _cli("sandbox", "status", "--dir", str(directory), check=False)
        assert stopped.returncode == 1 and stopped.stdout.count("STOPPED") == 3
    finally:
        _cli("sandbox", "down", "--dir", str(directory), check=False)
        shutil.rmtree(directory, ignore_errors=True)


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*DRC, *args], capture_output=True, text=True, timeout=180)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
def test_up_with_replicators_runs_a_group_per_datacenter_and_zookeeper_restarts() -> None:
    directory = Path(tempfile.mkdtemp(prefix="drc-sbx-grp-"))
    try:
        _cli("sandbox", "up", "--dir", str(directory), "--datacenters", "1", "--replicators", "3")
        description = SandboxDescription.from_json((directory / "sandbox.json").read_text())
        assert [m.member_id for m in description.replicators] == ["r1", "r2", "r3"]
        group = f"zk://{description.zookeeper.connect}/drc-sandbox/dc1"
        deadline = time.monotonic() + 60
        roles: list[str] = []
        while time.monotonic() < deadline:
            shown = _cli("status", "--api", group, "--format", "json", check=False)
            if shown.returncode == 0:
                docs = [json.loads(d) for d in shown.stdout.replace("}\n{", "}\x00{").split("\x00")]
                roles = sorted(d["role"] for d in docs)
                if roles == ["follower", "follower", "leader"]:
                    break
            time.sleep(0.5)
        assert roles == ["follower", "follower", "leader"]
        _cli("sandbox", "zookeeper", "stop", "--dir", str(directory))
        _cli("sandbox", "zookeeper", "start", "--dir", str(directory))
        status = _cli("sandbox", "status", "--dir", str(directory))
        assert "dc1/r3" in status.stdout and "STOPPED" not in status.stdout
        pids = [m.pid for m in description.replicators]
        _cli("sandbox", "down", "--dir", str(directory))
        assert [pid for pid in pids if pid_alive(pid)] == []
    finally:
        _cli("sandbox", "down", "--dir", str(directory), check=False)
        shutil.rmtree(directory, ignore_errors=True)
