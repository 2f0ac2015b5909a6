"""Restart with a backlog pending after a config change (issue #27, item 3; docs/reliability.md).

Two datacenters write the same schema (disjoint rows: dc1 odd ids, dc2 even; a keyless table
both insert into), their DRC nodes in this process. Both nodes stop; both sides write on (a
backlog in each buffer and each channel behind); the configs change; the nodes start again:

- a change the backlog cannot take (dc2's channel made to refuse tables without a primary
  key while the backlog holds changes to one) stops that channel with an error naming the
  table and the setting, applying nothing past it;
- the realistic changes then (that one undone): another ``parallel_workers`` on each side
  (1 -> 3 and 3 -> 1), ``transport = "pull"``, ``compression = "lz4"``, other batch limits
  (``max_txns_per_commit``, ``max_commit_delay_ms``, ``wait_ms``), a table added to both
  channels' ``tables`` (it took its first writes while the nodes were down), and a second
  channel on dc2 for a table only it applies.

Every backlog applies exactly once: both sides equal row for row, each side's clients'
changes counted once as DRC-applied in the other side's capture, none came back, no
idempotent fix hid a duplicate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.ledger import stored_changes
from tests.support.servers import drop_everywhere, execute, query

SCHEMA = "cfgchange_db"
TABLES = {
    "t": "(id INT PRIMARY KEY, v VARCHAR(40), n INT)",
    "t2": "(id INT PRIMARY KEY, v VARCHAR(40))",
    "t3": "(id INT PRIMARY KEY, v VARCHAR(40))",
    "k": "(side INT, v INT)",  # no primary key
}
CHANNEL_TABLES = f'"{SCHEMA}.t", "{SCHEMA}.k"'


def _configs(
    sandbox: SandboxDescription, tmp: Path, keys: dict[str, str], second: str | None = None
) -> dict[str, Path]:
    """Both datacenters' configs (buffers in ``tmp``, kept across versions), each channel's
    ``tables`` and keys replaced by ``keys[dc]``; ``second``: a table a second channel of
    dc2's from dc1 applies alone."""
    configs = write_configs(sandbox, tmp, schema=SCHEMA, no_primary_key="match_whole_row")
    listed = f"tables = {json.dumps([f'{SCHEMA}.*'])}"
    for dc, path in configs.items():
        text = path.read_text()
        head, channel = text.split("[[channels]]", 1)
        assert listed in channel, channel  # replaced with keys[dc]
        given = {line.split("=")[0].strip() for line in keys[dc].splitlines()}
        kept = [line for line in channel.split("\n") if line.split("=")[0].strip() not in given]
        channel = "\n".join(kept).replace("\n\n[api]", "\n[api]") + keys[dc]
        if dc == "dc2" and second is not None:
            remote = next(line for line in channel.splitlines() if line.startswith("remote"))
            channel += f'\n[[channels]]\nname = "from-dc1-2"\norigin = "dc1"\n{remote}\n'
            channel += f'tables = ["{SCHEMA}.{second}"]\n'
        path.write_text(head + "[[channels]]" + channel)
    return configs


class Writes:
    """Each side's transactions, numbered on: t (insert, then an update of an earlier row),
    t2 and t3 when asked, k (keyless, both sides)."""

    def __init__(self, servers: dict[str, ServerInfo]) -> None:
        self.servers = servers
        self.next = {"dc1": 1, "dc2": 2}

    def write(self, dc: str, count: int, *tables: str) -> None:
        server = self.servers[dc]
        for _ in range(count):
            i = self.next[dc]
            self.next[dc] += 2
            statements = [
                f"INSERT INTO {SCHEMA}.t VALUES ({i}, 'v{i}', 0)",
                f"UPDATE {SCHEMA}.t SET n = n + 1 WHERE id = {max(i - 10, 1)}",
            ]
            if "k" in tables:
                statements.append(f"INSERT INTO {SCHEMA}.k VALUES ({i % 2}, {i})")
            for table in ("t2", "t3"):
                if table in tables:
                    statements.append(f"INSERT INTO {SCHEMA}.{table} VALUES ({i}, 'w{i}')")
            execute(server, "START TRANSACTION", *statements, "COMMIT")


def _rows(server: ServerInfo, table: str) -> list[tuple[Any, ...]]:
    return list(query(server, f"SELECT * FROM {SCHEMA}.{table} ORDER BY 1, 2"))


