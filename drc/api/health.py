"""``GET /healthz`` (open, for load balancers and systemd) and ``GET /metrics`` (Prometheus).

Healthy means the buffer is open (where this process has one), capture has not stopped on a
fatal error, and no apply channel or other component of the process (lww guard, heartbeat) has
stopped on one. A retriable outage is still healthy: capture reconnecting to its source (the
buffer keeps being served), a channel whose remote is unreachable (state ``disconnected``, its
lag growing) or whose target is down (``waiting``); watch the lag for those.

/healthz answers anyone, so without a valid token an unhealthy answer says only the state
(``buffer_closed``, ``capture_failed``, ``channel_stopped``, ``component_failed``), which
component, and the error's type: a failure's message can name hosts, tables or statements. With a
valid token (or on an API without tokens) the message has the detail too, as ``/v1/status``
(token required) does in ``capture.failed`` and each channel's ``error``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response

from drc.api import wire
from drc.api.deps import ApiDeps, Deps, caller, require_token
from drc.api.errors import ApiError
from drc.api.groups import group_families
from drc.api.metrics import CONTENT_TYPE, Family, api_families, render
from drc.api.status import CAPTURE_COUNTERS, buffer_status, capture_lag
from drc.core.errors import DrcError
from drc.core.heartbeat import lag_seconds
from drc.core.scn import SCN

open_router = APIRouter()
router = APIRouter(dependencies=[Depends(require_token)])

BUFFER_CLOSED = "buffer_closed"
CAPTURE_FAILED = "capture_failed"
CHANNEL_STOPPED = "channel_stopped"
COMPONENT_FAILED = "component_failed"
_STATES = {
    BUFFER_CLOSED: "the event buffer is closed",
    CAPTURE_FAILED: "capture stopped",
    CHANNEL_STOPPED: "stopped",
    COMPONENT_FAILED: "stopped",
}


@dataclass(frozen=True, slots=True)
class Problem:
    state: str
    component: str  # "" for the buffer and capture, else "channel NAME", "lww guard", ...
    error_type: str
    detail: str

    def text(self, detailed: bool) -> str:
        what = f"{self.component} {_STATES[self.state]}" if self.component else _STATES[self.state]
        return f"{what}: {self.error_type}" + (f": {self.detail}" if detailed else "")


@open_router.get(wire.PATH_HEALTH)
async def get_health(request: Request, deps: Deps) -> dict[str, Any]:
    problems = unhealthy(deps)
    if not problems:
        return {"status": "ok"}
    detailed = caller(request) is not None
    message = "; ".join(p.text(detailed) for p in problems)
    if not detailed:
        message += "; the detail is shown with a bearer token, or see /v1/status"
    first = problems[0]
    raise ApiError(
        503, message, state=first.state, error_type=first.error_type,
        components=[p.component for p in problems if p.component],
    )  # fmt: skip


def unhealthy(deps: ApiDeps) -> list[Problem]:
    """Everything wrong, in a stable order; empty when healthy."""
    found = []
    try:
        if deps.buffer is not None:
            deps.buffer.last_scn  # noqa: B018 (raises BufferStateError once closed)
    except DrcError as exc:
        found.append(Problem(BUFFER_CLOSED, "", type(exc).__name__, str(exc)))
    failure = deps.capture_failure() if deps.capture_failure is not None else None
    if failure is not None:
        found.append(Problem(CAPTURE_FAILED, "", type(failure).__name__, str(failure)))
    for name, error in deps.failures() if deps.failures is not None else []:
        state = CHANNEL_STOPPED if name.startswith("channel ") else COMPONENT_FAILED
        found.append(Problem(state, name, type(error).__name__, str(error)))
    return found


@router.get(wire.PATH_METRICS)
async def get_metrics(deps: Deps) -> Response:
    text = await anyio.to_thread.run_sync(metrics_text, deps)
    return Response(text, media_type=CONTENT_TYPE)


def metrics_text(deps: ApiDeps) -> str:
    families = buffer_families(deps) + capture_families(deps) + lww_families(deps)
    families += heartbeat_families(deps) + apply_families(deps) + verify_families(deps)
    families += group_families(deps)
    held = Family("drc_api_long_polls", "gauge", "Pulls holding a long-poll slot now").add(
        deps.long_polls.held
    )
    return render(families + api_families(deps.metrics) + [held] + budget_families(deps))


def budget_families(deps: ApiDeps) -> list[Family]:
    """The reader memory budget (drc.api.budget)."""
    now = deps.budget.snapshot()
    return [
        Family(
            "drc_api_reader_bytes", "gauge", "Record bytes read for pulls and streams, not yet sent"
        ).add(now["held"]),
        Family("drc_api_reader_bytes_peak", "gauge", "Most reader bytes held at once so far").add(
            now["peak"]
        ),
        Family(
            "drc_api_reader_bytes_limit",
            "gauge",
            "The reader memory budget ([api] reader_memory_mb)",
        ).add(now["limit"]),
        Family(
            "drc_api_readers_waiting", "gauge", "Pulls and streams waiting for reader memory now"
        ).add(now["waiting"]),
        Family(
            "drc_api_readers_shed_total",
            "counter",
            "Pulls and streams refused 503 for reader memory",
        ).add(now["shed"]),
    ]


APPLY_COUNTERS = ("transactions", "rows", "ddl", "ddl_skipped", "skipped", "conflicts", "retries")


def apply_families(deps: ApiDeps) -> list[Family]:
    """Per channel (label ``channel``): up, state, lag, applied position, and the counters."""
    channels = deps.channels() if deps.channels is not None else []
    if not channels:
        return []
    families = []
    for name in APPLY_COUNTERS:
        family = Family(f"drc_apply_{name}_total", "counter", f"Apply {name.replace('_', ' ')}")
        for channel in channels:
            family.add(channel.get(name), channel=str(channel["name"]))
        families.append(family)
    up = Family("drc_channel_up", "gauge", "0 when the apply channel stopped on an error")
    state = Family("drc_channel_state", "gauge", "1 for the channel's current state")
    lag_s = Family(
        "drc_channel_lag_seconds", "gauge", "now - source time of the newest change applied"
    )
    index = Family("drc_channel_applied_log_index", "gauge", "Binlog file of the applied SCN")
    pos = Family("drc_channel_applied_log_pos", "gauge", "Binlog position of the applied SCN")
    for channel in channels:
        name = str(channel["name"])
        up.add(1 if channel["up"] else 0, channel=name)
        state.add(1, channel=name, state=str(channel["state"]))
        lag_s.add(channel["lag_seconds"], channel=name)
        applied = SCN.parse(channel["last_scn"]) if channel["last_scn"] else None
        index.add(None if applied is None else applied.log_index, channel=name)
        pos.add(None if applied is None else applied.log_pos, channel=name)
    return families + [up, state, lag_s, index, pos]


def verify_families(deps: ApiDeps) -> list[Family]:
    """The periodic verify of each channel that has one (drc.verify.schedule): whether it
    runs, runs by result, and the last finished run's time, duration and, per table, rows
    checked and differences by kind."""
    channels = deps.channels() if deps.channels is not None else []
    found = [(str(c["name"]), c["verify"]) for c in channels if c.get("verify")]
    if not found:
        return []
    running = Family("drc_verify_running", "gauge", "1 while the channel's periodic verify runs")
    runs = Family("drc_verify_runs_total", "counter", "Periodic verify runs by result")
    finished = Family("drc_verify_last_run_timestamp_seconds", "gauge",
                      "Unix time the last periodic verify ended")  # fmt: skip
    took = Family("drc_verify_last_run_seconds", "gauge", "Duration of the last periodic verify")
    due = Family("drc_verify_next_run_timestamp_seconds", "gauge", "Unix time the next is due")
    rows = Family("drc_verify_rows_checked", "gauge", "Rows the last verify compared, by table")
    differences = Family("drc_verify_differences", "gauge",
                         "Differences the last verify confirmed, by table and kind")  # fmt: skip
    unsettled = Family("drc_verify_unsettled_rows", "gauge",
                       "Rows still changing through every recheck of the last verify")  # fmt: skip
    skipped = Family("drc_verify_tables_not_compared", "gauge",
                     "Tables the last verify could not compare (see drc status)")  # fmt: skip
    for name, verify in found:
        running.add(1 if verify["state"] == "running" else 0, channel=name)
        for result, count in verify["runs"].items():
            runs.add(count, channel=name, result=result)
        finished.add(verify["last_finished"], channel=name)
        took.add(verify["last_seconds"], channel=name)
        due.add(verify["next_run"], channel=name)
        last = verify["last"]
        if last is None:
            continue
        skipped.add(sum(1 for t in last["tables"] if t["skipped"]), channel=name)
        for table in last["tables"]:
            if table["skipped"]:
                continue
            labels = {"channel": name, "table": str(table["source"])}
            rows.add(table["rows"], **labels)
            unsettled.add(table["unsettled"], **labels)
            for kind, count in table["differences"].items():
                differences.add(count, **labels, kind=kind)
    return [running, runs, finished, took, due, rows, differences, unsettled, skipped]


def heartbeat_families(deps: ApiDeps) -> list[Family]:
    beats = deps.heartbeat() if deps.heartbeat is not None else None
    if beats is None:
        return []
    return [
        Family("drc_heartbeat_beats_total", "counter", "Heartbeat rows written").add(
            beats["beats"]
        ),
        Family("drc_heartbeat_failures_total", "counter", "Heartbeat writes that failed").add(
            beats["failures"]
        ),
    ]


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
        buf = None if deps.buffer is None else buffer_status(deps.buffer)
    except DrcError:
        buf = None
    up = Family("drc_up", "gauge", "1 when /healthz answers ok")
    families = [up.add(0 if unhealthy(deps) else 1)]
    if buf is None:
        return families
    last = deps.buffer.last_scn
    age = lag_seconds(deps.wall_clock(), buf["newest_commit_ms"])
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
        Family(
            "drc_capture_lag_seconds", "gauge", "now - source time of the newest change captured"
        ).add(capture_lag(deps, buf["newest_commit_ms"])),
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
