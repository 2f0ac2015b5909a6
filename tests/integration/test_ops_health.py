"""Lag and health as an operator reads them, on the two-datacenter sandbox (issue 17.2, 17.3).

dc1 runs ``drc run --role all``; dc2 runs ``--role replicator`` and ``--role apply`` as two
nodes, the apply one serving its own /healthz, /metrics and /v1/status on ``[api] apply_port``.
Everything is read over HTTP, as an operator or Prometheus would:

- idle: with nobody writing, every channel's lag stays within 2 s (heartbeats), and no
  heartbeat row crossed to the other side;
- the remote unreachable (dc1's API stopped): dc2's channel says ``disconnected`` and its lag
  grows about a second per second; when the API is back the channel reconnects by itself;
- a channel stopped by an error (a replicated CREATE TABLE the target already has): /healthz
  503 naming the channel, ``drc_channel_up`` 0, on both roles, and its lag keeps growing.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.config import load_config
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import free_port
from drc.sandbox.sandbox import SandboxDescription
from tests.support.servers import execute, query

SCHEMA = "ops_db"
POLL_S = 20.0  # bound for a state to show; never a timing assertion


class Cluster:
    def __init__(self, sandbox: SandboxDescription, directory: Path) -> None:
        self.dc1, self.dc2 = sandbox.server("dc1"), sandbox.server("dc2")
        configs = write_configs(sandbox, directory, schema=SCHEMA)
        self.apply_port = free_port()
        text = configs["dc2"].read_text()
        port_line = f"[api]\napply_port = {self.apply_port}\n"
        configs["dc2"].write_text(text.replace("[api]\n", port_line))
        self.stop = threading.Event()
        self.configs = {dc: load_config(path) for dc, path in configs.items()}
        self.nodes = {
            "dc1": Node(self.configs["dc1"], "all"),
            "dc2 replicator": Node(self.configs["dc2"], "replicator"),
            "dc2 apply": Node(self.configs["dc2"], "apply"),
        }

    def start(self) -> None:
        for node in self.nodes.values():
            node.start(self.stop)

    def close(self) -> None:
        self.stop.set()
        for node in self.nodes.values():
            node.close()

    def url(self, node: str) -> str:
        found = self.nodes[node].api_url
        assert found is not None
        return found

    def channel(self, node: str, name: str) -> dict[str, Any]:
        status = httpx.get(self.url(node) + "/v1/status", timeout=10).json()
        return next(c for c in status["channels"] if c["name"] == name)

    def channels(self) -> dict[str, dict[str, Any]]:
        return {
            "from-dc2": self.channel("dc1", "from-dc2"),
            "from-dc1": self.channel("dc2 apply", "from-dc1"),
        }


def _forget_channels() -> str:
    return "DELETE FROM drc.checkpoint WHERE channel IN ('from-dc1', 'from-dc2')"


@pytest.fixture(scope="module")
def cluster(
    sandbox: SandboxDescription, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    for server in (sandbox.server("dc1"), sandbox.server("dc2")):
        execute(server, f"DROP DATABASE IF EXISTS {SCHEMA}", f"CREATE DATABASE {SCHEMA}")
        if _has_drc(server) and query(server, "SHOW TABLES FROM drc LIKE 'checkpoint'"):
            execute(server, _forget_channels())  # other modules' channels read other buffers
    cluster = Cluster(sandbox, tmp_path_factory.mktemp("ops"))
    try:
        cluster.start()
        execute(cluster.dc1, f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        execute(cluster.dc1, f"INSERT INTO {SCHEMA}.t VALUES (1, 'from dc1')")
        _wait(lambda: _rows(cluster.dc2) == [1], "the table and row on dc2")
        execute(cluster.dc2, f"INSERT INTO {SCHEMA}.t VALUES (2, 'from dc2')")
        for server in (cluster.dc1, cluster.dc2):
            _wait(lambda s=server: _rows(s) == [1, 2], f"both rows on {server.datacenter}")
        yield cluster
    finally:
        cluster.close()
        for server in (cluster.dc1, cluster.dc2):
            execute(server, _forget_channels(), f"DROP DATABASE IF EXISTS {SCHEMA}")


def _has_drc(server: Any) -> bool:
    return bool(query(server, "SHOW DATABASES LIKE 'drc'"))


def _rows(server: Any) -> list[int]:
    if not query(server, f"SHOW TABLES FROM {SCHEMA} LIKE 't'"):
        return []
    return [row[0] for row in query(server, f"SELECT id FROM {SCHEMA}.t ORDER BY id")]


def _wait(check: Any, what: str, timeout: float = POLL_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {what}")


def _metric(url: str, name: str, channel: str) -> float | None:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.search(rf'^{name}{{channel="{re.escape(channel)}"}} (\S+)$', text, re.M)
    return None if found is None else float(found[1])


def _lag_grows(cluster: Cluster, node: str, channel: str, seconds: float = 4.0) -> None:
    first, started = cluster.channel(node, channel)["lag_seconds"], time.time()
    time.sleep(seconds)
    second, elapsed = cluster.channel(node, channel)["lag_seconds"], time.time() - started
    assert first is not None and second is not None
    assert second - first >= 0.8 * elapsed, (first, second, elapsed)


@pytest.mark.parametrize("idle_s", [10, pytest.param(60, marks=pytest.mark.slow)])
def test_idle_channels_read_a_lag_within_two_seconds(cluster: Cluster, idle_s: int) -> None:
    time.sleep(idle_s)  # nobody writes
    for name, report in cluster.channels().items():
        assert report["state"] == "running", report
        assert report["lag_seconds"] is not None and report["lag_seconds"] <= 2.0, (name, report)
    for node, channel in (("dc1", "from-dc2"), ("dc2 apply", "from-dc1")):
        lag = _metric(cluster.url(node), "drc_channel_lag_seconds", channel)
        assert lag is not None and lag <= 2.0, (node, lag)
    status = httpx.get(cluster.url("dc1") + "/v1/status", timeout=10).json()
    assert status["lag"]["seconds"] <= 2.0, "the replicator's own capture lag, idle"
    # Heartbeats were never applied as user data: each side holds only its own row.
    # Other tests on the shared sandbox leave rows of their own datacenter names: only these
    # two datacenters' rows tell whether a heartbeat crossed.
    pair = "SELECT datacenter FROM drc.heartbeat WHERE datacenter IN ('dc1', 'dc2')"
    assert query(cluster.dc1, pair) == [("dc1",)]
    assert query(cluster.dc2, pair) == [("dc2",)]
    assert _rows(cluster.dc1) == _rows(cluster.dc2) == [1, 2]


def test_an_unreachable_remote_shows_disconnected_and_growing_lag_then_reconnects(
    cluster: Cluster,
) -> None:
    service = cluster.nodes["dc1"].service
    assert service is not None and service.api is not None
    service.api.stop()  # dc2's channel can no longer reach dc1
    try:
        _wait(
            lambda: cluster.channel("dc2 apply", "from-dc1")["state"] == "disconnected",
            "state disconnected",
        )
        _lag_grows(cluster, "dc2 apply", "from-dc1")
        assert _metric(cluster.url("dc2 apply"), "drc_channel_up", "from-dc1") == 1
        assert httpx.get(cluster.url("dc2 apply") + "/healthz").status_code == 200
        execute(cluster.dc1, f"INSERT INTO {SCHEMA}.t VALUES (3, 'while away')")
    finally:
        service.start_api()  # the same address again
    _wait(lambda: 3 in _rows(cluster.dc2), "the row written meanwhile reaches dc2", 60)
    _wait(
        lambda: (
            cluster.channel("dc2 apply", "from-dc1")["state"] == "running"
            and cluster.channel("dc2 apply", "from-dc1")["lag_seconds"] <= 2.0
        ),
        "reconnected and caught up",
        60,
    )


def test_a_channel_stopped_by_an_error_fails_health_on_every_role(cluster: Cluster) -> None:
    # Each target already has the table the other side creates: the replicated CREATE TABLE
    # fails with 1050 and stops the channel (dc2's apply role, dc1's all role).
    local = "SET SESSION sql_log_bin = 0"
    execute(cluster.dc2, local, f"CREATE TABLE {SCHEMA}.clash1 (id INT PRIMARY KEY)")
    execute(cluster.dc1, local, f"CREATE TABLE {SCHEMA}.clash2 (id INT PRIMARY KEY)")
    execute(cluster.dc1, f"CREATE TABLE {SCHEMA}.clash1 (id INT PRIMARY KEY)")
    execute(cluster.dc2, f"CREATE TABLE {SCHEMA}.clash2 (id INT PRIMARY KEY)")
    for node, channel in (("dc2 apply", "from-dc1"), ("dc1", "from-dc2")):
        url = cluster.url(node)
        _wait(lambda u=url: httpx.get(u + "/healthz").status_code == 503, f"{node} 503")
        body = httpx.get(url + "/healthz").json()
        assert f"channel {channel} stopped" in body["message"], body
        assert body["state"] == "channel_stopped" and "1050" in body["message"], body
        assert _metric(url, "drc_channel_up", channel) == 0
        assert cluster.channel(node, channel)["state"] == "stopped"
        assert "drc_up 0" in httpx.get(url + "/metrics").text
    _lag_grows(cluster, "dc2 apply", "from-dc1")
