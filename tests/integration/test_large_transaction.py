"""One transaction of a million rows crosses from dc1 to dc2 once, echoes nowhere, and does so
again across a kill -9 of the apply side in the middle of applying it, and across a kill -9 of
the capture side in the middle of capturing it; the peak memory of every DRC process is
recorded and bounded (docs/reliability.md): what each gained in anonymous memory (RssAnon,
sampled: the heap, not the EventBuffer's segments, which are mapped files) stays under a bound
that does not grow with the transaction, and its VmHWM is printed.

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
import threading
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
# What any DRC process may gain in anonymous memory over its own before the transaction, at
# any size of it: capture holds one fragment and a bounded read-ahead of decoded rows, the
# pull API and stream serve pages of the transaction, and the apply side holds a few pages
# and one piece (split pages, drc.client.subscriber). Measured 30-60 MB at 300,000 and at a
# million rows. Before (whole pages, capture's read-ahead bounded by events), at 300,000
# rows: dc2's apply 185 MB; at a million: 150-210 MB in each process.
MAX_ANON_GROWTH_KB = 110 << 10


def peak_rss_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM) so far, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def anon_kb(pid: int) -> int | None:
    """The process's anonymous resident memory now, in kB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class AnonPeaks:
    """Each DRC process's peak RssAnon, sampled every 50 ms in a thread, by (dc, pid): killed
    and restarted processes keep their own."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self.peaks: dict[tuple[str, int], int] = {}
        self.base = {dc: anon_kb(proc.pid) or 0 for dc, proc in nodes.procs.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            for dc, proc in list(self.nodes.procs.items()):
                now = anon_kb(proc.pid)
                if now is not None and now > self.peaks.get((dc, proc.pid), 0):
                    self.peaks[(dc, proc.pid)] = now

    def growth(self) -> dict[str, int]:
        """Per process (``dc`` or ``dc#2`` for a restarted one): kB gained over its dc's
        first process before the transaction."""
        found: dict[str, int] = {}
        for (dc, _pid), peak in self.peaks.items():
            name = dc if dc not in found else f"{dc}#{sum(k.startswith(dc) for k in found) + 1}"
            found[name] = peak - self.base[dc]
        return found

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


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
        anon = AnonPeaks(running)
        try:
            yield running, servers, baseline, anon
        finally:
            anon.close()
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
    running: Nodes,
    base: dict[str, int],
    anon: AnonPeaks,
    what: str,
    applied: tuple[float, int],
    **killed: int,
) -> None:
    """Every process (killed ones too) grew by less than MAX_ANON_GROWTH_KB of anonymous
    memory, and its VmHWM is under the generous bound; printed for the docs."""
    took, applying = applied
    peaks = {dc: peak_rss_kb(proc.pid) for dc, proc in running.procs.items()}
    growth = anon.growth()
    print(f"{ROWS} rows {what} {took:.0f} s; anonymous memory gained kB {growth}; peak RSS "
          f"(VmHWM) kB {peaks}, dc2's when applied {applying}, before the transaction {base}, "
          f"killed processes {killed}")  # fmt: skip
    assert all(peak < MAX_PEAK_KB for peak in [*peaks.values(), *killed.values()]), peaks
    assert len(growth) >= 2 and all(kb < MAX_ANON_GROWTH_KB for kb in growth.values()), growth


@pytest.mark.slow
def test_a_million_row_transaction_crosses_once_with_bounded_memory(nodes: Any) -> None:
    running, servers, base, anon = nodes
    insert_large(servers["dc1"], 1)
    applied = wait_applied(running, servers["dc2"], ROWS)
    assert_not_echoed(running, servers)
    assert_same(servers["dc1"], servers["dc2"], SCHEMA)
    assert_bounded(running, base, anon, "applied on dc2, after the commit on dc1,", applied)


@pytest.mark.slow
def test_a_million_row_transaction_survives_a_kill_9_of_the_apply_side(nodes: Any) -> None:
    running, servers, base, anon = nodes
    insert_large(servers["dc1"], 1)
    # The moment dc2's apply transaction holds some of the rows, not all.
    assert wait_for(lambda: 0 < count(servers["dc2"], uncommitted=True) < ROWS, 600, 0.5), (
        running.tail("dc2")
    )
    killed_peak = peak_rss_kb(running.procs["dc2"].pid)
    running.kill_9("dc2")
    assert count(servers["dc2"]) == 0, "the killed apply transaction left no row"
    running.start("dc2")
    applied = wait_applied(running, servers["dc2"], ROWS)
    assert_not_echoed(running, servers)
    assert_same(servers["dc1"], servers["dc2"], SCHEMA)
    assert_bounded(
        running, base, anon, "applied on dc2 after the restart", applied, dc2=killed_peak
    )


@pytest.mark.slow
def test_a_million_row_transaction_survives_a_kill_9_of_the_capture_side(nodes: Any) -> None:
    running, servers, base, anon = nodes
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
    running.start("dc1")
    applied = wait_applied(running, servers["dc2"], ROWS)
    assert_not_echoed(running, servers)
    assert_same(servers["dc1"], servers["dc2"], SCHEMA)
    print(f"dc1 killed with {spilled} bytes of fragments spilled")
    assert_bounded(
        running, base, anon, "applied on dc2 after dc1's restart", applied, dc1=killed_peak
    )
