"""The periodic verify of `drc run` (`[channels.verify]`): its result on /metrics and /v1/status.

Both datacenters run in this process (drc.node.Node, as `drc run`), dc1 writing all the while;
dc2's channel from dc1 verifies every few seconds on Spark (local mode, the node's own
session). With the sides equal, every finished run reports zero differences; a row changed on
dc2 outside the binlog shows up as one `different` row of that table on /metrics.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.cli.tail import _verify_line
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.config import server_toml
from tests.support.servers import connect, count_rows, execute

pytestmark = pytest.mark.integration

DB = "verify_periodic"
SAMPLE = re.compile(r"^(drc_verify_[a-z_]+)(\{[^}]*\})? (\S+)$")


def _sql(server: ServerInfo, *statements: str, log_bin: bool = True) -> None:
    execute(server, *statements, log_bin=log_bin)


def _count(server: ServerInfo) -> int:
    return count_rows(server, f"{DB}.t")


def _writes(server: ServerInfo, stop: threading.Event) -> None:
    """Inserts and updates on dc1, ~20 transactions/s, replicated to dc2."""
    conn = connect(server)
    next_id = 10_000
    with conn.cursor() as cur:
        while not stop.wait(0.05):
            cur.execute(f"INSERT INTO {DB}.t VALUES (%s, 'new', 0)", (next_id,))
            cur.execute(f"UPDATE {DB}.t SET n = n + 1 WHERE id = %s", (next_id % 500 + 1,))
            next_id += 1
    conn.close()


def metrics(url: str) -> dict[tuple[str, str], float]:
    """The drc_verify_* samples of /metrics: (name, labels text) -> value."""
    found = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        match = SAMPLE.match(line)
        if match:
            found[(match[1], match[2] or "")] = float(match[3])
    return found


def runs(url: str, result: str) -> float:
    labels = f'{{channel="from-dc1",result="{result}"}}'
    return metrics(url).get(("drc_verify_runs_total", labels), 0.0)


def verify_status(url: str) -> dict[str, Any]:
    status = httpx.get(f"{url}/v1/status", timeout=10).json()
    return next(c for c in status["channels"] if c["name"] == "from-dc1")["verify"]


def difference(url: str, kind: str) -> float | None:
    labels = f'{{channel="from-dc1",table="{DB}.t",kind="{kind}"}}'
    return metrics(url).get(("drc_verify_differences", labels))


@pytest.fixture
def nodes(sandbox: SandboxDescription, tmp_path: Path) -> Iterator[Any]:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    for server in (dc1, dc2):
        _sql(server, f"DROP DATABASE IF EXISTS {DB}", log_bin=False)
    configs = write_configs(sandbox, tmp_path, schema=DB)
    configs["dc2"].write_text(
        configs["dc2"].read_text()
        + f"""
{server_toml("channels.origin_db", dc1, password_file=tmp_path / "dc1.password")}

[channels.verify]
every_s = 2
chunk_rows = 200
master = "local[1]"
"""
    )
    with running_nodes(configs) as running:
        _sql(
            dc1,
            f"CREATE DATABASE {DB}",
            f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT NOT NULL)",
            f"INSERT INTO {DB}.t SELECT seq, CONCAT('v', seq), 0 FROM {DB}.seq_1_to_2000",
        )
        assert wait_for(lambda: _count(dc2) >= 2000, 60), "the seed did not reach dc2"
        stop = threading.Event()
        writer = threading.Thread(target=_writes, args=(dc1, stop), daemon=True)
        writer.start()
        try:
            yield dc1, dc2, running["dc2"]
        finally:
            stop.set()
            writer.join(timeout=30)


def test_periodic_verify_reports_on_metrics_and_status(nodes: Any) -> None:
    _, dc2, node = nodes
    url = node.api_url
    assert wait_for(lambda: runs(url, "equal") >= 2, 300), verify_status(url)
    assert runs(url, "failed") == 0 and runs(url, "differ") == 0
    for kind in ("missing", "extra", "different"):
        assert difference(url, kind) == 0  # equal sides under writes: nothing reported
    rows = metrics(url)[("drc_verify_rows_checked", f'{{channel="from-dc1",table="{DB}.t"}}')]
    assert rows >= 2000
    verify = verify_status(url)
    assert verify["last"]["differences"] == 0 and verify["last_error"] is None
    assert "the sides are equal" in _verify_line(verify)

    _sql(dc2, f"UPDATE {DB}.t SET v = 'only on dc2' WHERE id = 777", log_bin=False)
    assert wait_for(lambda: difference(url, "different") == 1, 300), verify_status(url)
    assert difference(url, "missing") == 0 and difference(url, "extra") == 0
    verify = verify_status(url)
    assert verify["last"]["tables"][0]["differences"]["different"] == 1
    assert "1 differences" in _verify_line(verify)
