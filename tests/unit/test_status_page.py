"""The status page's static file and the peer statuses behind it, without servers."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from fastapi.testclient import TestClient

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.client.errors import ApiUnavailableError
from drc.client.peers import CACHE_S, RESOLVE_EVERY_S, Peer, PeerStatus


class _Buffer:
    last_scn = None


def test_page_is_served_open_with_a_strict_policy() -> None:
    deps = ApiDeps(buffer=_Buffer(), tokens=("secret",))
    client = TestClient(create_app(deps))
    page = client.get("/ui")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    # Only the page's own script file runs: nothing inline, nothing injected into the page.
    script_src = next(d for d in policy.split(";") if d.strip().startswith("script-src"))
    assert script_src.split() == ["script-src", "'self'"]
    assert '<script src="/ui.js"></script>' in page.text and "<script>" not in page.text
    script = client.get("/ui.js")  # open, like the page
    assert script.status_code == 200 and script.headers["x-content-type-options"] == "nosniff"
    assert script.headers["content-type"].startswith("text/javascript")
    assert "function refresh()" in script.text
    assert client.get("/v1/peers").status_code == 401  # the data needs the token
    answer = client.get("/v1/peers", headers={"Authorization": "Bearer secret"})
    assert answer.json() == []


def test_page_never_puts_data_in_as_html() -> None:
    # Table names and errors come from binlogs: only text nodes may carry them.
    text = (files("drc.api") / "static" / "ui.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in text


def test_peers_are_asked_once_per_moment_and_errors_say_only_their_type() -> None:
    calls: list[str] = []
    now = [100.0]

    def fetch(url: str, token: str | None, **_: Any) -> dict[str, Any]:
        calls.append(url)
        if "down" in url:
            raise ApiUnavailableError(f"{url} unreachable with token {token}", [])
        return {"role": "leader", "datacenter": "dc2"}

    peers = PeerStatus(
        [Peer("dc2", "http://up:1", "tok"), Peer("dc2", "http://down:1", "tok")],
        fetch=fetch,
        clock=lambda: now[0],
    )
    first = peers.snapshot()
    up = {"role": "leader", "datacenter": "dc2"}
    assert first == [
        {"datacenter": "dc2", "url": "http://up:1", "status": up, "error": None},
        {
            "datacenter": "dc2",
            "url": "http://down:1",
            "status": None,
            "error": "ApiUnavailableError",
        },
    ]
    assert peers.snapshot() == first and len(calls) == 2  # cached
    now[0] += CACHE_S
    peers.snapshot()
    assert len(calls) == 4


def test_a_group_peer_is_shown_as_its_members_resolved_now_and_then() -> None:
    now = [100.0]
    resolved: list[str] = []
    members = [["http://leader:1", "http://f1:1"]]

    def resolver(spec: str) -> list[str]:
        resolved.append(spec)
        return members[0]

    peers = PeerStatus(
        [Peer("dc2", "zk://z:1/drc/dc2", "tok")],
        fetch=lambda url, token, **_: {"role": "leader" if "leader" in url else "follower"},
        clock=lambda: now[0],
        resolver=resolver,
    )
    assert [(e["url"], e["status"]) for e in peers.snapshot()] == [
        ("http://leader:1", {"role": "leader"}),
        ("http://f1:1", {"role": "follower"}),
    ]
    now[0] += CACHE_S
    peers.snapshot()
    assert resolved == ["zk://z:1/drc/dc2"]  # the members are kept a while
    members[0] = []  # no member registered (or its ZooKeeper did not answer)
    now[0] += RESOLVE_EVERY_S
    assert peers.snapshot() == [
        {"datacenter": "dc2", "url": "zk://z:1/drc/dc2", "status": None, "error": "DiscoveryError"}
    ]
