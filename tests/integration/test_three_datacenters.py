"""Three datacenters in a full mesh under two-way writes on shared rows, with lww, and a kill -9
of one datacenter's DRC process mid-load: all three converge, nothing echoed, nothing applied
twice or lost.

Its own sandbox (three MariaDB servers and a ZooKeeper); each datacenter runs ``drc run`` as a
process (tests/support/mesh.py: replicator + pull API + one channel from each other datacenter,
the configs of drc.sandbox.demo.write_configs with ``mesh_db.shared`` lww on updated_at and
its ``hits`` a counter). docs/operations.md "Three datacenters" shows one of these configs.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import Sandbox, SandboxDescription
from tests.support.apply import apply_user, assert_same
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.mesh import SCHEMA, TABLES, MeshWriter, Nodes, has_triggers, rows, seed_sql
from tests.support.servers import execute, fresh_database
from tests.support.two_way import inserted

DATACENTERS = ("dc1", "dc2", "dc3")
CONFLICTS = conflicts_toml(
    conflict_rule(f"{SCHEMA}.shared", "lww", column="updated_at", delta_columns=["hits"]),
    priority=DATACENTERS,
)


@pytest.fixture(scope="module")
def box() -> Iterator[SandboxDescription]:
    directory = Path(tempfile.mkdtemp(prefix="drc-mesh-"))  # short: socket paths
    sandbox = Sandbox(directory)
    try:
        yield sandbox.up(datacenters=3)
    finally:
        sandbox.down()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_full_mesh_converges_exactly_once_across_a_kill_9(
    box: SandboxDescription, tmp_path: Path
) -> None:
    servers = {dc: box.server(dc) for dc in DATACENTERS}
    for server in servers.values():
        fresh_database(server, SCHEMA, *TABLES)
        execute(server, seed_sql(), log_bin=False, database=SCHEMA)
        apply_user(server)
    configs = write_configs(box, tmp_path / "configs", schema=SCHEMA, extra=CONFLICTS)
    ports = {dc: tomllib.loads(path.read_text())["api"]["port"] for dc, path in configs.items()}
    nodes = Nodes(configs, ports, tmp_path)
    writers = [MeshWriter(servers[dc], n + 1, seed=n) for n, dc in enumerate(DATACENTERS)]
    try:
        for dc in DATACENTERS:
            nodes.start(dc)
        assert wait_for(lambda: all(has_triggers(s) for s in servers.values()), 90), {
            dc: nodes.tail(dc) for dc in DATACENTERS
        }
        for writer in writers:
            writer.thread.start()

        def flowing() -> bool:  # every datacenter holds a ledger row of each other one
            nodes.check_running()
            return all(
                len({r[1] for r in rows(s, "ledger")}) == len(DATACENTERS) for s in servers.values()
            )

        assert wait_for(flowing, 90), {dc: nodes.tail(dc) for dc in DATACENTERS}
        time.sleep(5)
        nodes.kill_9("dc2")  # its replicator and both channels into dc2, mid-load
        time.sleep(5)  # every datacenter still writes; dc1 and dc3 cannot read dc2
        nodes.start("dc2")
        time.sleep(15)
        for writer in writers:
            writer.halt()
        written = {w.server.datacenter: w.written for w in writers}
        everything = sorted(i for ids in written.values() for i in ids)

        def converged() -> bool:
            nodes.check_running()
            found = [(rows(s, "ledger"), rows(s, "shared")) for s in servers.values()]
            return [r[0] for r in found[0][0]] == everything and all(f == found[0] for f in found)

        stopped = time.monotonic()
        assert wait_for(converged, 180, interval=1.0), (
            [len(rows(s, "ledger")) for s in servers.values()],
            len(everything),
            {dc: nodes.tail(dc) for dc in DATACENTERS},
        )
        took = time.monotonic() - stopped
        nodes.wait_captured(servers)
    finally:
        for writer in writers:
            writer.stop.set()
        nodes.stop_all()

    for dc in ("dc2", "dc3"):
        assert_same(servers["dc1"], servers[dc], SCHEMA)
    # Every transaction counted once in every datacenter's counter (a replay would add its
    # hit twice, a loss not at all).
    hits = sum(r[2] for r in rows(servers["dc1"], "shared"))
    assert hits == len(everything), f"{hits} hits for {len(everything)} transactions"
    # Each capture: its own clients' ledger rows once, in commit order, and every other
    # datacenter's once, as DRC-applied (an echo would show one of its own as applied, or a
    # duplicate).
    for dc in DATACENTERS:
        buffer = configs[dc].parent / dc / "buffer"
        assert inserted(buffer, SCHEMA, applied=False, table="ledger") == written[dc], dc
        others = sorted(i for other, ids in written.items() if other != dc for i in ids)
        assert sorted(inserted(buffer, SCHEMA, applied=True, table="ledger")) == others, dc
    print(
        "three datacenters:",
        {dc: len(ids) for dc, ids in written.items()},
        f"transactions written; hits {hits}; converged {took:.1f} s after the writes stopped",
    )
