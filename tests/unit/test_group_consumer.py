"""The SDK's GroupConsumer and ``drc groups`` against the API in process (a real server on a
free port, groups kept in memory): members share the ranges, every change is handed over,
a clean stop leaves, an abandoned member's ranges move, and the CLI lists, shows, resets and
deletes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.group_service import GroupService, MemoryGroupStore
from drc.api.server import ApiServer
from drc.cli.main import cli
from drc.client import GroupConsumer, RangeBatch
from drc.client.group_admin import GroupsApi
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from tests.support.api import ins, scn, store, txn

STREAM = [txn(n, *[ins("orders", n * 100 + i) for i in range(5)]) for n in range(1, 41)]


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    buffer = EventBuffer.open(tmp_path / "buf")
    store(buffer, *STREAM)
    groups = GroupService(MemoryGroupStore())
    deps = ApiDeps(buffer=buffer, groups=groups)
    rebalancer = threading.Thread(target=groups.run_rebalancer, args=(deps.stop, 0.05))
    with ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True, stop_event=deps.stop) as s:
        rebalancer.start()
        yield s.url
    rebalancer.join()
    buffer.close()


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: dict[int, SCN] = {}
        self.repeats = 0

    def handle(self, batch: RangeBatch) -> None:
        with self.lock:
            for t in batch.transactions:
                for change in t.changes:
                    key = int((change.after or {})["id"])
                    if key in self.rows:
                        self.repeats += 1
                    self.rows[key] = t.scn


def _until(done: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_members_consume_everything_and_a_dead_ones_ranges_move(url: str) -> None:
    with GroupsApi(url) as api:
        api.create(name="g", ranges=8, heartbeat_timeout_s=1.0, after=str(SCN.zero()))
    seen = Seen()
    stop = threading.Event()
    members = [
        GroupConsumer(url, "g", seen.handle, commit_interval_s=0.1, heartbeat_interval_s=0.2)
        for _ in range(3)
    ]
    threads = [threading.Thread(target=m.run, args=(stop,)) for m in members]
    for thread in threads:
        thread.start()
    try:
        _until(lambda: all(m.assignment() for m in members))
        members[2].abandon()
        with GroupsApi(url) as api:
            _until(lambda: all(
                r["owner"] in (members[0].member, members[1].member)
                for r in api.get("g")["ranges"]
            ))  # fmt: skip
        _until(lambda: len(seen.rows) == 200)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    with GroupsApi(url) as api:
        group = api.get("g")
    assert group["members"] == [], "clean stops leave"
    assert {r["checkpoint"] for r in group["ranges"]} == {str(scn(40))}


def test_the_cli_lists_shows_resets_and_deletes(url: str) -> None:
    runner = CliRunner()

    def drc(*args: str) -> str:
        result = runner.invoke(cli, [*args, "--api", url], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert "group g created" in drc("groups", "create", "g", "--ranges", "4")
    assert drc("groups", "list") == "g: 0 members, 4 ranges\n"
    assert "4 closed" in drc("groups", "show", "g")
    drc("groups", "reset", "g", "--to", str(scn(3)), "--yes")
    assert f"oldest checkpoint: {scn(3)}" in drc("groups", "show", "g")
    drc("groups", "delete", "g", "--yes")
    assert drc("groups", "list") == ""
