"""Counter columns on three real datacenters: each applies the other two's changes (a channel
from each), so a counter converges only if every datacenter's increments reach every other one
exactly once and none comes back (the loop marker), whatever order they arrive in.

Its own sandbox: three MariaDB servers and three DRC nodes, ``cnt3_db.stock`` lww on
``updated_at`` with ``qty`` and ``balance`` counters.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.servers import connect, execute, fresh_database, retrying
from tests.support.servers import query as select

SCHEMA = "cnt3_db"
DATACENTERS = ("dc1", "dc2", "dc3")
CONFLICTS = conflicts_toml(
    conflict_rule("cnt3_db.stock", "lww", column="updated_at", delta_columns=["qty", "balance"]),
    priority=DATACENTERS,
)
STOCK = (
    "CREATE TABLE stock (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty BIGINT NOT NULL, "
    "balance DECIMAL(14,2) NOT NULL, updated_at DATETIME(6) NOT NULL "
    "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))"
)


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxDescription]:
    """Three datacenters, each running a node that applies the other two."""
    directory = Path(tempfile.mkdtemp(prefix="drc-cnt3-"))  # short: socket paths
    box = Sandbox(directory)
    try:
        description = box.up(datacenters=3)
        for server in description.servers:
            fresh_database(server, SCHEMA, STOCK)
        configs = write_configs(
            description, tmp_path_factory.mktemp("counters3"), schema=SCHEMA, extra=CONFLICTS
        )
        with running_nodes(configs):
            yield description
    finally:
        box.down()
        shutil.rmtree(directory, ignore_errors=True)


def rows(server: ServerInfo) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in select(server, f"SELECT * FROM {SCHEMA}.stock ORDER BY id")]


def test_increments_on_three_datacenters_at_once_converge_to_their_sum(
    three: SandboxDescription,
) -> None:
    servers = [three.server(dc) for dc in DATACENTERS]
    execute(
        servers[0], f"INSERT INTO {SCHEMA}.stock (id, name, qty, balance) VALUES (1, 's', 0, 0)"
    )
    assert wait_for(lambda: all(rows(s) for s in servers), 60)
    per_side, amounts = 120, {"dc1": (5, "1.25"), "dc2": (-2, "-0.40"), "dc3": (11, "0.05")}
    errors: list[BaseException] = []

    def hammer(server: ServerInfo) -> None:
        qty, money = amounts[server.datacenter]
        try:
            conn = connect(server, database=SCHEMA)
            with conn.cursor() as cur:
                for i in range(per_side):
                    name = f"{server.datacenter}-{i}" if i % 10 == 0 else None
                    retrying(lambda n=name: cur.execute(
                        "UPDATE stock SET qty = qty + %s, balance = balance + %s, "
                        "name = COALESCE(%s, name) WHERE id = 1",
                        (qty, money, n),
                    ))  # fmt: skip
            conn.close()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(s,)) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    qty = per_side * sum(q for q, _ in amounts.values())
    balance = per_side * sum(Decimal(m) for _, m in amounts.values())

    def converged() -> bool:
        found = [rows(s) for s in servers]
        return all(f == found[0] for f in found) and found[0][0][2:4] == (qty, balance)

    assert wait_for(converged, 90), [rows(s) for s in servers]
