"""One transaction of a million rows crosses from dc1 to dc2 once, echoes nowhere, and does so
again across a kill -9 of the apply side in the middle of applying it, and across a kill -9 of
the capture side in the middle of capturing it; the peak memory of every DRC process (VmHWM) is
recorded, and the apply side's is bounded (docs/reliability.md).

``DRC_LARGE_TXN_ROWS`` sets the transaction's rows (default 300,000, to keep CI short; the
figures in docs/reliability.md are of 1,000,000).

Two ``drc run`` processes (tests/support/mesh.py ``Nodes``), one per datacenter of the shared
sandbox, with the configs of drc.sandbox.demo.write_configs on ``huge_db``: dc1's replicator
captures the transaction in fragments (``[replicator]`` defaults), dc2's channel applies it as
one target transaction written piece by piece (drc.apply.streamed), and dc1's channel from dc2
must find nothing to apply (what dc2 applied is DRC-originated).
"""

from __future__ import annotations

import os
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import assert_same
from tests.support.mesh import Nodes
from tests.support.servers import connect, drop_everywhere, execute

SCHEMA = "huge_db"
ROWS = int(os.environ.get("DRC_LARGE_TXN_ROWS", "300000"))
TABLE = "CREATE TABLE huge_db.t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NOT NULL)"
# Generous on purpose: a bound, not a benchmark (what was measured is in docs/reliability.md).
MAX_PEAK_KB = 2 << 20
# The apply side holds the transaction's records (~40 B a row here) and one piece, not its
# decoded rows: what dc2's process gained over its peak before the transaction, by the time
# the rows are there, stays under this (81-107 MB measured for a million rows). Holding the
# transaction whole it gained ~0.6 kB per row (~180 MB for 300,000 rows, ~590 MB for a
# million). Later the same process captures the applied copy and serves it (filtered out) to
# dc1: capture's fragments and the pull API's page, bounded by MAX_PEAK_KB only.
MAX_APPLY_GROWTH_KB = 140 << 10


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM) so far, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def spilled_bytes(pid: int) -> int:
    """Bytes of capture's spill file (the fragments of an uncommitted transaction: an unnamed
    temporary file in the buffer directory, drc.replicator.spill) open in ``pid``, or 0."""
    fds = Path(f"/proc/{pid}/fd")
    total = 0
    for fd in fds.iterdir():
        try:
            if "buffer" in os.readlink(fd) and os.readlink(fd).endswith("(deleted)"):
                total += fd.stat().st_size
        except OSError:
            continue  # closed meanwhile
    return total


def count(server: ServerInfo, uncommitted: bool = False) -> int:
    conn = connect(server)
    with conn.cursor() as cur:
        if uncommitted:  # what an apply transaction still open has written so far
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
        cur.execute(f"SELECT COUNT(*) FROM {SCHEMA}.t")
        found = int(cur.fetchone()[0])
    conn.close()
    return found


def insert_large(server: ServerInfo, first: int) -> None:
    """One transaction: ROWS rows from ``first`` on (the sequence engine's seq_1_to_N)."""
    execute(
        server,
        f"INSERT INTO {SCHEMA}.t SELECT seq + {first - 1}, CONCAT('value ', seq), seq % 7 "
        f"FROM seq_1_to_{ROWS}",
        database=SCHEMA,
    )


def channel(nodes: Nodes, dc: str) -> dict[str, Any]:
    found = nodes.status(dc)
    assert found is not None, nodes.tail(dc)
    return found["channels"][0]  # type: ignore[no-any-return]


@pytest.fixture
def nodes(sandbox: SandboxDescription, tmp_path: Path) -> Any:
    servers = {dc: sandbox.server(dc) for dc in ("dc1", "dc2")}
    drop_everywhere(SCHEMA, *servers.values())
    for server in servers.values():
        execute(server, f"CREATE DATABASE {SCHEMA}", TABLE, log_bin=False)
    configs = write_configs(sandbox, tmp_path / "configs", schema=SCHEMA)
    ports = {dc: tomllib.loads(path.read_text())["api"]["port"] for dc, path in configs.items()}
    running = Nodes(configs, ports, tmp_path)
    try:
        for dc in servers:
            running.start(dc)

        def started() -> bool:
            running.check_running()
            return all(
                (s := running.status(dc)) is not None
                and s["channels"]
                and s["channels"][0]["state"] == "running"
                for dc in servers
            )

        assert wait_for(started, 90), {dc: running.tail(dc) for dc in servers}
        baseline = {dc: peak_rss_kb(proc.pid) for dc, proc in running.procs.items()}
        yield running, servers, baseline
    finally:
        running.stop_all()


