"""The target refuses writes while both datacenters write (issue #27; docs/reliability.md).

dc2's channel writes as the documented apply user (no SUPER: read_only applies to it). Whatever
the target does (turns read-only, restarts, runs out of disk), the channel waits and retries
with the reason in its status, never stops, and once the target is fixed both sides are equal
row for row, every transaction applied exactly once, none echoed (tests/support/link_faults.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import APPLY_PASSWORD, APPLY_USER, apply_user
from tests.support.disks import fill, free, small_filesystem
from tests.support.link_faults import SCHEMA, Pair, linked_pair
from tests.support.server_faults import restart
from tests.support.servers import execute

FAULT_S = 10.0  # how long the target refuses writes while both sides write
AFTER_S = 2.0  # writes go on this long after the fix
# Rows both sides hold before the writes (negative ids, kept out of the binlog): most of the
# table's first page, so it needs a new extent (on the full disk) within seconds of writing.
PREFILLED = 200


def _as_apply_user(server: ServerInfo) -> dict[str, str]:
    """dc2's channel writes as the apply user, which read_only refuses."""
    apply_user(server)
    return {
        server.datacenter: f"""
[target]
host = "{server.host}"
port = {server.port}
user = "{APPLY_USER}"
password = "{APPLY_PASSWORD}"
"""
    }


def _channel(pair: Pair, dc: str) -> dict[str, object]:
    return pair.nodes[dc].channel_status()[0]


def _waits_with(pair: Pair, dc: str, words: str) -> dict[str, object]:
    """Until dc's channel waits for its target with ``words`` in its error; its status then."""

    def waiting() -> bool:
        pair.assert_channels_up()
        status = _channel(pair, dc)
        return status["state"] == "waiting" and words in str(status["error"])

    assert wait_for(waiting, 60, interval=0.1), _channel(pair, dc)
    return _channel(pair, dc)


def _finish(pair: Pair) -> None:
    time.sleep(AFTER_S)
    pair.stop_writing()
    pair.wait_converged()
    pair.assert_exactly_once()


def _report(what: str, **measured: float | int) -> None:
    shown = ", ".join(
        f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in measured.items()
    )
    print(f"\n[target faults] {what}: {shown}")


