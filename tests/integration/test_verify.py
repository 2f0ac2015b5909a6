"""`drc verify` between two live datacenters with writes going on on both sides.

Both datacenters run in this process (replicator, pull API, channel from the other side) with
a two-way workload; verify runs from dc2's config (channel from-dc1: source dc1, target dc2)
on Spark in local mode (one session for the module).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from drc.config import load_config
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo
from drc.verify.driver import Options, Report, run_verify
from tests.support.apply import running_nodes
from tests.support.config import conflict_rule, conflicts_toml, server_toml
from tests.support.servers import connect, count_rows, execute, query

pytestmark = pytest.mark.integration

DB = "verify_db"
SEEDED = 3000  # acct ids 1..SEEDED; the workload touches ids <= LOAD_IDS and its own inserts
LOAD_IDS = 2000
TABLES = (
    f"CREATE TABLE {DB}.acct (id INT PRIMARY KEY, owner VARCHAR(40), bal DECIMAL(12,2), "
    "f FLOAT, d DOUBLE, ts TIMESTAMP(6) NULL, b VARBINARY(16), note TEXT)",
    f"CREATE TABLE {DB}.pair (a VARCHAR(10) NOT NULL, b INT NOT NULL, v INT, PRIMARY KEY (a, b))",
    f"CREATE TABLE {DB}.events (kind VARCHAR(10), v INT)",  # keyless
    f"CREATE TABLE {DB}.lw (id INT PRIMARY KEY, v VARCHAR(20), ts DATETIME(6) NOT NULL)",
)
LWW = conflicts_toml(conflict_rule(f"{DB}.lw", "lww", column="ts"))


def _sql(server: ServerInfo, *statements: str, log_bin: bool = True, db: str | None = DB) -> None:
    execute(server, *statements, log_bin=log_bin, database=db)


def _count(server: ServerInfo, table: str) -> int:
    return count_rows(server, f"{DB}.{table}")


def _tomb_trigger(server: ServerInfo) -> bool:
    found = query(
        server,
        "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s "
        "AND EVENT_OBJECT_TABLE = 'lw' AND ACTION_TIMING = 'AFTER'",
        (DB,),
    )
    return int(found[0][0]) > 0


def _workload(server: ServerInfo, parity: int, stop: threading.Event) -> None:
    """Updates of seeded rows and inserts/deletes of its own rows, ~100 transactions/s. The
    sides write disjoint rows (odd and even ids): with no conflict policy, both sides updating
    one row at once would leave a real difference (each applies the other's image)."""
    rng = random.Random(parity)
    conn = connect(server, database=DB)
    mine: list[int] = []
    next_id = 1_000_000 + parity
    with conn.cursor() as cur:
        while not stop.wait(0.01):
            roll = rng.random()
            if roll < 0.5:
                cur.execute("UPDATE acct SET bal = bal + 1, ts = NOW(6) WHERE id = %s",
                            (rng.randrange(parity, LOAD_IDS, 2),))  # fmt: skip
            elif roll < 0.75 or not mine:
                cur.execute("INSERT INTO acct (id, owner, bal, f) VALUES (%s, %s, 1.5, 0.1)",
                            (next_id, f"dc{parity}"))  # fmt: skip
                mine.append(next_id)
                next_id += 2
            elif roll < 0.9:
                cur.execute("DELETE FROM acct WHERE id = %s", (mine.pop(0),))
            else:
                b = rng.randrange(10 + parity, 60, 2)
                cur.execute("UPDATE pair SET v = v + 1 WHERE a = %s AND b = %s",
                            (f"k{b % 10}", b))  # fmt: skip
    conn.close()


@pytest.fixture(scope="module")
def live(sandbox: SandboxDescription, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Both nodes running, the tables seeded and replicated, the two-way workload on."""
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    for server in (dc1, dc2):
        _sql(server, f"DROP DATABASE IF EXISTS {DB}", log_bin=False, db=None)
    tmp = tmp_path_factory.mktemp("verify")
    configs = write_configs(sandbox, tmp, schema=DB, no_primary_key="match_whole_row")
    for dc, path in configs.items():
        peer = dc2 if dc == "dc1" else dc1
        path.write_text(
            path.read_text()
            + f"""
{server_toml("channels.origin_db", peer, password_file=tmp / (peer.datacenter + ".password"))}
"""
            + LWW
        )
    from drc.spark.session import build_session

    with running_nodes(configs):
        _sql(dc1, f"CREATE DATABASE {DB}", *TABLES, db=None)
        _sql(dc1,
             f"INSERT INTO acct SELECT seq, CONCAT('o', seq), seq / 7, seq / 3, seq / 9, "
             f"'2024-01-01 00:00:00.5' + INTERVAL seq SECOND, UNHEX(HEX(seq)), IF(seq % 5, "
             f"NULL, 'x') FROM seq_1_to_{SEEDED}",
             "INSERT INTO pair SELECT CONCAT('k', seq % 10), seq, 0 FROM seq_1_to_500",
             "INSERT INTO events SELECT 'e', seq % 20 FROM seq_1_to_100",
             "INSERT INTO lw SELECT seq, 'v', '2024-01-01' FROM seq_1_to_100")  # fmt: skip
        assert wait_for(lambda: _count(dc2, "acct") == SEEDED and _count(dc2, "events") == 100
                        and _count(dc2, "lw") == 100, 60), "the seed did not reach dc2"  # fmt: skip
        assert wait_for(lambda: all(_tomb_trigger(s) for s in (dc1, dc2)), 60), "no lww triggers"
        stop = threading.Event()
        writers = [threading.Thread(target=_workload, args=(s, p, stop), daemon=True)
                   for s, p in ((dc1, 1), (dc2, 2))]  # fmt: skip
        for writer in writers:
            writer.start()
        session = build_session("local[2]", "drc-verify-test")
        try:
            yield dc1, dc2, load_config(configs["dc2"]), session, configs["dc2"]
        finally:
            stop.set()
            for writer in writers:
                writer.join(timeout=30)
            session.stop()


def _verify(live: Any, **options: Any) -> Report:
    _, _, config, session, _ = live
    opts = Options(chunk_rows=400, leaf_rows=100, **options)
    return run_verify(config, "from-dc1", opts, out=lambda line: None, session=session)


def _found(report: Report) -> set[tuple[str, str, tuple[Any, ...]]]:
    return {(t.source, d.kind, d.key) for t in report.tables for d in t.differences}


def test_live_two_way_load_without_injected_differences_reports_none(live: Any) -> None:
    for _ in range(10):
        report = _verify(live)
        assert _found(report) == set() and report.differences == 0
        assert [t.skipped for t in report.tables] == [None] * 4
        assert report.rows > SEEDED


@pytest.mark.slow
def test_every_difference_made_outside_the_binlog_is_found_and_repaired(live: Any) -> None:
    dc1, dc2, _, _, _ = live
    _sql(dc2,
         "UPDATE acct SET bal = bal + 1000 WHERE id IN (2501, 2777)",
         "UPDATE acct SET note = NULL WHERE id = 2600",  # 'x' -> NULL
         "DELETE FROM acct WHERE id IN (2502, 2999)",
         "INSERT INTO acct (id, owner) VALUES (2000001, 'only dc2')",
         "UPDATE pair SET v = 99 WHERE a = 'k3' AND b = 453",
         "INSERT INTO events VALUES ('only', 2)",
         log_bin=False)  # fmt: skip
    _sql(dc1, "UPDATE acct SET owner = 'changed on dc1' WHERE id = 2888", log_bin=False)
    expected = {
        (f"{DB}.acct", "different", (2501,)), (f"{DB}.acct", "different", (2777,)),
        (f"{DB}.acct", "different", (2600,)), (f"{DB}.acct", "different", (2888,)),
        (f"{DB}.acct", "missing", (2502,)), (f"{DB}.acct", "missing", (2999,)),
        (f"{DB}.acct", "extra", (2_000_001,)), (f"{DB}.pair", "different", ("k3", 453)),
    }  # fmt: skip
    report = _verify(live)
    found = _found(report)
    keyless = {f for f in found if f[0] == f"{DB}.events"}
    assert found - keyless == expected
    assert [f[1] for f in keyless] == ["extra"]  # the one row only dc2 has, by its hash

    repaired = _verify(live, repair=True)
    assert _found(repaired) == found
    assert sum(t.repaired for t in repaired.tables) == len(expected)

    after = _verify(live)
    assert _found(after) == keyless  # keyless rows are reported, never repaired
    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(source_row IS NOT NULL), SUM(target_row IS NOT NULL) "
                    "FROM drc.verify_repairs WHERE channel = 'from-dc1'")  # fmt: skip
        logged = tuple(int(v) for v in cur.fetchone())
    conn.close()
    assert logged == (len(expected), len(expected) - 1, len(expected) - 2)
    # nothing echoed: dc1 keeps its own (outside the binlog) row, dc2 now has it too
    for server in (dc1, dc2):
        c = connect(server)
        with c.cursor() as cur:
            cur.execute(f"SELECT owner FROM {DB}.acct WHERE id = 2888")
            assert cur.fetchone()[0] == "changed on dc1"
        c.close()


@pytest.mark.slow
def test_lww_a_newer_deletion_wins_over_the_row_the_other_side_kept(live: Any) -> None:
    """A row deleted on one side outside the binlog (its tombstone written by DRC's trigger)
    is deleted on the other side too when the deletion is newer, and restored where it was
    deleted when the surviving row is newer; the report says which before --repair does it."""
    dc1, dc2, _, _, _ = live
    _sql(dc2, "DELETE FROM lw WHERE id IN (10, 20)", log_bin=False)  # tombstones: now
    _sql(dc1, "UPDATE lw SET v = 'later', ts = NOW(6) + INTERVAL 1 HOUR WHERE id = 20",
         log_bin=False)  # fmt: skip
    lw = f"{DB}.lw"

    def shown(report: Report) -> set[tuple[str, tuple[Any, ...], str | None]]:
        return {(d.kind, d.key, d.repair) for t in report.tables if t.source == lw
                for d in t.differences}  # fmt: skip

    expected = {("missing", (10,), "source:delete"), ("missing", (20,), "target:upsert")}
    assert shown(_verify(live)) == expected
    assert shown(_verify(live, repair=True)) == expected
    assert shown(_verify(live)) == set()
    for server in (dc1, dc2):
        conn = connect(server, database=DB)
        with conn.cursor() as cur:
            cur.execute("SELECT id, v FROM lw WHERE id IN (10, 20)")
            assert cur.fetchall() == ((20, "later"),)
        conn.close()


@pytest.mark.slow
def test_verify_runs_on_the_sandbox_standalone_cluster(
    live: Any, sandbox: SandboxDescription
) -> None:
    """`drc verify --master spark://...` (the CLI, its driver in its own process) with the
    chunk comparisons on the sandbox's Spark master and worker, under the two-way load."""
    path = live[4]
    description = Sandbox(sandbox.dir).up(datacenters=len(sandbox.servers), with_spark=True)
    assert description.spark is not None
    done = subprocess.run(
        [sys.executable, "-m", "drc.cli", "verify", "--config", str(path), "--channel",
         "from-dc1", "--tables", f"{DB}.acct,{DB}.pair", "--master",
         description.spark.master_url, "--chunk-rows", "400", "--format", "json"],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["differences"] == 0
    assert [t["source"] for t in report["tables"]] == [f"{DB}.acct", f"{DB}.pair"]
    assert report["tables"][0]["rows"] >= SEEDED and report["tables"][0]["chunks"] > 1
