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

from drc.config import load_config
from drc.eventbuffer import EventBuffer
from drc.node import Node
from drc.replicator.source import split_binlog_name
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.capture import ZERO
from tests.support.server_faults import purge_all_but_the_newest
from tests.support.servers import drop_everywhere, execute, master_position

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