@pytest.mark.slow
def test_a_read_only_target_is_waited_for_during_two_way_writes(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    dc2 = sandbox.server("dc2")
    with linked_pair(sandbox, tmp_path, extra=_as_apply_user(dc2)) as pair:
        pair.write(tolerant=True)
        execute(dc2, "SET GLOBAL read_only = 1")
        try:
            status = _waits_with(pair, "dc2", "read-only")
            time.sleep(FAULT_S)
            waits = pair.nodes["dc2"].channels[0].stats.waits
            pair.assert_channels_up()
        finally:
            execute(dc2, "SET GLOBAL read_only = 0")
        fixed = time.monotonic()
        _finish(pair)
        assert waits >= 3
        assert "(1290)" in str(status["error"])
        _report(
            "read-only",
            read_only_s=FAULT_S,
            waits=waits,
            converged_after_fix_s=time.monotonic() - fixed - AFTER_S,
            **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
        )


@pytest.mark.slow
def test_a_target_restarted_mid_stream_is_waited_for(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    dc2 = sandbox.server("dc2")
    with linked_pair(sandbox, tmp_path, extra=_as_apply_user(dc2)) as pair:
        pair.write(tolerant=True)
        execute(dc2, "SHUTDOWN")  # a clean stop, as a package upgrade does
        down = time.monotonic()
        status = _waits_with(pair, "dc2", "target")
        time.sleep(FAULT_S)
        pair.assert_channels_up()
        restart(dc2)
        back = time.monotonic()
        _finish(pair)
        _report(
            "restarted",
            down_s=back - down,
            converged_after_restart_s=time.monotonic() - back - AFTER_S,
            dc2_refused=pair.writers["dc2"].refused,
            **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
        )
        print(f"[target faults] restarted: the channel waited with: {status['error']}")


@pytest.mark.slow
def test_a_full_disk_under_a_target_table_is_waited_for(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    with small_filesystem(tmp_path / "disk") as mount:
        try:
            with linked_pair(sandbox, tmp_path / "pair", extra=_as_apply_user(dc2)) as pair:
                _on_small_disk(dc1, dc2, mount)
                filled = fill(mount)
                pair.write(tolerant=True)
                full_at = time.monotonic()
                status = _waits_with(pair, "dc2", "full")
                time.sleep(FAULT_S)
                waits = pair.nodes["dc2"].channels[0].stats.waits
                pair.assert_channels_up()
                free(mount)
                fixed = time.monotonic()
                _finish(pair)
                assert "(1114)" in str(status["error"])
                _report(
                    "target disk full",
                    filler_bytes=filled,
                    waits=waits,
                    dc2_refused=pair.writers["dc2"].refused,
                    converged_after_fix_s=time.monotonic() - fixed - AFTER_S,
                    full_for_s=fixed - full_at,
                    **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
                )
        finally:  # the server holds the table's file open: it must go before the filesystem
            execute(dc2, f"DROP TABLE IF EXISTS {SCHEMA}.t", log_bin=False)


def _on_small_disk(dc1: ServerInfo, dc2: ServerInfo, mount: Path) -> None:
    """dc2's table moved to ``mount`` (out of the binlog: dc1 keeps its own), both sides given
    the same PREFILLED rows."""
    execute(
        dc2,
        f"DROP TABLE {SCHEMA}.t",
        f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40), n INT) "
        f"DATA DIRECTORY = '{mount}'",
        log_bin=False,
    )
    rows = ", ".join(f"({-i}, 'prefilled-{i}', 0)" for i in range(1, PREFILLED + 1))
    for server in (dc1, dc2):
        execute(server, f"INSERT INTO {SCHEMA}.t VALUES {rows}", log_bin=False)


@pytest.mark.slow
def test_a_table_dropped_on_the_target_stops_the_channel_until_restored_and_resumed(
    sandbox: SandboxDescription, tmp_path: Path
) -> None:
    dc2 = sandbox.server("dc2")
    with linked_pair(sandbox, tmp_path, extra=_as_apply_user(dc2)) as pair:
        pair.write(tolerant=True)
        # A person takes the table away on dc2 alone (out of the binlog, so dc1 keeps its
        # copy); renamed aside, it is the backup a restore brings back as it was at the drop.
        execute(dc2, f"RENAME TABLE {SCHEMA}.t TO {SCHEMA}.t_dropped", log_bin=False)
        dropped = time.monotonic()

        def stopped() -> bool:
            return pair.nodes["dc2"].channel_status()[0]["state"] == "stopped"

        assert wait_for(stopped, 60, interval=0.1), _channel(pair, "dc2")
        status = _channel(pair, "dc2")
        time.sleep(FAULT_S)  # stopped, it stays stopped: nothing past that transaction applied
        assert _channel(pair, "dc2")["state"] == "stopped"
        assert pair.nodes["dc1"].failures() == []
        execute(dc2, f"RENAME TABLE {SCHEMA}.t_dropped TO {SCHEMA}.t", log_bin=False)
        api = pair.nodes["dc2"].api_url
        assert api is not None
        resumed = CliRunner().invoke(
            cli, ["channel", "resume", "from-dc1", "--api", api, "--reason", "table restored"]
        )
        assert resumed.exit_code == 0, resumed.output
        fixed = time.monotonic()
        _finish(pair)
        error = str(status["last_error"])
        assert f"{SCHEMA}.t" in error or f"`{SCHEMA}`.`t`" in error, error
        _report(
            "table dropped",
            stopped_for_s=fixed - dropped,
            converged_after_resume_s=time.monotonic() - fixed - AFTER_S,
            dc2_refused=pair.writers["dc2"].refused,
            **{f"{dc}_txns": w.transactions for dc, w in pair.writers.items()},
        )
        print(f"[target faults] table dropped: the channel stopped with: {error}")