def _converged(servers: dict[str, ServerInfo], nodes: dict[str, Node], tables: list[str]) -> None:
    dc1, dc2 = servers["dc1"], servers["dc2"]

    def same() -> bool:
        for dc, node in nodes.items():
            assert not node.failures(), (dc, node.failures())
        return all(_rows(dc1, t) == _rows(dc2, t) for t in tables)

    assert wait_for(same, 180, interval=0.25), {
        t: (len(_rows(dc1, t)), len(_rows(dc2, t))) for t in tables
    }
    for table in tables:
        sums = [query(s, f"CHECKSUM TABLE {SCHEMA}.{table}")[0][1] for s in (dc1, dc2)]
        assert sums[0] == sums[1], table


def _exactly_once(nodes: dict[str, Node]) -> dict[str, dict[bool, int]]:
    time.sleep(1.0)  # each replicator captures what its channels applied last
    captured = {dc: stored_changes(node, SCHEMA) for dc, node in nodes.items()}
    assert captured["dc1"][False] == captured["dc2"][True], captured
    assert captured["dc2"][False] == captured["dc1"][True], captured
    for dc, node in nodes.items():
        for channel in node.channels:
            stats = channel.stats
            fixes = (stats.duplicate_inserts, stats.missing_updates, stats.missing_deletes)
            assert fixes == (0, 0, 0), (dc, channel.name, stats)
    return captured


@pytest.mark.slow
def test_a_backlog_pending_across_config_changes_applies_once_or_stops_clearly(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    servers = {dc: sandbox.server(dc) for dc in ("dc1", "dc2")}
    drop_everywhere(SCHEMA, *servers.values())
    for server in servers.values():  # on both sides, out of the binlog: no DDL to replicate
        creates = [f"CREATE TABLE {SCHEMA}.{t} {d}" for t, d in TABLES.items()]
        execute(server, f"CREATE DATABASE {SCHEMA}", *creates, log_bin=False)
    writes = Writes(servers)
    first = {
        "dc1": f'tables = [{CHANNEL_TABLES}]\nno_primary_key = "match_whole_row"\n'
        "parallel_workers = 3\nmax_txns_per_commit = 50\n",
        "dc2": f'tables = [{CHANNEL_TABLES}]\nno_primary_key = "match_whole_row"\n',
    }
    configs = _configs(sandbox, tmp_path, first)
    with running_nodes(configs) as nodes:
        writes.write("dc1", 30, "k")
        writes.write("dc2", 30, "k")
        _converged(servers, nodes, ["t", "k"])

    # Both nodes down: a backlog on each side, t2 and t3 written for the first time.
    writes.write("dc1", 60, "k", "t2", "t3")
    writes.write("dc2", 60, "k", "t2")

    # A change the backlog cannot take: dc2's channel now refuses tables without a key.
    refusing = {**first, "dc2": f'tables = [{CHANNEL_TABLES}]\nno_primary_key = "refuse"\n'}
    configs = _configs(sandbox, tmp_path, refusing)
    with running_nodes(configs, roles={"dc1": "replicator"}) as nodes:  # dc1's channel: still down

        def stopped() -> bool:
            return nodes["dc2"].channel_status()[0]["state"] == "stopped"

        assert wait_for(stopped, 60, interval=0.2), nodes["dc2"].channel_status()
        error = str(nodes["dc2"].channel_status()[0]["last_error"])
        assert f"{SCHEMA}.k has no primary key" in error and "match_whole_row" in error, error
        held = len(_rows(servers["dc2"], "k"))
        time.sleep(2)
        assert len(_rows(servers["dc2"], "k")) == held, "applied past the refused change"

    # The realistic changes, with the backlogs still pending.
    tables = f'"{SCHEMA}.t", "{SCHEMA}.t2", "{SCHEMA}.k"'
    changed = {
        "dc1": f'tables = [{tables}]\nno_primary_key = "match_whole_row"\n'
        'parallel_workers = 1\nmax_txns_per_commit = 7\ncompression = "lz4"\n',
        "dc2": f'tables = [{tables}]\nno_primary_key = "match_whole_row"\n'
        'parallel_workers = 3\ntransport = "pull"\ncompression = "lz4"\n'
        "max_commit_delay_ms = 300\nwait_ms = 500\n",
    }
    configs = _configs(sandbox, tmp_path, changed, second="t3")
    started = time.monotonic()
    with running_nodes(configs) as nodes:
        _converged(servers, nodes, ["t", "t2", "t3", "k"])
        caught_up = time.monotonic() - started
        writes.write("dc1", 20, "k", "t2", "t3")
        writes.write("dc2", 20, "k", "t2")
        _converged(servers, nodes, ["t", "t2", "t3", "k"])
        captured = _exactly_once(nodes)
    assert len(_rows(servers["dc2"], "t3")) == 80
    print(f"\n[config change] backlogs of 60 transactions a side applied {caught_up:.1f}s after "
          f"the restart (nodes started included); row changes captured {captured}")  # fmt: skip
