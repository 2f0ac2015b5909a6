"""``GET /healthz`` (open, for load balancers and systemd) and ``GET /metrics`` (Prometheus).

Healthy means the buffer is open and capture has not stopped on a fatal error; a retriable
source outage (capture reconnecting) is still healthy, since the buffer keeps being served.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Response

from drc.api import wire
from drc.api.deps import ApiDeps, Deps, require_token
from drc.api.errors import ApiError
from drc.api.metrics import CONTENT_TYPE, Family, api_families, render
from drc.api.status import CAPTURE_COUNTERS, buffer_status, lag
from drc.core.errors import DrcError

open_router = APIRouter()
router = APIRouter(dependencies=[Depends(require_token)])


@open_router.get(wire.PATH_HEALTH)
async def get_health(deps: Deps) -> dict[str, Any]:
    problem = unhealthy(deps)
    if problem is not None:
        raise ApiError(503, problem)
    return {"status": "ok"}


def unhealthy(deps: ApiDeps) -> str | None:
    try:
        deps.buffer.last_scn  # noqa: B018 (raises BufferStateError once the buffer is closed)
    except DrcError:
        return "the event buffer is closed"
    failure = deps.capture_failure() if deps.capture_failure is not None else None
    if failure is not None:
        return f"capture stopped: {type(failure).__name__}: {failure}"
    return None


@router.get(wire.PATH_METRICS)
async def get_metrics(deps: Deps) -> Response:
    text = await anyio.to_thread.run_sync(metrics_text, deps)
    return Response(text, media_type=CONTENT_TYPE)


def metrics_text(deps: ApiDeps) -> str:
    families = buffer_families(deps) + capture_families(deps) + lww_families(deps)
    families += apply_families(deps)
    return render(families + api_families(deps.metrics))


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
