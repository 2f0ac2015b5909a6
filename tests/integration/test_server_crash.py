"""kill -9 of MariaDB itself while both datacenters write (issue #27; docs/reliability.md).

Each datacenter's server is both a source (its replicator reads its binlog) and a target (the
other side's channel writes into it). A server killed with SIGKILL and restarted on the same
data dir (InnoDB and binlog crash recovery) must cost nothing: its replicator reconnects and
resumes from its buffer's last SCN in the binlog the server recovered, the channel writing into
it waits and resumes from its checkpoint (committed in the same target transaction as the rows,
so a transaction cut by the kill is either wholly there or wholly retried). Then both sides are
equal row for row, every transaction applied exactly once, none echoed
(tests/support/link_faults.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drc.sandbox.sandbox import SandboxDescription
from tests.support.link_faults import Pair, linked_pair
from tests.support.server_faults import kill_9, restart
from tests.support.servers import execute, master_position

DOWN_S = 3.0  # the server stays dead this long while the other side writes on
AFTER_S = 2.0  # writes go on this long after the last restart
ROTATIONS = 3  # kill -9 right after FLUSH BINARY LOGS, this many times


def _finish(pair: Pair) -> None:
    time.sleep(AFTER_S)
    pair.stop_writing()
    pair.wait_converged()
    pair.assert_exactly_once()


def _report(what: str, **measured: float | int | str) -> None:
    shown = ", ".join(
        f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in measured.items()
    )
    print(f"\n[server crash] {what}: {shown}")


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["dc1", "dc2"])
def test_kill_9_of_a_server_mid_stream(
    sandbox: SandboxDescription, tmp_path: Path, killed: str
) -> None:
    server = sandbox.server(killed)
    with linked_pair(sandbox, tmp_path) as pair:
        pair.write(tolerant=True)
        time.sleep(1.0)  # both channels in the middle of their streams
        kill_9(server)
        killed_at = time.monotonic()
        time.sleep(DOWN_S)
        pair.assert_channels_up()  # the channel into it waits, its replicator retries
        restart(server)
        back = time.monotonic()
        _finish(pair)
        _report(
            f"kill -9 of {killed}",
            down_s=back - killed_at,
            converged_after_restart_s=time.monotonic() - back - AFTER_S,
            refused=pair.writers[killed].refused,
            **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
        )


@pytest.mark.slow
def test_kill_9_of_the_source_right_across_a_binlog_rotation(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    dc1 = sandbox.server("dc1")
    with linked_pair(sandbox, tmp_path) as pair:
        pair.write(tolerant=True)
        files = []
        for _ in range(ROTATIONS):
            time.sleep(1.0)
            execute(dc1, "FLUSH BINARY LOGS")  # writes go on into the new file until the kill
            kill_9(dc1)
            restart(dc1)  # the restart opens yet another binlog
            files.append(master_position(dc1)[0])
        _finish(pair)
        _report(
            "kill -9 across rotations",
            rotations=ROTATIONS,
            binlogs=" ".join(files),
            refused=pair.writers["dc1"].refused,
            **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
        )
