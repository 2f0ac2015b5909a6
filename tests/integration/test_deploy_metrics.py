"""Every metric (and selector label) that deploy/grafana/drc.json and deploy/prometheus/alerts.yml
query is one a running DRC really exports on /metrics.

Two DRC nodes (replicator + API + a channel from the other side, lww on one table, so the capture,
apply, lww and API families all have samples) run against the sandbox; both /metrics are scraped
after a row has crossed each way. deploy/prometheus/alerts-pending.yml names series that do not
exist yet: that they still do not is checked too, so the day they land this test says to move
the rules into alerts.yml.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription
from tests.support.apply import running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.monitoring import (
    EXTERNAL,
    PENDING_ALERTS,
    alert_exprs,
    dashboard_exprs,
    exported,
    metric_names,
    rules,
    unknown_names,
)
from tests.support.servers import connect

pytestmark = pytest.mark.integration

SCHEMA = "deploy_metrics_db"
CONFLICTS = conflicts_toml(conflict_rule(f"{SCHEMA}.t", "lww", column="updated_at"))

# TOML: [channels.x] after other tables still belongs to the last [[channels]] (the one channel).
VERIFY = """
[channels.origin_db]
host = "{host}"
port = {port}
user = "{user}"
password_file = "{secret}"
[channels.verify]
every_s = 86400
"""


@pytest.fixture(scope="module")
def families(
    sandbox: SandboxDescription, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, set[str]]]:
    servers = {dc: sandbox.server(dc) for dc in ("dc1", "dc2")}
    for server in servers.values():
        conn = connect(server)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {SCHEMA}")
            cur.execute(f"CREATE DATABASE {SCHEMA}")
            cur.execute(
                f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, dc VARCHAR(8) NOT NULL, "
                "updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
                "ON UPDATE CURRENT_TIMESTAMP(6))"
            )
        conn.close()
    tmp: Path = tmp_path_factory.mktemp("deploy-metrics")
    configs = write_configs(sandbox, tmp, schema=SCHEMA, extra=CONFLICTS)
    for dc, path in configs.items():  # a periodic verify (not due in the test) exports its families
        origin = servers["dc2" if dc == "dc1" else "dc1"]
        secret = tmp / f"{dc}-origin.password"
        secret.write_text(origin.password)
        with path.open("a") as config:
            config.write(VERIFY.format(host=origin.host, port=origin.port, user=origin.user,
                                       secret=secret))  # fmt: skip
    with running_nodes(configs) as nodes:
        for key, (dc, server) in enumerate(servers.items(), start=1):
            conn = connect(server)
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {SCHEMA}.t (id, dc) VALUES (%s, %s)", (key, dc))
            conn.close()

        def crossed() -> bool:
            return all(c.stats.transactions > 0 for n in nodes.values() for c in n.channels)

        assert wait_for(crossed, 60), "a row did not cross to the other datacenter"
        merged: dict[str, set[str]] = {}
        for node in nodes.values():
            assert node.api_url is not None
            response = httpx.get(node.api_url + "/metrics", timeout=10)
            response.raise_for_status()
            for name, labels in exported(response.text).items():
                merged.setdefault(name, set()).update(labels)
        yield merged


def test_the_scrape_has_every_kind_of_family(families: dict[str, set[str]]) -> None:
    for name in ("drc_up", "drc_capture_transactions_total", "drc_lww_guard_up",
                 "drc_verify_runs_total"):  # fmt: skip
        assert name in families
    assert "channel" in families["drc_channel_up"]
    assert {"route", "status"} <= families["drc_api_requests_total"]


def test_every_dashboard_query_reads_exported_metrics(families: dict[str, set[str]]) -> None:
    assert unknown_names(dashboard_exprs(), families) == []


def test_every_alert_reads_exported_metrics(families: dict[str, set[str]]) -> None:
    assert unknown_names(alert_exprs(), families) == []


def test_pending_alerts_still_wait_for_their_series(families: dict[str, set[str]]) -> None:
    for rule in rules(PENDING_ALERTS):
        missing = metric_names(str(rule["expr"])) - set(families) - EXTERNAL
        assert missing, (
            f"{rule['alert']}: every series it reads is exported now: move it from "
            f"{PENDING_ALERTS.name} into alerts.yml"
        )
