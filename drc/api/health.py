"""``GET /healthz`` (open, for load balancers and systemd) and ``GET /metrics`` (Prometheus).

Healthy means the buffer is open and capture has not stopped on a fatal error; a retriable
source outage (capture reconnecting) is still healthy, since the buffer keeps being served.

/healthz answers anyone, so without a valid token an unhealthy answer says only the state
(``buffer_closed``, ``capture_failed``) and the error's type: a failure's message can name
hosts, tables or statements. With a valid token (or on an API without tokens) the message has
the detail too, as ``/v1/status`` (token required) does in ``capture.failed``.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response

from drc.api import wire
from drc.api.deps import ApiDeps, Deps, caller, require_token
from drc.api.errors import ApiError
from drc.api.metrics import CONTENT_TYPE, Family, api_families, render
from drc.api.status import CAPTURE_COUNTERS, buffer_status, lag
from drc.core.errors import DrcError

open_router = APIRouter()
router = APIRouter(dependencies=[Depends(require_token)])


@open_router.get(wire.PATH_HEALTH)
async def get_health(request: Request, deps: Deps) -> dict[str, Any]:
    problem = unhealthy(deps)
    if problem is None:
        return {"status": "ok"}
    state, error_type, detail = problem
    message = f"{_STATES[state]}: {error_type}"
    if caller(request) is not None:
        message += f": {detail}"
    else:
        message += "; the detail is shown with a bearer token, or see /v1/status"
    raise ApiError(503, message, state=state, error_type=error_type)


BUFFER_CLOSED = "buffer_closed"
CAPTURE_FAILED = "capture_failed"
_STATES = {BUFFER_CLOSED: "the event buffer is closed", CAPTURE_FAILED: "capture stopped"}


def unhealthy(deps: ApiDeps) -> tuple[str, str, str] | None:
    """None when healthy, else (state, error type, error message)."""
    try:
        deps.buffer.last_scn  # noqa: B018 (raises BufferStateError once the buffer is closed)
    except DrcError as exc:
        return BUFFER_CLOSED, type(exc).__name__, str(exc)
    failure = deps.capture_failure() if deps.capture_failure is not None else None
    if failure is not None:
        return CAPTURE_FAILED, type(failure).__name__, str(failure)
    return None


@router.get(wire.PATH_METRICS)
async def get_metrics(deps: Deps) -> Response:
    text = await anyio.to_thread.run_sync(metrics_text, deps)
    return Response(text, media_type=CONTENT_TYPE)


def metrics_text(deps: ApiDeps) -> str:
    families = buffer_families(deps) + capture_families(deps) + lww_families(deps)
    families += apply_families(deps)
    held = Family("drc_api_long_polls", "gauge", "Pulls holding a long-poll slot now").add(
        deps.long_polls.held
    )
    return render(families + api_families(deps.metrics) + [held])


APPLY_COUNTERS = ("transactions", "rows", "ddl", "ddl_skipped", "skipped", "conflicts", "retries")


def apply_families(deps: ApiDeps) -> list[Family]:
    channels = deps.channels() if deps.channels is not None else []
    if not channels:
        return []
    families = []
    for name in APPLY_COUNTERS:
        family = Family(f"drc_apply_{name}_total", "counter", f"Apply {name.replace('_', ' ')}")
        for channel in channels:
            family.add(channel.get(name), channel=str(channel["name"]))
        families.append(family)
    up = Family("drc_apply_channel_up", "gauge", "1 while the apply channel runs")
    for channel in channels:
        up.add(1 if channel["state"] == "running" else 0, channel=str(channel["name"]))
    return families + [up]


def lww_families(deps: ApiDeps) -> list[Family]:
    found = deps.protection() if deps.protection is not None else None
    if found is None:
        return []
    unprotected = Family(
        "drc_lww_unprotected", "gauge", "1 per lww table without DRC's conflict triggers"
    )
    for entry in found["unprotected"]:
        unprotected.add(1, table=entry["table"])
    return [
        Family("drc_lww_unprotected_tables", "gauge", "lww tables without DRC's triggers").add(
            len(found["unprotected"])
        ),
        unprotected,
        Family(
            "drc_lww_derived_tombstones_total",
            "counter",
            "Local deletes captured without a tombstone, given a derived one",
        ).add(found["derived_tombstones"]),
        Family("drc_lww_guard_up", "gauge", "1 while the lww guard runs").add(
            1 if found["guard"] == "running" else 0
        ),
    ]


def buffer_families(deps: ApiDeps) -> list[Family]:
    try:
        buf = buffer_status(deps.buffer)
    except DrcError:
        buf = None
    up = Family("drc_up", "gauge", "1 when the buffer is open and capture has not failed")
    families = [up.add(0 if unhealthy(deps) else 1)]
    if buf is None:
        return families
    last = deps.buffer.last_scn
    age = lag(deps, buf["newest_commit_ms"], None)["seconds"]
    return families + [
        Family("drc_buffer_records", "gauge", "Committed records stored").add(buf["records"]),
        Family("drc_buffer_bytes", "gauge", "Segment bytes on disk").add(buf["bytes"]),
        Family("drc_buffer_last_log_index", "gauge", "Binlog file number of the newest SCN").add(
            None if last is None else last.log_index
        ),
        Family("drc_buffer_last_log_pos", "gauge", "Binlog position of the newest SCN").add(
            None if last is None else last.log_pos
        ),
        Family("drc_newest_commit_age_seconds", "gauge", "Age of the newest stored commit").add(
            age
        ),
    ]


def capture_families(deps: ApiDeps) -> list[Family]:
    stats = deps.capture_stats() if deps.capture_stats is not None else None
    if stats is None:
        return []
    families = [
        Family(f"drc_capture_{name}_total", "counter", f"Capture {name.replace('_', ' ')}").add(
            getattr(stats, name, None)
        )
        for name in CAPTURE_COUNTERS
    ]
    position = getattr(stats, "source_position", None)
    if position is not None:
        families.append(
            Family("drc_source_log_index", "gauge", "Source binlog file number").add(position[0])
        )
        families.append(
            Family("drc_source_log_pos", "gauge", "Source binlog position").add(position[1])
        )
    return families
