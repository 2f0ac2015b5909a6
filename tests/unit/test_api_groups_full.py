"""A full consumer group over the API in process: chunks in the assignment, their rows and
commits, the ranges refused (409 full_phase_running) until every chunk is TERMINATED, then
handed out from the group's start SCN. The source is a stand-in for the database
(tests/integration/test_consumer_groups_full.py reads a real one)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.group_service import GroupService, MemoryGroupStore
from drc.api.server import ApiServer
from drc.cli.main import cli
from drc.client import ChunkBatch, GroupConsumer, RangeBatch
from drc.client.group_admin import GroupsApi
from drc.core.consumer_groups import GroupSpec
from drc.core.group_full import ChunkRows, FullChunk, encode_bound
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from tests.support.api import AUTH, TOKEN, TestClient, ins, scn, store, txn

ADMIN = {"Authorization": "Bearer admin-token"}
CHUNKS = 3


class Source:
    """Three chunks of shop.t; each read is at scn(5) (after the group's start, scn(2))."""

    def plan(self, spec: GroupSpec) -> list[FullChunk]:
        return [FullChunk(i, "shop.t", ("id",), encode_bound((i,)), encode_bound((i + 1,)))
                for i in range(CHUNKS)]  # fmt: skip

    def read(self, chunk: FullChunk, start: SCN) -> ChunkRows:
        assert start == scn(2)
        return ChunkRows(scn(5), ["id", "at"], [[chunk.index + 1, {"$date": "2026-01-02"}]])


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    buffer = EventBuffer.open(tmp_path / "buf")
    store(buffer, txn(1, ins("t", 1)), txn(2, ins("t", 2)))
    deps = ApiDeps(
        buffer=buffer,
        tokens=(TOKEN, "admin-token"),
        admin_tokens={"ops": "admin-token"},
        groups=GroupService(MemoryGroupStore(), full=Source()),
    )
    with TestClient(create_app(deps)) as made:
        yield made
    buffer.close()


def test_chunks_first_then_the_ranges_from_the_start(client: TestClient) -> None:
    body = {"name": "g", "ranges": 2, "full": True, "chunk_rows": 1}
    refused = client.post("/v1/groups", json={**body, "after": str(scn(1))}, headers=ADMIN)
    assert refused.status_code == 400
    created = client.post("/v1/groups", json=body, headers=ADMIN)
    assert created.status_code == 201, created.text
    full = {"running": True, "scn": str(scn(2)), "chunks": CHUNKS, "terminated": 0}
    assert created.json()["full"] == full
    one = client.post("/v1/groups/g/members", headers=AUTH).json()
    member = one["member"]
    assert one["assignment"] == [] and [c["chunk"] for c in one["chunks"]] == [0, 1]
    early = client.get("/v1/groups/g/ranges/0/events", headers=AUTH,
                       params={"member": member, "version": 0, "after": str(scn(2))})  # fmt: skip
    assert early.status_code == 409 and early.json()["error"] == "full_phase_running"

    held = one["chunks"][0]
    params = {"member": member, "version": held["version"]}
    rows = client.get("/v1/groups/g/chunks/0/rows", params=params, headers=AUTH).json()
    assert rows["read_at"] == str(scn(5)) and rows["table"] == "shop.t"
    assert rows["columns"] == ["id", "at"] and rows["rows"] == [[1, {"$date": "2026-01-02"}]]
    stale = client.get("/v1/groups/g/chunks/0/rows", params={**params, "version": 9},
                       headers=AUTH)  # fmt: skip
    assert stale.status_code == 409 and stale.json()["error"] == wire.ERROR_STALE_ASSIGNMENT

    done = client.post("/v1/groups/g/chunks/0/commit", json=params, headers=AUTH).json()
    assert done["state"] == "terminated" and done["full"]["terminated"] == 1
    assert [c["chunk"] for c in done["chunks"]] == [1, 2], "the next chunk at once"
    for chunk in (1, 2):
        body = {"member": member, "version": 1}
        assert client.post(f"/v1/groups/g/chunks/{chunk}/commit", json=body,
                           headers=AUTH).status_code == 200  # fmt: skip
    client.post("/v1/groups/g/members", headers=AUTH)  # a join rebalances at once
    beat = client.post(f"/v1/groups/g/members/{member}/heartbeat", json={}, headers=AUTH).json()
    assert beat["full"]["running"] is False and beat["chunks"] == []
    assert {r["checkpoint"] for r in beat["assignment"]} == {str(scn(2))}
    status = client.get("/v1/status", headers=AUTH).json()["consumer_groups"]
    assert status[0]["full"] == {"chunks": CHUNKS, "terminated": CHUNKS}
    shown = client.get("/v1/groups/g", headers=AUTH).json()
    assert [c["read_at"] for c in shown["chunks"]] == [str(scn(5)), None, None]


def test_a_dropped_member_gets_410_not_a_member(client: TestClient) -> None:
    assert (
        client.post("/v1/groups", json={"name": "g", "ranges": 2}, headers=ADMIN).status_code == 201
    )
    beat = client.post("/v1/groups/g/members/nobody/heartbeat", json={}, headers=AUTH)
    assert beat.status_code == 410 and beat.json()["error"] == wire.ERROR_NOT_A_MEMBER


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, EventBuffer]]:
    buffer = EventBuffer.open(tmp_path / "buf")
    store(buffer, txn(1, ins("t", 1)), txn(2, ins("t", 2)))
    groups = GroupService(MemoryGroupStore(), full=Source())
    deps = ApiDeps(buffer=buffer, groups=groups)
    rebalancer = threading.Thread(target=groups.run_rebalancer, args=(deps.stop, 0.05))
    with ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True, stop_event=deps.stop) as s:
        rebalancer.start()
        yield s.url, buffer
    rebalancer.join()
    buffer.close()


