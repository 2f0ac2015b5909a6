"""Consumer groups over the API in process: create, join, heartbeat, range pulls filtered by
partition, refused stale versions, commits, and the barrier of a key that changes range."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.group_service import GroupService, MemoryGroupStore
from drc.core.events import Op, RowChange
from drc.core.jsonwire import transaction_from_json
from drc.core.partitions import key_partition, range_index
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.format import HEADER_SIZE
from tests.support.api import AUTH, TOKEN, TestClient, scn, store, txn

ADMIN = {"Authorization": "Bearer admin-token"}
RANGES = 4
NOW = 1_700_000_011.0  # 10 s after txn(1) committed (tests.support.api.txn)


def where(row_id: int) -> int:
    return range_index(key_partition("shop", "t", (row_id,)), RANGES)


# Two ids in different ranges: the update of MOVED_FROM to MOVED_TO changes range.
MOVED_FROM = 1
MOVED_TO = next(i for i in range(2, 100) if where(i) != where(MOVED_FROM))
LATER = next(i for i in range(300, 400) if where(i) != where(MOVED_TO))  # not behind the barrier


def ins(row_id: int) -> RowChange:
    return RowChange("shop", "t", Op.INSERT, None, {"id": row_id})


STREAM = [
    txn(1, ins(MOVED_FROM), *[ins(i) for i in range(200, 220)]),
    txn(2, RowChange("shop", "t", Op.UPDATE, {"id": MOVED_FROM}, {"id": MOVED_TO})),
    txn(3, ins(LATER)),
]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    buffer = EventBuffer.open(tmp_path / "buf")
    store(buffer, *STREAM)
    deps = ApiDeps(
        buffer=buffer,
        tokens=(TOKEN, "admin-token"),  # as drc.runtime: admins read too
        admin_tokens={"ops": "admin-token"},
        groups=GroupService(MemoryGroupStore()),
        wall_clock=lambda: NOW,
    )
    with TestClient(create_app(deps)) as made:
        yield made
    buffer.close()


def create(client: TestClient, **extra: Any) -> None:
    body = {"name": "g", "ranges": RANGES, "after": str(SCN.zero()), **extra}
    assert client.post("/v1/groups", json=body, headers=AUTH).status_code == 403
    answer = client.post("/v1/groups", json=body, headers=ADMIN)
    assert answer.status_code == 201, answer.text


def pull(client: TestClient, member: str, held: dict[str, Any], after: str) -> Any:
    params = {"member": member, "version": held["version"], "after": after}
    return client.get(f"/v1/groups/g/ranges/{held['range']}/events", params=params, headers=AUTH)


def rows(answer: Any) -> list[tuple[str, Any, Any]]:
    return [
        (c.op.value, c.before, c.after)
        for t in answer.json()["transactions"]
        for c in transaction_from_json(t).changes
    ]


def test_members_share_ranges_and_each_change_goes_to_its_range(client: TestClient) -> None:
    create(client)
    one = client.post("/v1/groups/g/members", headers=AUTH).json()
    assert len(one["assignment"]) == RANGES
    seen = []
    for held in one["assignment"]:
        answer = pull(client, one["member"], held, held["checkpoint"])
        if "X-DRC-Waiting" in answer.headers:  # behind the barrier: its source range first
            continue
        for op, before, after in rows(answer):
            key = (after or before)["id"]
            assert where(key) == held["range"]
            seen.append((op, key))
    assert ("insert", LATER) in seen and ("delete", MOVED_FROM) in seen
    two = client.post("/v1/groups/g/members", headers=AUTH).json()
    assert two["assignment"] == []  # given only once the first releases some
    shown = client.get("/v1/groups/g", headers=AUTH).json()
    assert len(shown["members"]) == 2
    assert client.get("/v1/groups", headers=AUTH).json()["groups"][0]["members"] == 2
    status = client.get("/v1/status", headers=AUTH).json()["consumer_groups"]
    metrics = client.get("/metrics", headers=AUTH).text
    assert 'drc_consumer_group_members{group="g"} 2' in metrics
    assert 'drc_consumer_group_ranges{group="g",state="closing"} 2' in metrics
    ranges = {"closing": 2, "open": 2}  # the second member gets two once they are released
    backlog = client.get("/v1/status", headers=AUTH).json()["buffer"]["bytes"] - HEADER_SIZE
    assert status == [{"name": "g", "members": 2, "ranges": ranges, "oldest_checkpoint": "0:0:0:0",
                       "max_lag_seconds": 10.0, "backlog_bytes": RANGES * backlog}]  # fmt: skip
    assert 'drc_consumer_group_range_lag_seconds{group="g",range="0"} 10' in metrics
    assert f'drc_consumer_group_range_backlog_bytes{{group="g",range="3"}} {backlog}' in metrics


def test_a_stale_version_is_refused(client: TestClient) -> None:
    create(client)
    one = client.post("/v1/groups/g/members", headers=AUTH).json()
    held = dict(one["assignment"][0])
    held["version"] += 1
    answer = pull(client, one["member"], held, held["checkpoint"])
    assert answer.status_code == 409 and answer.json()["error"] == "stale_assignment"
    body = {"member": one["member"], "version": held["version"], "scn": str(scn(1))}
    assert client.post(f"/v1/groups/g/ranges/{held['range']}/commit", json=body,
                       headers=AUTH).status_code == 409  # fmt: skip
    assert client.delete(f"/v1/groups/g/members/{one['member']}", headers=AUTH).status_code == 200
    beat = client.post(f"/v1/groups/g/members/{one['member']}/heartbeat", json={}, headers=AUTH)
    assert beat.status_code == 410


def test_a_key_moved_in_waits_for_its_old_range(client: TestClient) -> None:
    create(client)
    member = client.post("/v1/groups/g/members", headers=AUTH).json()
    held = {h["range"]: h for h in member["assignment"]}
    old, new = held[where(MOVED_FROM)], held[where(MOVED_TO)]
    waiting = pull(client, member["member"], new, str(SCN.zero()))
    assert waiting.headers["X-DRC-Waiting"] == str(old["range"])
    assert ("insert", None, {"id": MOVED_TO}) not in rows(waiting)
    stopped_at = waiting.json()["next"]
    assert SCN.parse(stopped_at) < scn(2)
    first = pull(client, member["member"], old, str(SCN.zero()))
    assert ("delete", {"id": MOVED_FROM}, None) in rows(first)
    body = {"member": member["member"], "version": old["version"], "scn": str(scn(1))}
    commit = client.post(f"/v1/groups/g/ranges/{old['range']}/commit", json=body, headers=AUTH)
    assert commit.json()["checkpoint"] == str(scn(1))
    moved = pull(client, member["member"], new, stopped_at)
    assert "X-DRC-Waiting" not in moved.headers
    assert ("insert", None, {"id": MOVED_TO}) in rows(moved)


def test_admin_reset_and_delete(client: TestClient) -> None:
    create(client)
    assert (
        client.post("/v1/groups/g/reset", json={"scn": str(scn(2))}, headers=AUTH).status_code
        == 403
    )
    reset = client.post("/v1/groups/g/reset", json={"scn": str(scn(2))}, headers=ADMIN).json()
    assert {r["checkpoint"] for r in reset["ranges"]} == {str(scn(2))}
    assert client.delete("/v1/groups/g", headers=ADMIN).status_code == 200
    assert client.get("/v1/groups/g", headers=AUTH).status_code == 404
    assert client.get("/v1/groups/..", headers=AUTH).status_code == 404
    bad = client.post("/v1/groups", json={"name": "h", "tables": "a..b"}, headers=ADMIN)
    assert bad.status_code == 400
