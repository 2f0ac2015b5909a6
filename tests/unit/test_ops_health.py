"""/healthz, /metrics and /v1/status about apply channels and components, and the API of a
``--role apply`` process (no buffer). The node's reports are given as plain functions."""

from __future__ import annotations

from typing import Any

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.core.target_errors import ApplyError
from tests.support.api import AUTH, TOKEN, TestClient, parse_prometheus

SECRET = "target rejected DDL 'CREATE TABLE payroll.salaries': (1050) Table exists"


def report(name: str, state: str = "running", lag: float | None = 0.4) -> dict[str, Any]:
    return {
        "name": name, "origin": "dc1", "state": state, "up": state != "stopped",
        "error": SECRET if state == "stopped" else None, "lag_seconds": lag,
        "applied_source_ms": 1, "last_scn": "1:11:3:400", "transactions": 5, "rows": 7,
        "ddl": 0, "ddl_skipped": 0, "skipped": 0, "conflicts": 2, "retries": 0,
    }  # fmt: skip


def apply_role(**kw: Any) -> ApiDeps:
    return ApiDeps(buffer=None, role="apply", datacenter="dc2", tokens=(TOKEN,), **kw)


def test_a_stopped_channel_fails_healthz_naming_it_and_hides_the_detail_without_a_token() -> None:
    deps = apply_role(
        channels=lambda: [report("from-dc1", "stopped"), report("from-dc3")],
        failures=lambda: [("channel from-dc1", ApplyError(SECRET, 1050))],
    )
    client = TestClient(create_app(deps))
    hidden = client.get(wire.PATH_HEALTH)
    assert hidden.status_code == 503
    body = hidden.json()
    assert body["state"] == "channel_stopped" and body["components"] == ["channel from-dc1"]
    assert "channel from-dc1 stopped: ApplyError" in body["message"]
    assert "payroll" not in hidden.text and "/v1/status" in body["message"]
    shown = client.get(wire.PATH_HEALTH, headers=AUTH).json()
    assert SECRET in shown["message"]

    metrics = parse_prometheus(client.get(wire.PATH_METRICS, headers=AUTH).text)
    assert dict(metrics["drc_channel_up"]) == {'channel="from-dc1"': 0, 'channel="from-dc3"': 1}
    assert metrics["drc_up"] == [("", 0)]
    assert ('channel="from-dc1",state="stopped"', 1) in metrics["drc_channel_state"]
    assert dict(metrics["drc_apply_conflicts_total"])['channel="from-dc3"'] == 2
    assert dict(metrics["drc_channel_applied_log_pos"])['channel="from-dc3"'] == 400


def test_every_failed_component_is_named() -> None:
    deps = apply_role(
        failures=lambda: [("channel a", ApplyError("x")), ("lww guard", RuntimeError("y"))]
    )
    body = TestClient(create_app(deps)).get(wire.PATH_HEALTH).json()
    assert body["components"] == ["channel a", "lww guard"]
    assert "lww guard stopped: RuntimeError" in body["message"]


def test_the_apply_role_serves_health_metrics_and_status_but_no_stream() -> None:
    deps = apply_role(channels=lambda: [report("from-dc1", "disconnected", lag=12.5)])
    client = TestClient(create_app(deps))
    assert client.get(wire.PATH_HEALTH).json() == {"status": "ok"}, "disconnected is not down"
    status = client.get(wire.PATH_STATUS, headers=AUTH).json()
    assert status["role"] == "apply" and status["buffer"] is None and status["lag"] is None
    assert status["channels"][0]["state"] == "disconnected"
    metrics = parse_prometheus(client.get(wire.PATH_METRICS, headers=AUTH).text)
    assert metrics["drc_channel_lag_seconds"] == [('channel="from-dc1"', 12.5)]
    assert metrics["drc_channel_up"] == [('channel="from-dc1"', 1)]
    assert metrics["drc_up"] == [("", 1)]
    assert (
        client.get(wire.PATH_EVENTS, params={"after": "0:0:0:0"}, headers=AUTH).status_code == 404
    )