def wait_applied(nodes: Nodes, dc2: ServerInfo, rows: int) -> tuple[float, int]:
    """Until dc2 holds ``rows`` rows; the seconds it took, and dc2's process's peak RSS then
    (the apply's, before its replicator has captured much of the applied copy)."""
    began = time.monotonic()

    def there() -> bool:
        nodes.check_running()
        return count(dc2) == rows

    assert wait_for(there, 900, 0.5), (count(dc2), nodes.tail("dc2"))
    return time.monotonic() - began, peak_rss_kb(nodes.procs["dc2"].pid)


def assert_not_echoed(nodes: Nodes, servers: dict[str, ServerInfo]) -> None:
    """dc1's channel from dc2 wrote nothing (dc2's copy is DRC-originated, never sent back),
    and dc2's channel had nothing to fix (no row arrived twice)."""
    nodes.wait_captured(servers, timeout=600)  # the applied copy is captured too: a while
    time.sleep(2)  # dc1's channel reads dc2's capture of the applied transaction, if it would
    assert channel(nodes, "dc1")["rows"] == 0, channel(nodes, "dc1")
    assert channel(nodes, "dc2")["duplicate_inserts"] == 0, channel(nodes, "dc2")


def assert_bounded(
    running: Nodes, base: dict[str, int], what: str, applied: tuple[float, int], **killed: int
) -> None:
    """Every process under the generous bound, and dc2's (the apply side) grown by less than
    MAX_APPLY_GROWTH_KB over its peak before the transaction when the rows were there (if it
    ran from the start); printed for the docs."""
    took, applying = applied
    peaks = {dc: peak_rss_kb(proc.pid) for dc, proc in running.procs.items()}
    print(f"{ROWS} rows {what} {took:.0f} s; peak RSS kB {peaks}, dc2's when applied "
          f"{applying}, before the transaction {base}, killed processes {killed}")  # fmt: skip
    assert all(peak < MAX_PEAK_KB for peak in [*peaks.values(), *killed.values()]), peaks
    if "dc2" in base:  # the process that applied it from the start (not restarted)
        assert applying - base["dc2"] < MAX_APPLY_GROWTH_KB, (applying, base)


@pytest.mark.slow
def test_a_million_row_transaction_crosses_once_with_bounded_memory(nodes: Any) -> None:
    running, servers, base = nodes
    insert_large(servers["dc1"], 1)
    applied = wait_applied(running, servers["dc2"], ROWS)
    assert_not_echoed(running, servers)
    assert_same(servers["dc1"], servers["dc2"], SCHEMA)
    assert_bounded(running, base, "applied on dc2, after the commit on dc1,", applied)


@pytest.mark.slow
def test_a_million_row_transaction_survives_a_kill_9_of_the_apply_side(nodes: Any) -> None:
    running, servers, base = nodes
    insert_large(servers["dc1"], 1)
    # The moment dc2's apply transaction holds some of the rows, not all.
    assert wait_for(lambda: 0 < count(servers["dc2"], uncommitted=True) < ROWS, 600, 0.5), (
        running.tail("dc2")
    )
    killed_peak = peak_rss_kb(running.procs["dc2"].pid)
    killed_growth = killed_peak - base.pop("dc2")
    running.kill_9("dc2")
    assert count(servers["dc2"]) == 0, "the killed apply transaction left no row"
    running.start("dc2")
    applied = wait_applied(running, servers["dc2"], ROWS)
    assert_not_echoed(running, servers)
    assert_same(servers["dc1"], servers["dc2"], SCHEMA)
    assert_bounded(running, base, "applied on dc2 after the restart", applied, dc2=killed_peak)
    assert killed_growth < MAX_APPLY_GROWTH_KB, killed_growth


@pytest.mark.slow
def test_a_million_row_transaction_survives_a_kill_9_of_the_capture_side(nodes: Any) -> None:
    running, servers, base = nodes
    insert_large(servers["dc1"], 1)
    # The moment dc1's capture has stored some fragments of it (spilled until its commit
    # event is read), not all: nothing of it is in the buffer yet, nor on dc2.
    pid = running.procs["dc1"].pid
    # A fifth of it or so: its records take ~40 bytes a row.
    assert wait_for(lambda: spilled_bytes(pid) > ROWS * 8, 600, 0.1), running.tail("dc1")
    spilled = spilled_bytes(pid)
    killed_peak = peak_rss_kb(pid)
    running.kill_9("dc1")
    assert count(servers["dc2"], uncommitted=True) == 0, "dc2 saw part of it"
    base.pop("dc1")
    running.start("dc1")
    applied = wait_applied(running, servers["dc2"], ROWS)
    assert_not_echoed(running, servers)
    assert_same(servers["dc1"], servers["dc2"], SCHEMA)
    print(f"dc1 killed with {spilled} bytes of fragments spilled")
    assert_bounded(running, base, "applied on dc2 after dc1's restart", applied, dc1=killed_peak)
