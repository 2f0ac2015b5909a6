"""The control endpoints' checks, with a stand-in for the node's channels (no servers) that
knows the declared actions and their checks (drc.apply.actions), as the node's desk does."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.apply import actions
from drc.core.control import ControlError


class _Buffer:
    last_scn = None


class _Desk:
    def __init__(self) -> None:
        self.acts: list[tuple[Any, ...]] = []

    def channels(self) -> list[dict[str, Any]]:
        return [{"name": "from-dc2", "state": "running"}]

    def history(self, name: str, limit: int) -> list[dict[str, Any]]:
        return [{"name": name, "limit": limit}]

    def actions(self) -> tuple[str, ...]:
        return actions.offered()

    def act(self, name: str, action: str, actor: str, reason: str, **kw: Any) -> dict[str, Any]:
        actions.asked(action, actor, reason, **kw)
        if action == "skip":
            raise ControlError("channel from-dc2 is running; only a stopped channel skips")
        self.acts.append((name, action, actor, reason, kw))
        return {"action": action}


ADMIN = {"Authorization": "Bearer admin-secret"}
READER = {"Authorization": "Bearer read-secret"}


@pytest.fixture()
def desk() -> _Desk:
    return _Desk()


@pytest.fixture()
def client(desk: _Desk) -> TestClient:
    deps = ApiDeps(
        buffer=_Buffer(), tokens=("read-secret", "admin-secret"),
        admin_tokens={"alice": "admin-secret"}, desk=lambda: desk,
    )  # fmt: skip
    return TestClient(create_app(deps))


def test_reading_needs_a_token_acting_needs_an_admin_token(client: TestClient, desk: _Desk) -> None:
    assert client.get("/v1/channels").status_code == 401
    assert client.get("/v1/channels", headers=READER).json()[0]["name"] == "from-dc2"
    refused = client.post("/v1/channels/from-dc2/pause", json={}, headers=READER)
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert desk.acts == []
    done = client.post("/v1/channels/from-dc2/pause", json={"reason": "maint"}, headers=ADMIN)
    assert done.status_code == 200
    assert desk.acts == [
        ("from-dc2", "pause", "alice", "maint", {"scn": None, "until": None, "at": None})
    ]


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/channels/nope/pause", {}, 404, "no channel 'nope'"),
        ("/v1/channels/from-dc2/explode", {}, 404, "unknown action"),
        ("/v1/channels/from-dc2/reload", {}, 404, "'reload'; one of pause, resume, skip, rewind"),
        ("/v1/channels/from-dc2/pause", {"until": "not-an-scn"}, 400, "until"),
        ("/v1/channels/from-dc2/rewind", {}, 400, "exactly one of scn or time"),
        ("/v1/channels/from-dc2/rewind", {"time": "yesterday"}, 400, "ISO 8601"),
        ("/v1/channels/from-dc2/skip", {}, 400, "needs the scn"),
        ("/v1/channels/from-dc2/skip", {"scn": "1:1:1:4"}, 409, "only a stopped channel"),
        ("/v1/channels/from-dc2/pause", {"bogus": 1}, 400, ""),
    ],
)
def test_bad_requests_change_nothing(
    client: TestClient, desk: _Desk, path: str, body: dict[str, Any], status: int, words: str
) -> None:
    answer = client.post(path, json=body, headers=ADMIN)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["message"]
    assert desk.acts == []


def test_rewind_to_a_time_is_utc_unless_an_offset_is_given(client: TestClient, desk: _Desk) -> None:
    client.post("/v1/channels/from-dc2/rewind", json={"time": "2026-11-23 14:00"}, headers=ADMIN)
    client.post(
        "/v1/channels/from-dc2/rewind", json={"time": "2026-11-23T15:00+01:00"}, headers=ADMIN
    )
    assert [a[4]["at"] for a in desk.acts] == [1795442400.0, 1795442400.0]


def test_history_limit_is_checked(client: TestClient) -> None:
    assert client.get("/v1/channels/from-dc2/history?limit=0", headers=READER).status_code == 400
    assert client.get("/v1/channels/from-dc2/history?limit=5", headers=READER).json() == [
        {"name": "from-dc2", "limit": 5}
    ]


def test_no_channels_here_is_a_clear_404() -> None:
    client = TestClient(create_app(ApiDeps(buffer=_Buffer())))
    answer = client.get("/v1/channels")
    assert answer.status_code == 404 and "runs no apply channels" in answer.json()["message"]
