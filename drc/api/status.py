"""``GET /v1/status``: role, datacenter, source, buffer, capture position, lag and counters.

Lag is the age of the newest stored commit (its binlog timestamp, second resolution) and
``caught_up`` says whether capture has read everything the source reported: an idle source
makes the age grow while ``caught_up`` stays true, so an alert should use both.

``lww`` (null unless this process also runs the datacenter's lww guard, drc.apply.lww_guard):
the tables DRC could not give its conflict triggers, each with what to do, and how many local
deletes came without a tombstone and were given a derived one.

``channels``: the apply channels this process runs (``drc run``), each with its counters
(drc.apply.stats.ApplyStats): ``ddl`` statements run, ``ddl_skipped`` statements left out
(account statements, object kinds not in the channel's ``objects``, DDL on mapped tables).
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends

from drc.api import wire
from drc.api.deps import ApiDeps, Deps, require_token
from drc.api.errors import ApiError
from drc.core.errors import ScnTooOldError
from drc.eventbuffer.position import scn_before

router = APIRouter(dependencies=[Depends(require_token)])

CAPTURE_COUNTERS = (
    "transactions", "rows", "bytes", "commits", "filtered_out", "account_statements_dropped",
    "reconnects", "triggers_guarded", "triggers_unguarded", "source_switches",
)  # fmt: skip


@router.get(wire.PATH_POSITION)
async def get_position(deps: Deps, at_ms: int) -> dict[str, Any]:
    """``?at_ms=T``: the SCN to read after for every change committed at or after T (Unix ms),
    410 when retention deleted what came just before T (drc.eventbuffer.position)."""
    if not 0 <= at_ms < 1 << 48:
        raise ApiError(400, f"at_ms must be Unix milliseconds, got {at_ms}")
    try:
        after = await anyio.to_thread.run_sync(scn_before, deps.buffer, at_ms)
    except ScnTooOldError as exc:
        oldest = None if exc.oldest is None else str(exc.oldest)
        raise ApiError(410, str(exc), oldest=oldest) from exc
    return {"after": str(after), "at_ms": at_ms}


@router.get(wire.PATH_STATUS)
async def get_status(deps: Deps) -> dict[str, Any]:
    return await anyio.to_thread.run_sync(status, deps)


def status(deps: ApiDeps) -> dict[str, Any]:
    stats = deps.capture_stats() if deps.capture_stats is not None else None
    buffer = buffer_status(deps.buffer)
    position = getattr(stats, "source_position", None)
    failure = deps.capture_failure() if deps.capture_failure is not None else None
    group = deps.group() if deps.group is not None else None
    return {
        "role": deps.role if group is None else group["role"],
        "group": group,
        "datacenter": deps.datacenter,
        "source": deps.source,
        "buffer": buffer,
        "source_position": None
        if position is None
        else {"log_index": position[0], "log_pos": position[1]},
        "lag": lag(deps, buffer["newest_commit_ms"], position),
        "capture": None if stats is None else capture_status(stats, failure),
        "lww": deps.protection() if deps.protection is not None else None,
        "channels": deps.channels() if deps.channels is not None else [],
    }


def buffer_status(buffer: Any) -> dict[str, Any]:
    first, last = buffer.first_scn, buffer.last_scn
    return {
        "epoch": buffer.epoch,
        "first_scn": None if first is None else str(first),
        "last_scn": None if last is None else str(last),
        "oldest_servable": str(buffer.oldest_servable),
        "records": buffer.record_count,
        "bytes": buffer.size_bytes,
        "newest_commit_ms": newest_commit_ms(buffer),
    }


def newest_commit_ms(buffer: Any) -> int | None:
    """The newest record timestamp; progress markers carry 0 and are skipped."""
    for segment in reversed(buffer.segments()):
        if segment.max_ts:
            return int(segment.max_ts)
    return None


def lag(deps: ApiDeps, newest_ms: int | None, position: tuple[int, int] | None) -> dict[str, Any]:
    last = deps.buffer.last_scn
    caught_up = None  # unknown until capture has seen the source's position
    if position is not None:
        caught_up = last is not None and (last.log_index, last.log_pos) >= tuple(position)
    seconds = None if newest_ms is None else max(0.0, deps.wall_clock() - newest_ms / 1000)
    return {"seconds": seconds, "caught_up": caught_up}


def capture_status(stats: Any, failure: BaseException | None) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(stats, name, None) for name in CAPTURE_COUNTERS}
    out["last_error"] = getattr(stats, "last_error", None)
    out["source_server"] = getattr(stats, "source_server", None)  # the server read now
    out["change_id"] = getattr(stats, "change_id", None)
    out["failed"] = None if failure is None else f"{type(failure).__name__}: {failure}"
    return out
