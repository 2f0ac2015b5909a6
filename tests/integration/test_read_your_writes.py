"""Read your writes across datacenters, on two running DRC nodes (dc1, dc2).

A client writes on dc1, reads its GTID there (@@last_gtid) and asks dc2's API to wait for it
(GET /v1/wait, the SDK's wait_for_gtid, drc wait): the answer comes only once dc2's channel
committed the transaction, so the row is then visible on dc2; a GTID never written times out
with 408; a GTID whose transaction the channel filtered out still counts once it moved past it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.client.control import ChannelApi
from drc.client.errors import ApiRequestError, WaitTimeoutError
from drc.client.waits import wait_for_gtid
from drc.config import load_config
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.servers import connect, drop_everywhere, execute, query

SCHEMA = "ryw_db"
OTHER = "ryw_other"  # written on dc1, not replicated
CHANNEL = "from-dc1"


@dataclass
class Pair:
    dc1: ServerInfo
    dc2: ServerInfo
    api2: str  # dc2's API, which runs its channel from dc1
    config2: Path
    node2: Node
    stops: dict[str, threading.Event]
    nodes: dict[str, Node]

    def write(self, statement: str) -> str:
        """Run ``statement`` on dc1 and return its GTID, as a client would."""
        conn = connect(self.dc1, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                cur.execute("SELECT @@last_gtid")
                return str(cur.fetchone()[0])
        finally:
            conn.close()

    def on_dc2(self, key: int) -> bool:
        return bool(query(self.dc2, f"SELECT 1 FROM {SCHEMA}.t WHERE id = %s", (key,)))

    def wait(self, gtid: str, timeout_ms: int) -> httpx.Response:
        params = {"gtid": gtid, "timeout_ms": str(timeout_ms)}
        return httpx.get(f"{self.api2}/v1/wait", params=params, timeout=timeout_ms / 1000 + 10)

    def restart_dc2(self) -> None:
        """Stop dc2's node (replicator, API, channel) and start it again from its config."""
        self.stops["dc2"].set()
        self.nodes["dc2"].close()
        self.stops["dc2"] = threading.Event()
        self.node2 = self.nodes["dc2"] = Node(load_config(self.config2))
        self.node2.start(self.stops["dc2"])

    def channel(self, action: str) -> None:
        with ChannelApi(self.api2) as api:
            api.act(CHANNEL, action, reason="read-your-writes test")
            if action == "pause":
                assert wait_for(lambda: api.get(CHANNEL)["state"] == "paused", 30)


@pytest.fixture(scope="module")
def pair(sandbox: SandboxDescription, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    drop_everywhere(SCHEMA, dc1, dc2)
    drop_everywhere(OTHER, dc1, dc2)
    configs = write_configs(sandbox, tmp_path_factory.mktemp("ryw"), schema=SCHEMA)
    stops = {dc: threading.Event() for dc in configs}
    nodes = {dc: Node(load_config(path)) for dc, path in configs.items()}
    try:
        for dc, node in nodes.items():
            node.start(stops[dc])
        execute(
            dc1,
            f"CREATE DATABASE {SCHEMA}",
            f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40))",
            f"CREATE DATABASE {OTHER}",
            f"CREATE TABLE {OTHER}.t (id INT PRIMARY KEY)",
        )
        assert wait_for(lambda: _has_table(dc2), 30), "the table did not reach dc2"
        api2 = nodes["dc2"].api_url
        assert api2 is not None
        yield Pair(dc1, dc2, api2, configs["dc2"], nodes["dc2"], stops, nodes)
    finally:
        for stop in stops.values():
            stop.set()
        for node in nodes.values():
            node.close()


def _has_table(server: ServerInfo) -> bool:
    found = query(
        server,
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 't'",
        (SCHEMA,),
    )
    return bool(found)


def _answered(pair: Pair, gtid: str, timeout_ms: int, seen: list[Any]) -> threading.Thread:
    """GET /v1/wait in a thread; when it answers, note the status and whether the row of the
    test (id 1) was on dc2 right then."""

    def ask() -> None:
        response = pair.wait(gtid, timeout_ms)
        seen.append((response.status_code, pair.on_dc2(1), response.json()))

    thread = threading.Thread(target=ask)
    thread.start()
    return thread


def test_a_wait_answers_only_once_the_write_is_visible_on_the_other_side(pair: Pair) -> None:
    pair.channel("pause")
    try:
        gtid = pair.write(f"INSERT INTO {SCHEMA}.t VALUES (1, 'written on dc1')")
        assert pair.wait(gtid, 0).status_code == 408  # not applied: paused
        seen: list[Any] = []
        waiter = _answered(pair, gtid, 25_000, seen)
        waiter.join(1.0)
        assert not seen and not pair.on_dc2(1)  # still waiting, nothing applied
    finally:
        pair.channel("resume")
    waiter.join(40)
    assert seen, "the wait never answered"
    status, visible, body = seen[0]
    assert status == 200, body
    assert visible, "answered before the row was on dc2"
    (applied,) = body["gtids"]
    assert applied["gtid"] == gtid and applied["channel"] == CHANNEL
    assert applied["applied_at"] is not None
    domain = gtid.split("-")[0]
    assert f"{domain}-" in pair.node2.channels[0].report()["gtid_position"]
    # Asked again later: answered at once, from memory.
    assert pair.wait(gtid, 0).status_code == 200


