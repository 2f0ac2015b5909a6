"""The source purged the binlog a stopped replicator needs (issue #27; docs/reliability.md).

The replicator is stopped, the source writes on, rotates and purges its binlogs: `drc run`
refuses to resume (it would skip what was written meanwhile), exits at once with one error
naming the binlog file and position it needs and the way out, does not retry in a loop, and
leaves its buffer as it was. The way out's first step (the buffer moved aside) starts capture
again from the source's current position.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.config import load_config
from drc.core.codec import decode_transaction
from drc.eventbuffer import EventBuffer
from drc.node import Node
from drc.replicator.source import split_binlog_name
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from drc.snapshot.driver import run_snapshot
from tests.support.capture import ZERO
from tests.support.config import server_toml
from tests.support.server_faults import purge_all_but_the_newest
from tests.support.servers import drop_everywhere, execute, master_position, query

SCHEMA = "purged_db"
EXIT_TIMEOUT_S = 120.0  # generous: a loaded 2-core host; it exits within seconds


def _captured_up_to(node: Node, server: ServerInfo) -> None:
    """Until the node's buffer holds everything the server's binlog holds now."""
    file, pos = master_position(server)
    target = (split_binlog_name(file)[1], pos)
    assert node.service is not None
    buffer = node.service.buffer

    def there() -> bool:
        last = buffer.last_scn or ZERO
        return (last.log_index, last.log_pos) >= target

    assert wait_for(there, 60, interval=0.05), (buffer.last_scn, file, pos)


def _run_replicator(config: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "drc.cli", "run", "--config", str(config), "--role",
            "replicator"]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=EXIT_TIMEOUT_S)


def test_a_purged_binlog_stops_drc_run_naming_the_position_and_the_way_out(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    dc1 = sandbox.server("dc1")
    drop_everywhere(SCHEMA, dc1)
    config = write_configs(sandbox, tmp_path, schema=SCHEMA)["dc1"]
    buffer_dir = Path(load_config(config).replicator.buffer_dir)
    stop = threading.Event()
    node = Node(load_config(config), "replicator")
    node.start(stop)
    try:
        execute(dc1, f"CREATE DATABASE {SCHEMA}", f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY)")
        execute(dc1, *(f"INSERT INTO {SCHEMA}.t VALUES ({i})" for i in range(20)))
        _captured_up_to(node, dc1)
        assert node.service is not None
        resume_after = node.service.buffer.last_scn
    finally:
        stop.set()
        node.close()
    assert resume_after is not None
    needed = f"mysql-bin.{resume_after.log_index:06d}:{resume_after.log_pos}"

    # Stopped, it misses these; then the source rotates and purges the file it resumes in.
    execute(dc1, *(f"INSERT INTO {SCHEMA}.t VALUES ({i})" for i in range(20, 40)))
    execute(dc1, "FLUSH BINARY LOGS")
    purge_all_but_the_newest(dc1)

    started = time.monotonic()
    refused = _run_replicator(config)
    exited_after = time.monotonic() - started
    assert refused.returncode == 1, refused.stderr[-3000:]
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, refused.stderr[-3000:]
    assert needed in errors[0] and "will not skip ahead" in errors[0]
    assert 'start_from = "current"' in errors[0] and "drc snapshot" in errors[0]
    assert "reconnect" not in refused.stderr.lower(), "it retried what cannot come back"
    with EventBuffer.open_read_only(buffer_dir) as buffer:
        assert buffer.last_scn == resume_after, "the buffer did not move past the gap"

    # The way out: the buffer aside, capture starts again at the source's current position.
    buffer_dir.rename(buffer_dir.with_name("buffer.purged"))
    node = Node(load_config(config), "replicator")
    stop = threading.Event()
    node.start(stop)
    try:
        execute(dc1, *(f"INSERT INTO {SCHEMA}.t VALUES ({i})" for i in range(40, 50)))
        _captured_up_to(node, dc1)
    finally:
        stop.set()
        node.close()
    print(f"\n[source faults] purged binlog: drc run exited after {exited_after:.1f}s: {errors[0]}")


TWO_WAY = "purged2_db"
SNAPSHOT_MASTER = "local[2]"


def _rows(server: ServerInfo) -> list[tuple[Any, ...]]:
    return list(query(server, f"SELECT id, v, n FROM {TWO_WAY}.t ORDER BY id"))


def _write(server: ServerInfo, ids: range, tag: str) -> None:
    """One transaction per id: an insert; every third id also updates the row before it."""
    for i in ids:
        execute(
            server,
            "START TRANSACTION",
            f"INSERT INTO {TWO_WAY}.t VALUES ({i}, '{tag}{i}', 0)",
            f"UPDATE {TWO_WAY}.t SET n = n + 1 WHERE id = {i - 2} AND {i % 3} = 0",
            "COMMIT",
        )


def _converged(dc1: ServerInfo, dc2: ServerInfo, nodes: dict[str, Node]) -> None:
    def same() -> bool:
        for dc, node in nodes.items():
            assert not node.failures(), (dc, node.failures())
        return _rows(dc1) == _rows(dc2)

    assert wait_for(same, 180, interval=0.25), (len(_rows(dc1)), len(_rows(dc2)))
    checksums = [query(s, f"CHECKSUM TABLE {TWO_WAY}.t")[0][1] for s in (dc1, dc2)]
    assert checksums[0] == checksums[1]


def _started(config: Path, stop: threading.Event) -> Node:
    node = Node(load_config(config))
    node.start(stop)
    return node


Change = tuple[int, str]  # (id, operation)


def _captured(
    directories: list[Path], after: tuple[int, int] = (0, 0), upto: tuple[int, int] | None = None
) -> dict[bool, list[Change]]:
    """The row changes of ``TWO_WAY`` in these buffers (one datacenter's capture, its old
    buffer included) at binlog positions in (after, upto], split by DRC-originated or not."""
    found: dict[bool, list[Change]] = {True: [], False: []}
    for directory in directories:
        with EventBuffer.open_read_only(directory) as buffer:
            at = ZERO
            while records := buffer.read_after(at, 1000, 16 << 20):
                for record in records:
                    where = (record.scn.log_index, record.scn.log_pos)
                    if where <= after or (upto is not None and where > upto):
                        continue
                    txn = decode_transaction(record.payload)[0]
                    found[txn.drc_originated].extend(
                        (int((c.after or c.before or {})["id"]), c.op.name)
                        for c in txn.changes
                        if c.schema == TWO_WAY
                    )
                at = records[-1].scn
    return found


def _position(server: ServerInfo) -> tuple[int, int]:
    file, pos = master_position(server)
    return split_binlog_name(file)[1], pos


@pytest.mark.slow
def test_a_purged_binlog_is_repaired_by_the_documented_way_out_and_replication_runs_both_ways(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    """docs/operations.md, Binlog purged, way out 2, end to end between two datacenters that
    write the same table (disjoint rows: dc1 odd ids, dc2 even): dc1's DRC down while both
    write and dc1's binlogs are purged, dc2's DRC restarted meanwhile; dc1's buffer moved
    aside and DRC started again (dc2's changes, whole in dc2's buffer, reach dc1); dc2's
    channel stops with the way out (before: it read the new buffer from its start, silently
    past the gap); on dc2 the table emptied out of the binlog, `drc snapshot` and `drc channel
    resume`; then both equal, and equal again after more writes both ways."""
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    drop_everywhere(TWO_WAY, dc1, dc2)
    configs = write_configs(sandbox, tmp_path, schema=TWO_WAY)
    origin_db = server_toml("channels.origin_db", dc1, password_file=tmp_path / "dc1.password")
    with open(configs["dc2"], "a") as f:
        f.write(f"\n{origin_db}\n")
    buffers = {dc: Path(load_config(path).replicator.buffer_dir) for dc, path in configs.items()}
    stops = {dc: threading.Event() for dc in configs}
    nodes: dict[str, Node] = {}
    try:
        for dc, path in configs.items():
            nodes[dc] = _started(path, stops[dc])
        execute(dc1, f"CREATE DATABASE {TWO_WAY}",
                f"CREATE TABLE {TWO_WAY}.t (id INT PRIMARY KEY, v VARCHAR(40), n INT)")  # fmt: skip
        assert wait_for(lambda: bool(query(dc2, "SHOW DATABASES LIKE %s", (TWO_WAY,))), 60)
        time.sleep(1)  # the table too
        _write(dc1, range(1, 40, 2), "a")
        _write(dc2, range(2, 40, 2), "b")
        _converged(dc1, dc2, nodes)
        time.sleep(1.0)  # dc2's replicator captures what its channel applied last
        dc2_before = _position(dc2)

        # dc1's DRC down while both write; dc1's source rotates and purges what it needs.
        stops["dc1"].set()
        nodes.pop("dc1").close()
        _write(dc1, range(41, 80, 2), "a")
        _write(dc2, range(42, 80, 2), "b")
        execute(dc1, "FLUSH BINARY LOGS")
        purge_all_but_the_newest(dc1)
        refused = _run_replicator(configs["dc1"])
        assert refused.returncode == 1 and "drc snapshot" in refused.stderr, refused.stderr[-3000:]

        # dc2's DRC restarted meanwhile (a deploy, a host reboot): its channel from dc1 knows
        # only its checkpoint, not the buffer it read it from.
        stops["dc2"].set()
        nodes.pop("dc2").close()
        stops["dc2"] = threading.Event()
        nodes["dc2"] = _started(configs["dc2"], stops["dc2"])

        # The way out on dc1: its buffer aside, DRC started again (capture from now on).
        aside = buffers["dc1"].with_name("buffer.purged")
        buffers["dc1"].rename(aside)
        started = time.monotonic()
        stops["dc1"] = threading.Event()
        nodes["dc1"] = _started(configs["dc1"], stops["dc1"])
        dc2_ids = {r[0] for r in _rows(dc2) if r[0] % 2 == 0}
        assert wait_for(lambda: dc2_ids <= {r[0] for r in _rows(dc1)}, 60), "dc2's backlog"

        # dc2's channel from dc1 stops, saying what to do: the changes of the gap never come.
        def stopped() -> bool:
            return nodes["dc2"].channel_status()[0]["state"] == "stopped"

        assert wait_for(stopped, 60, interval=0.2), nodes["dc2"].channel_status()
        error = str(nodes["dc2"].channel_status()[0]["last_error"])
        assert "drc snapshot --channel from-dc1" in error and "sql_log_bin" in error, error
        assert "drc channel resume from-dc1" in error, error
        _write(dc1, range(81, 90, 2), "a")  # dc1 goes on writing meanwhile

        # On dc2: the table emptied out of the binlog, the snapshot, the resume.
        execute(dc2, f"DELETE FROM {TWO_WAY}.t", log_bin=False)
        lines: list[str] = []
        summary = run_snapshot(load_config(configs["dc2"]), "from-dc1", master=SNAPSHOT_MASTER,
                               chunk_rows=20, out=lines.append)  # fmt: skip
        assert summary.copied == {f"{TWO_WAY}.t": len(_rows(dc2))}, lines
        assert any("no longer served" in line for line in lines), lines
        api = nodes["dc2"].api_url
        assert api is not None
        resumed = CliRunner().invoke(
            cli, ["channel", "resume", "from-dc1", "--api", api, "--reason", "snapshot done"]
        )
        assert resumed.exit_code == 0, resumed.output
        _converged(dc1, dc2, nodes)
        repaired_after = time.monotonic() - started
        time.sleep(1.0)
        dc2_repaired = _position(dc2)

        # Both ways again.
        _write(dc1, range(91, 120, 2), "a")
        _write(dc2, range(92, 120, 2), "b")
        _converged(dc1, dc2, nodes)
        time.sleep(1.0)  # each replicator captures what its channel applied last
    finally:
        for dc, node in nodes.items():
            stops[dc].set()
            node.close()

    # Exactly once, none echoed: every change dc2's clients made, once, as DRC-applied in
    # dc1's capture (old and new buffers); every change of dc1's clients after the restart,
    # once, in dc2's (before, the copy carried them); nothing came back as a side's own.
    # Exactly once, none echoed. dc2 -> dc1 never broke: every change of dc2's clients is in
    # dc1's capture (old buffer and new) once as DRC-applied. dc1 -> dc2: what dc1's clients
    # wrote before the fault and after the repair is in dc2's capture once as DRC-applied (in
    # between, the copy brought it: its rows are no change of dc1's clients). Neither side's
    # clients' changes came back to it as its own.
    dc1_captured = _captured([aside, buffers["dc1"]])
    dc2_captured = _captured([buffers["dc2"]])
    assert sorted(dc1_captured[True]) == sorted(dc2_captured[False]), "dc2 -> dc1"
    before = _captured([buffers["dc2"]], upto=dc2_before)[True]
    after = _captured([buffers["dc2"]], after=dc2_repaired)[True]
    assert sorted(before) == sorted(c for c in dc1_captured[False] if c[0] < 40), "before"
    assert sorted(after) == sorted(c for c in dc1_captured[False] if c[0] > 90), "after"
    assert all(i % 2 for i, _ in dc1_captured[False]), "dc2's changes came back as dc1's own"
    assert all(i % 2 == 0 for i, _ in dc2_captured[False]), "dc1's changes came back as dc2's"
    print(f"\n[source faults] purged binlog repaired: equal again {repaired_after:.1f}s after "
          f"dc1's DRC started on a new buffer; snapshot: {lines[-1]}")  # fmt: skip