def test_the_sdk_takes_the_chunks_then_the_changes_and_the_cli_shows_the_phase(
    served: tuple[str, EventBuffer],
) -> None:
    url, buffer = served
    runner = CliRunner()

    def drc(*args: str) -> str:
        result = runner.invoke(cli, [*args, "--api", url], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    GroupsApi(url, None).create(name="g", ranges=2, full=True, after=None)
    store(buffer, txn(3, ins("t", 3)))  # after the start
    assert "full phase running: 0 of 3 chunks terminated" in drc("groups", "show", "g")
    with pytest.raises(ValueError, match="on_chunk"):
        GroupConsumer(url, "g", lambda batch: None).run(threading.Event())
    assert "  member " not in drc("groups", "show", "g"), "it left at once"
    chunks: list[ChunkBatch] = []
    changes: list[SCN] = []
    stop = threading.Event()

    def handle(batch: RangeBatch) -> None:
        assert len(chunks) == CHUNKS, "the ranges come after every chunk"
        changes.extend(t.scn for t in batch.transactions)

    consumer = GroupConsumer(url, "g", handle, on_chunk=chunks.append, commit_interval_s=0.05)
    thread = threading.Thread(target=consumer.run, args=(stop,))
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while scn(3) not in changes:
            assert time.monotonic() < deadline, (chunks, changes)
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(30)
    assert sorted(c.chunk for c in chunks) == list(range(CHUNKS))
    first = min(chunks, key=lambda c: c.chunk)
    assert first.rows == ((1, dt.date(2026, 1, 2)),) and first.read_at == scn(5)
    assert chunks[0].total == CHUNKS and chunks[0].done == 0, "the first one handed over"
    assert changes == [scn(3)], "the ranges read after the start, scn(2)"
    assert consumer.full == {"running": False, "scn": str(scn(2)), "chunks": 3, "terminated": 3}
    assert "full phase done: 3 of 3 chunks" in drc("groups", "show", "g")