def test_a_gtid_never_written_times_out_with_408(pair: Pair) -> None:
    gtid = pair.write(f"INSERT INTO {SCHEMA}.t VALUES (2, 'x')")
    domain, server, seq = gtid.split("-")
    future = f"{domain}-{server}-{int(seq) + 1_000_000}"
    response = pair.wait(future, 500)
    assert response.status_code == 408
    body = response.json()
    assert body["error"] == "wait_timeout"
    assert CHANNEL in body["waiting_for"] and f"domain {domain}" in body["waiting_for"]
    with pytest.raises(WaitTimeoutError) as caught:
        wait_for_gtid(pair.api2, future, 300)
    assert CHANNEL in caught.value.waiting_for


def test_a_transaction_the_channel_filters_out_counts_once_passed(pair: Pair) -> None:
    gtid = pair.write(f"INSERT INTO {OTHER}.t VALUES (1)")
    answer = wait_for_gtid(pair.api2, gtid, 30_000)
    assert answer["applied"] and answer["gtids"][0]["channel"] == CHANNEL
    assert not query(pair.dc2, "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                     (OTHER,))  # fmt: skip


def test_bad_and_unknown_gtids_are_refused_clearly(pair: Pair) -> None:
    gtid = pair.write(f"INSERT INTO {SCHEMA}.t VALUES (3, 'x')")
    assert wait_for_gtid(pair.api2, gtid, 30_000)["applied"]  # the channel knows its domains
    unknown = pair.wait("999-1-1", 1000)
    assert unknown.status_code == 404 and "domain 999" in unknown.json()["message"]
    bad = pair.wait("1-x-1", 1000)
    assert bad.status_code == 400 and "not a MariaDB GTID" in bad.json()["message"]
    too_long = pair.wait(gtid, 10_000_000)
    assert too_long.status_code == 400 and "max_wait_ms" in too_long.json()["message"]
    with pytest.raises(ApiRequestError) as caught:
        wait_for_gtid(pair.api2, "999-1-1", 1000)
    assert caught.value.status == 404


def test_drc_wait_exits_0_when_applied_and_1_on_timeout(pair: Pair) -> None:
    gtid = pair.write(f"INSERT INTO {SCHEMA}.t VALUES (4, 'x')")
    config = str(pair.config2)
    done = CliRunner().invoke(cli, ["wait", "--gtid", gtid, "--timeout-ms", "30000",
                                    "--config", config])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert f"{gtid} applied by channel {CHANNEL}" in done.output
    assert pair.on_dc2(4)
    domain, server, seq = gtid.split("-")
    future = f"{domain}-{server}-{int(seq) + 1_000_000}"
    late = CliRunner().invoke(cli, ["wait", "--gtid", future, "--timeout-ms", "300",
                                    "--api", pair.api2])  # fmt: skip
    assert late.exit_code == 1
    assert "not applied" in late.output and CHANNEL in late.output
    wrong = CliRunner().invoke(cli, ["wait", "--gtid", "999-1-1", "--api", pair.api2])
    assert wrong.exit_code == 2 and "domain 999" in wrong.output


def test_wait_latency_against_the_channels_lag(pair: Pair) -> None:
    """Prints (asserts nothing about time) how long a wait on dc2 takes after a write on dc1,
    beside how long the row takes to show on dc2 (polled every 2 ms) and the channel's lag as
    /v1/status reports it: the figure of docs/benchmarks.md."""
    rounds = 30
    waits, visible, lags = [], [], []
    for n in range(rounds):
        gtid = pair.write(f"INSERT INTO {SCHEMA}.t VALUES ({100 + n}, 'latency')")
        started = time.monotonic()
        wait_for_gtid(pair.api2, gtid, 25_000)
        waits.append((time.monotonic() - started) * 1000)
        lag = pair.node2.channels[0].report()["lag_seconds"]
        lags.append(lag * 1000 if lag is not None else float("nan"))
        pair.write(f"INSERT INTO {SCHEMA}.t VALUES ({1000 + n}, 'polled')")
        started = time.monotonic()
        assert wait_for(lambda n=n: pair.on_dc2(1000 + n), 25, interval=0.002)
        visible.append((time.monotonic() - started) * 1000)
    assert all(pair.on_dc2(100 + n) for n in range(rounds))
    for figures in (waits, visible, lags):
        figures.sort()
    print(
        f"\n{rounds} writes on dc1: GET /v1/wait on dc2 answered in median {waits[rounds // 2]:.1f}"
        f" ms (max {waits[-1]:.1f}); the row polled on dc2 showed in median "
        f"{visible[rounds // 2]:.1f} ms (max {visible[-1]:.1f}); the channel's lag right after "
        f"a wait: median {lags[rounds // 2]:.0f} ms (max {lags[-1]:.0f}; a row's source time "
        "is its binlog second)"
    )


def test_after_a_restart_an_older_gtid_is_answered_not_left_hanging(pair: Pair) -> None:
    gtid = pair.write(f"INSERT INTO {SCHEMA}.t VALUES (5, 'before the restart')")
    assert wait_for_gtid(pair.api2, gtid, 25_000)["applied"]
    pair.restart_dc2()
    # The new process knows no GTID until its channel passed a transaction after its
    # checkpoint (a heartbeat of dc1 at the latest): that one covers the older GTID.
    answer = wait_for_gtid(pair.api2, gtid, 25_000)
    assert answer["applied"] and answer["gtids"][0]["channel"] == CHANNEL
    assert answer["gtids"][0]["applied_at"] is None  # applied before this process started
