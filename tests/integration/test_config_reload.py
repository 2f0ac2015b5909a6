"""SIGHUP makes a running ``drc run`` take a channel's new table selection, without a restart.

Both datacenters run as real ``drc run`` processes. dc1's channel first applies only
``rl_db.a``; after its config file is edited (``rl_db.*`` minus ``rl_db.a``) and the process
gets SIGHUP, dc2's later writes to ``b`` arrive and those to ``a`` no longer do, the process
kept its PID, and the audit trail has the reload. A broken file on SIGHUP changes nothing.
"""

from __future__ import annotations

import os
import re
import signal
import tomllib
from pathlib import Path

import httpx

from drc.sandbox.demo import start_nodes, wait_healthy, write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.servers import connect, fresh_database

SCHEMA = "rl_db"


def _sql(server: ServerInfo, statement: str, params: object = None) -> list[tuple[object, ...]]:
    conn = connect(server, database=SCHEMA)
    with conn.cursor() as cur:
        cur.execute(statement, params)
        rows = list(cur.fetchall())
    conn.close()
    return rows


def _has(server: ServerInfo, table: str, key: int) -> bool:
    return bool(_sql(server, f"SELECT 1 FROM {table} WHERE id = %s", (key,)))


def _select(path: Path, tables: str, exclude: str) -> None:
    text = path.read_text()
    channel = text.index("[[channels]]")
    head, tail = text[:channel], text[channel:]
    tail = re.sub(r"^exclude = .*\n", "", tail, flags=re.M)
    tail = re.sub(r"^tables = .*$", f"tables = {tables}\nexclude = {exclude}", tail, count=1,
                  flags=re.M)  # fmt: skip
    path.write_text(head + tail)


def test_sighup_changes_the_tables_a_channel_applies(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    for server in (dc1, dc2):
        tables = (f"CREATE TABLE {SCHEMA}.{table} (id INT PRIMARY KEY)" for table in ("a", "b"))
        fresh_database(server, SCHEMA, *tables, log_bin=False)
    configs = write_configs(sandbox, tmp_path, schema=SCHEMA)
    _select(configs["dc1"], f'["{SCHEMA}.a"]', "[]")
    procs = start_nodes(configs, tmp_path)
    try:
        wait_healthy(configs)
        _sql(dc2, "INSERT INTO b VALUES (1)")
        _sql(dc2, "INSERT INTO a VALUES (1)")
        assert wait_for(lambda: _has(dc1, "a", 1), 60)
        assert not _has(dc1, "b", 1)  # applied in order: b's row came first and was left out

        _select(configs["dc1"], f'["{SCHEMA}.*"]', f'["{SCHEMA}.a"]')
        pid = procs["dc1"].pid
        os.kill(pid, signal.SIGHUP)
        port = tomllib.loads(configs["dc1"].read_text())["api"]["port"]
        history = f"http://127.0.0.1:{port}/v1/channels/from-dc2/history"

        def reloaded() -> bool:
            return any(e["action"] == "reload" for e in httpx.get(history, timeout=5).json())

        assert wait_for(reloaded, 30)
        _sql(dc2, "INSERT INTO a VALUES (2)")
        _sql(dc2, "INSERT INTO b VALUES (2)")
        assert wait_for(lambda: _has(dc1, "b", 2), 60)
        assert not _has(dc1, "a", 2)  # excluded now
        assert procs["dc1"].poll() is None and procs["dc1"].pid == pid  # no restart
        entry = next(e for e in httpx.get(history, timeout=5).json() if e["action"] == "reload")
        assert entry["actor"] == "SIGHUP"
        assert entry["detail"]["after"] == {"tables": [f"{SCHEMA}.*"], "exclude": [f"{SCHEMA}.a"]}

        configs["dc1"].write_text("this is [not toml")
        os.kill(pid, signal.SIGHUP)
        _sql(dc2, "INSERT INTO b VALUES (3)")
        assert wait_for(lambda: _has(dc1, "b", 3), 60)  # still running the last good config
        log = tmp_path / "dc1.log"
        assert wait_for(lambda: "config reload refused, nothing changed" in log.read_text(), 30)
        assert procs["dc1"].poll() is None
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            proc.wait(timeout=60)
