"""The whole replicator group restarted at once, the member elected first being the one
behind, with the source's binlog purged past its position (issue #27, item 3;
docs/reliability.md).

Before the fix the first member elected caught up only from the members registered at that
moment (none yet) and captured again from its own older SCN: in a binlog the source no longer
had, so it stopped although another member held the records. Now it waits (bounded,
``[group] catch_up_wait_s``) for every member known to the group to answer and copies from
the most advanced one first. Under the two-way workload of the group tests, with an SDK
reader of the group; the usual checks after a group fault.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.group import Group, Member, last_scn, records
from tests.support.server_faults import purge_all_but_the_newest
from tests.support.servers import execute, fresh_database, master_position
from tests.support.two_way import GROUP_TABLE, Reader, check_after_fault, two_way, zk_url

SESSION_S = 2.0
# Generous for a loaded 2-core host: the other members' processes start within it.
CATCH_UP_WAIT_S = 60.0


@pytest.fixture
def group(sandbox: SandboxDescription, dc1: ServerInfo, tmp_path: Path) -> Iterator[Group]:
    fresh_database(dc1, "grp_db", GROUP_TABLE)
    made = Group.create(
        sandbox, dc1, tmp_path, 3, SESSION_S, name=f"grs{time.time_ns() % 10**9}",
        extra=f"catch_up_wait_s = {CATCH_UP_WAIT_S}\n",
    )  # fmt: skip
    made.start()
    try:
        yield made
    finally:
        made.stop()


def _log_index(member: Member) -> int:
    last = last_scn(member.buffer_dir)
    return -1 if last is None else last.log_index


def _until(group: Group, what: str, condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n{group.logs()}"
        time.sleep(0.1)


@pytest.mark.slow
def test_the_member_behind_elected_first_after_a_whole_group_restart_copies_what_the_source_purged(
    sandbox: SandboxDescription, group: Group, dc2: ServerInfo, tmp_path: Path
) -> None:
    dc1 = group.server
    reader = Reader(zk_url(sandbox, group))
    try:
        with two_way(sandbox, group, dc2, tmp_path, SESSION_S) as load:
            leader = group.wait_leader(30)
            group.wait_roles(["follower", "follower", "leader"])
            behind = next(m for m in group.members if m is not leader)
            ahead = [m for m in group.members if m is not behind]
            behind.pause()
            held = last_scn(behind.buffer_dir)
            assert held is not None
            time.sleep(3)  # a backlog the paused member lacks
            execute(dc1, "FLUSH BINARY LOGS")
            newest_file = master_position(dc1)[0]
            newest_index = int(newest_file.rsplit(".", 1)[1])
            # The others hold records of the new binlog: they can resume from there.
            _until(group, "the others capture into the new binlog",
                   lambda: all(_log_index(m) >= newest_index for m in ahead))  # fmt: skip
            for member in group.members:  # all at once, the paused one included
                member.signal(signal.SIGKILL)
            for member in group.members:
                assert member.proc is not None
                member.proc.wait(timeout=60)
            killed_at = time.monotonic()
            left = purge_all_but_the_newest(dc1)
            assert held.log_index < int(left.rsplit(".", 1)[1]), "its binlog is purged"
            backlog = sum(1 for r in records(ahead[0].buffer_dir) if r[0] > held)
            assert backlog > 0

            behind.start()  # alone: it is elected first
            _until(
                group,
                f"{behind.member_id} elected",
                lambda: (behind.status() or {}).get("role") == "leader",
            )
            for member in ahead:
                member.start()
            _until(group, f"{behind.member_id} appends", lambda: _log_index(behind) >= newest_index)
            print(f"backlog {backlog} records; {behind.member_id} appends "
                  f"{time.monotonic() - killed_at:.1f}s after the kill")  # fmt: skip
            group.wait_roles(["follower", "follower", "leader"], timeout=60)
            assert group.wait_leader(10) is behind
            time.sleep(2)
        reader.wait_for(len(load.dc1_writes.written))
        assert reader.error is None
        assert reader.ids == load.dc1_writes.written, "the reader lost, repeated or reordered"
        check_after_fault(load, group.members)
    finally:
        if not reader.stop.is_set():
            reader.wait_for(0, timeout=0)
    text = behind.log.read_text()
    assert "caught up from member " in text, text[-3000:]
    print(f"{len(load.dc1_writes.written)} / {len(load.dc2_writes.written)} written")
