"""A full disk under one datacenter's EventBuffer while both write (issue #27;
docs/reliability.md).

dc1's buffer directory is on a small filesystem the test mounts and then fills to the last
block. Capture pauses (status and log say why: no space left), nothing stops, and once the
filler is deleted capture continues by itself; then both sides are equal row for row, every
transaction applied exactly once, none echoed, and the buffer verifies clean (no damaged
segment). The target's disk full is in test_target_faults.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from drc.client.status import fetch_status
from drc.eventbuffer.verify import verify_buffer
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription
from tests.support.disks import fill, free, small_filesystem
from tests.support.link_faults import Pair, linked_pair

FULL_S = 10.0  # how long the buffer's filesystem stays full while both sides write
AFTER_S = 2.0


def _capture_error(pair: Pair, dc: str) -> str:
    api = pair.nodes[dc].api_url
    assert api is not None
    return str(fetch_status(api)["capture"]["last_error"])


@pytest.mark.slow
def test_a_full_disk_under_the_buffer_pauses_capture_until_space_returns(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    with small_filesystem(tmp_path / "disk", size_mb=16) as mount:
        (tmp_path / "pair").mkdir()
        (tmp_path / "pair" / "dc1").symlink_to(mount)  # dc1's buffer_dir is pair/dc1/buffer
        with linked_pair(sandbox, tmp_path / "pair") as pair:
            pair.write()
            node = pair.nodes["dc1"]
            assert node.service is not None
            stats = node.service.replicator.stats
            filled = fill(mount)
            full_at = time.monotonic()

            def paused() -> bool:
                return "no space left" in _capture_error(pair, "dc1")

            assert wait_for(paused, 60, interval=0.1), _capture_error(pair, "dc1")
            error = _capture_error(pair, "dc1")
            time.sleep(FULL_S)
            assert node.service.failure is None, node.service.failure
            pair.assert_channels_up()
            waits = stats.disk_full_waits
            free(mount)
            freed = time.monotonic()
            assert wait_for(lambda: stats.last_error is None, 60, interval=0.1), stats.last_error
            resumed_after = time.monotonic() - freed
            time.sleep(AFTER_S)
            pair.stop_writing()
            pair.wait_converged()
            pair.assert_exactly_once()
            assert node.service.failure is None
            assert "capture paused" in error and "capture continues by itself" in error
            print(
                f"\n[disk full] buffer: filler {filled} bytes, full for {freed - full_at:.1f}s, "
                f"{waits} refused commits, resumed {resumed_after:.1f}s after space returned, "
                f"txns {pair.writers['dc1'].transactions}/{pair.writers['dc2'].transactions}; "
                f"status said: {error}"
            )
        report = verify_buffer(mount / "buffer")
        assert report.ok, report.problems
