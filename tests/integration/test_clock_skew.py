"""lww between two datacenters whose clocks differ by 5 s, either way: what wins is decided by the
skewed clocks, and the datacenters converge anyway (docs/configuration.md "What lww guarantees
under clock skew").

dc2 plays the host whose clock is off by ``SKEW_S``: its DRC node runs on a wall clock that far
off (drc.node.Node ``wall_clock``: its heartbeats and lag) and every session of its workload
moves its server clock by as much (``SET timestamp``, which moves NOW(), the ON UPDATE
CURRENT_TIMESTAMP column, DRC's conflict triggers and the binlog event times, as a host clock
would). Both nodes run in this process on the shared sandbox's dc1 and dc2, with the tables of
tests/support/mesh.py (``shared`` lww on updated_at with the counter ``hits``; ``ledger``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import assert_same, running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.mesh import SCHEMA, TABLES, MeshWriter, has_triggers, rows, seed_sql
from tests.support.servers import connect, execute, fresh_database, query
from tests.support.two_way import inserted

SKEW_S = 5.0
CONFLICTS = conflicts_toml(
    conflict_rule(f"{SCHEMA}.shared", "lww", column="updated_at", delta_columns=["hits"])
)


class Skewed:
    """The two nodes, dc2's clock ``skew`` seconds off."""

    def __init__(
        self, sandbox: SandboxDescription, skew: float, nodes: dict[str, Any], configs: Any
    ) -> None:
        self.dc1, self.dc2 = sandbox.server("dc1"), sandbox.server("dc2")
        self.skew, self.nodes = skew, nodes
        self.buffers = {dc: path.parent / dc / "buffer" for dc, path in configs.items()}

    def clock(self, server: ServerInfo) -> float:
        return self.skew if server is self.dc2 else 0.0

    def equal(self) -> bool:
        for node in self.nodes.values():
            assert not node.failures(), node.failures()
        return all(rows(self.dc1, t) == rows(self.dc2, t) for t in ("shared", "ledger"))

    def converged(self, timeout: float = 120.0) -> None:
        """Equal twice, two seconds apart (the lag cannot tell: it is off by the skew)."""

        def settled() -> bool:
            if not self.equal():
                return False
            time.sleep(2.0)
            return self.equal()

        assert wait_for(settled, timeout, interval=0.5), (
            rows(self.dc1, "shared"),
            rows(self.dc2, "shared"),
        )


@pytest.fixture(params=[SKEW_S, -SKEW_S], ids=["dc2-ahead", "dc2-behind"])
def skewed(
    sandbox: SandboxDescription, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Skewed]:
    skew = float(request.param)
    for server in (sandbox.server("dc1"), sandbox.server("dc2")):
        fresh_database(server, SCHEMA, *TABLES)
        execute(server, seed_sql(), log_bin=False, database=SCHEMA)
        forget_conflicts(server)
    configs = write_configs(sandbox, tmp_path / "configs", schema=SCHEMA, extra=CONFLICTS)
    with running_nodes(configs, clocks={"dc2": lambda: time.time() + skew}) as nodes:
        run = Skewed(sandbox, skew, nodes, configs)
        assert wait_for(lambda: has_triggers(run.dc1) and has_triggers(run.dc2), 60)
        yield run


def write_unseen(run: Skewed, key: int, first: ServerInfo, second: ServerInfo) -> None:
    """``first`` updates ``key``, then, a second later, ``second`` does, before either sees the
    other's write: each holds its row lock until both wrote, ``first`` commits, then
    ``second`` (whose channel waits on the lock with ``first``'s change in hand)."""
    sessions = []
    for server in (first, second):
        conn = connect(server, autocommit=False, database=SCHEMA)
        cur = conn.cursor()
        cur.execute("SET timestamp = UNIX_TIMESTAMP(SYSDATE(6)) + %s", (run.clock(server),))
        cur.execute("SELECT * FROM shared WHERE id = %s FOR UPDATE", (key,))
        cur.execute("UPDATE shared SET v = %s WHERE id = %s", (server.datacenter, key))
        sessions.append(conn)
        time.sleep(1.0)
    sessions[0].commit()
    time.sleep(0.3)
    sessions[1].commit()
    for conn in sessions:
        conn.close()


def forget_conflicts(server: ServerInfo) -> None:
    """No entry of an earlier run in drc.conflicts (the shared sandbox keeps it)."""
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE DATABASE IF NOT EXISTS drc")
        if cur.execute("SHOW TABLES FROM drc LIKE 'conflicts'"):
            cur.execute("DELETE FROM drc.conflicts WHERE schema_name = %s", (SCHEMA,))
    conn.close()


def conflicts_logged(server: ServerInfo) -> int:
    found = query(server, "SELECT COUNT(*) FROM drc.conflicts WHERE schema_name = %s", (SCHEMA,))
    return int(found[0][0])


def converged_row(run: Skewed, key: int) -> tuple[Any, ...]:
    run.converged()
    return next(r for r in rows(run.dc1, "shared") if r[0] == key)


@pytest.mark.slow
def test_lww_under_clock_skew_picks_by_the_skewed_clocks_and_converges(skewed: Skewed) -> None:
    run = skewed
    ahead, behind = (run.dc2, run.dc1) if run.skew > 0 else (run.dc1, run.dc2)
    # Concurrent writes: the side whose clock is ahead wrote a second FIRST, and still wins.
    write_unseen(run, 1, ahead, behind)
    won = converged_row(run, 1)
    assert won[1] == ahead.datacenter, won
    # A write made after seeing the other side's is newer however late its clock is: the
    # before-update trigger moves its time past the row's (drc.conflicts.tombstones).
    execute(
        behind,
        f"SET timestamp = UNIX_TIMESTAMP(SYSDATE(6)) + {run.clock(behind)}",
        f"UPDATE {SCHEMA}.shared SET v = 'seen' WHERE id = 1",
    )
    seen = converged_row(run, 1)
    assert seen[1] == "seen" and seen[3] > won[3], (won, seen)

    # Both sides hammer the same rows at once for a while.
    writers = [
        MeshWriter(s, n, seed=n, skew_s=run.clock(s)) for n, s in ((1, run.dc1), (2, run.dc2))
    ]
    for writer in writers:
        writer.thread.start()
    time.sleep(15)
    for writer in writers:
        writer.halt()
    run.converged()
    assert_same(run.dc1, run.dc2, SCHEMA)
    total = sum(len(w.written) for w in writers)
    assert sum(r[2] for r in rows(run.dc1, "shared")) == total, "each hit counted once"
    written = {w.server.datacenter: w.written for w in writers}
    lags = {dc: [c.report()["lag_seconds"] for c in n.channels] for dc, n in run.nodes.items()}
    logged = [conflicts_logged(s) for s in (run.dc1, run.dc2)]
    print(f"skew {run.skew:+} s: {total} transactions, conflicts logged {logged}, lag {lags}")
    time.sleep(2.0)  # each replicator captures what its channel applied last
    for dc, other in (("dc1", "dc2"), ("dc2", "dc1")):
        buffer = run.buffers[dc]
        assert inserted(buffer, SCHEMA, applied=False, table="ledger") == written[dc]
        assert sorted(inserted(buffer, SCHEMA, applied=True, table="ledger")) == written[other]
