"""Channel control against two running datacenters: pause, resume, skip, rewind, audit.

dc1 and dc2 run as in ``drc run`` (replicator, API, channel from the other side); an operator
drives dc1's channel ``from-dc2`` with the ``drc channel`` CLI against dc1's API:

- pause: dc2's writes stop arriving and the applied SCN stays; resume: they arrive;
- skip: a change made to fail (its column dropped on dc1 only) stops the channel, alive, with the
  transaction shown; after ``skip --yes`` later changes arrive and the audit row names it;
- rewind: one hour back (by time) and to an SCN: dc1 ends equal to dc2 and the replay of an lww
  table whose rows dc1 already holds newer logs no conflict;
- every action is in ``drc channel history``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.servers import connect, fresh_database

SCHEMA = "ctl_db"
CONFLICTS = conflicts_toml(conflict_rule("ctl_db.lww_t", "lww", column="updated_at"))
TABLES = (
    "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, extra INT NULL)",
    "CREATE TABLE lww_t (id INT PRIMARY KEY, n INT NOT NULL, updated_at DATETIME(6) NOT NULL "
    "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))",
)


@dataclass
class Run:
    dc1: ServerInfo
    dc2: ServerInfo
    nodes: dict[str, Node]

    @property
    def api(self) -> str:
        url = self.nodes["dc1"].api_url
        assert url is not None
        return url

    def channel(self) -> dict[str, Any]:
        return next(c for c in self.cli("list", "--format", "json", parse=True))

    def cli(self, *args: str, parse: bool = False) -> Any:
        command = args[0]
        rest = list(args[1:])
        result = CliRunner().invoke(cli, ["channel", command, *rest, "--api", self.api])
        assert result.exit_code == 0, result.output
        return json.loads(result.output) if parse else result.output


def _sql(server: ServerInfo, *statements: str, params: Any = None) -> list[Any]:
    conn = connect(server, database=SCHEMA)
    rows: list[Any] = []
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement, params)
            rows = list(cur.fetchall())
    conn.close()
    return rows


def _rows(server: ServerInfo, table: str) -> list[Any]:
    return _sql(server, f"SELECT * FROM {table} ORDER BY id")


@pytest.fixture(scope="module")
def run(sandbox: SandboxDescription, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    for server in (sandbox.server("dc1"), sandbox.server("dc2")):
        fresh_database(server, SCHEMA, *TABLES)
    configs = write_configs(
        sandbox, tmp_path_factory.mktemp("control"), schema=SCHEMA, extra=CONFLICTS
    )
    with running_nodes(configs) as nodes:
        yield Run(sandbox.server("dc1"), sandbox.server("dc2"), nodes)


def _arrived(run: Run, key: int) -> bool:
    return bool(_sql(run.dc1, "SELECT 1 FROM t WHERE id = %s", params=(key,)))


def test_pause_holds_changes_and_resume_applies_them(run: Run) -> None:
    _sql(run.dc2, "INSERT INTO t VALUES (1, 'before pause', NULL)")
    assert wait_for(lambda: _arrived(run, 1), 30)
    out = run.cli("pause", "from-dc2", "--reason", "maintenance window")
    assert "action: pause" in out
    assert wait_for(lambda: run.channel()["state"] == "paused", 10)
    held_at = run.channel()["last_scn"]
    first, since = run.channel()["lag_seconds"] or 0.0, time.monotonic()
    _sql(run.dc2, "INSERT INTO t VALUES (2, 'while paused', NULL)")
    assert not wait_for(lambda: _arrived(run, 2), 3)
    assert run.channel()["last_scn"] == held_at
    # Heartbeats keep coming but are not applied: lag grows about a second per second.
    grown, elapsed = run.channel()["lag_seconds"] - first, time.monotonic() - since
    assert grown >= 0.8 * elapsed - 1.0, (grown, elapsed)
    run.cli("resume", "from-dc2", "--reason", "done")
    assert wait_for(lambda: _arrived(run, 2), 30)
    assert run.channel()["state"] == "running"


def test_a_stopped_channel_shows_its_transaction_and_skip_continues_after_it(run: Run) -> None:
    _sql(run.dc1, "SET SESSION sql_log_bin = 0", "ALTER TABLE t DROP COLUMN extra")
    _sql(run.dc2, "INSERT INTO t VALUES (10, 'needs extra', 7)")
    assert wait_for(lambda: run.channel()["state"] == "stopped", 30), run.channel()
    stopped = run.channel()["stopped_at"]
    assert stopped["tables"] == {f"{SCHEMA}.t": 1} and "extra" in stopped["error"]
    shown = run.cli("list")  # what an operator reads: where, what, and how to go on
    assert f"stopped at {stopped['scn']}" in shown and f"tables: {SCHEMA}.t (1 change)" in shown
    assert "row: " in shown and "`drc channel skip from-dc2`" in shown, shown
    refused = CliRunner().invoke(
        cli, ["channel", "skip", "from-dc2", "--api", run.api], input="n\n"
    )
    assert refused.exit_code != 0 and run.channel()["state"] == "stopped"  # not confirmed
    out = run.cli("skip", "from-dc2", "--yes", "--reason", "column dropped here on purpose")
    assert f"skipped: {stopped['scn']}" in out
    _sql(run.dc1, "SET SESSION sql_log_bin = 0", "ALTER TABLE t ADD COLUMN extra INT NULL")
    _sql(run.dc2, "INSERT INTO t VALUES (11, 'after the skip', NULL)")
    assert wait_for(lambda: _arrived(run, 11), 30)
    assert not _arrived(run, 10)  # skipped: not applied here
    # Running again: the stop is no longer an error, only the dated last stop.
    status = httpx.get(f"{run.api}/v1/status").json()
    channel = next(c for c in status["channels"] if c["name"] == "from-dc2")
    assert channel["state"] == "running" and channel["last_error"] is None, channel
    assert "extra" in channel["last_stop"]["error"] and channel["last_stop"]["at"] > 0
    history = run.cli("history", "from-dc2", "--format", "json", parse=True)
    skip = next(e for e in history if e["action"] == "skip")
    assert skip["actor"] == "open" and skip["reason"] == "column dropped here on purpose"
    assert skip["detail"]["skipped"]["scn"] == stopped["scn"]


def test_rewind_replays_to_equal_rows_and_logs_no_conflict(run: Run) -> None:
    _sql(run.dc1, "DELETE FROM t WHERE id = 10")
    _sql(run.dc2, "DELETE FROM t WHERE id = 10")
    start = run.channel()["last_scn"]
    for n in range(5):
        _sql(run.dc2, "INSERT INTO lww_t (id, n) VALUES (%s, 0)", params=(n,))
        _sql(run.dc2, "UPDATE lww_t SET n = n + 1 WHERE id = %s", params=(n,))
    assert wait_for(lambda: _rows(run.dc1, "lww_t") == _rows(run.dc2, "lww_t"), 30)
    conflicts_before = _sql(run.dc1, "SELECT COUNT(*) FROM drc.conflicts")[0][0]

    out = run.cli("rewind", "from-dc2", "--to", start, "--yes", "--reason", "replay test")
    assert f"to: {start}" in out
    # The replay re-applies older versions first; it ends where dc2 is, nothing logged.
    _sql(run.dc2, "INSERT INTO t VALUES (20, 'after the rewind', NULL)")
    assert wait_for(lambda: _arrived(run, 20), 30)
    assert _rows(run.dc1, "lww_t") == _rows(run.dc2, "lww_t")
    assert _rows(run.dc1, "t") == _rows(run.dc2, "t")
    assert _sql(run.dc1, "SELECT COUNT(*) FROM drc.conflicts")[0][0] == conflicts_before
    assert run.channel()["replays"] > 0
    assert f"{run.channel()['replays']:,} replays" in run.cli("list")

    run.cli("rewind", "from-dc2", "--to-time", "2000-01-01 00:00", "--yes")  # all it holds
    _sql(run.dc2, "INSERT INTO t VALUES (21, 'after the second rewind', NULL)")
    assert wait_for(lambda: _arrived(run, 21), 30)
    assert _rows(run.dc1, "t") == _rows(run.dc2, "t")
    assert _sql(run.dc1, "SELECT COUNT(*) FROM drc.conflicts")[0][0] == conflicts_before
    actions = [e["action"] for e in run.cli("history", "from-dc2", "--format", "json", parse=True)]
    assert actions[:2] == ["rewind", "rewind"]


def test_bad_control_input_is_refused_and_changes_nothing(run: Run) -> None:
    result = CliRunner().invoke(cli, ["channel", "pause", "nope", "--api", run.api])
    assert result.exit_code != 0 and "no channel 'nope'" in result.output
    result = CliRunner().invoke(cli, ["channel", "rewind", "from-dc2", "--to", "x", "--yes",
                                      "--api", run.api])  # fmt: skip
    assert result.exit_code != 0 and "scn" in result.output
    result = CliRunner().invoke(cli, ["channel", "skip", "from-dc2", "--yes", "--api", run.api])
    assert result.exit_code != 0 and "not stopped" in result.output
    assert run.channel()["state"] == "running"
