"""``GET /v1/status``: role, datacenter, source, buffer, capture position, lag and counters.

``lag`` is the replicator's own capture lag: now - source time of the newest change captured,
the heartbeat this datacenter writes every ``[replicator] heartbeat_interval_s`` included
(drc.core.heartbeat; millisecond resolution), so it stays true when users write nothing. Without
heartbeats it is the age of the newest stored commit, which grows on an idle source.
``caught_up`` says whether capture has read everything the source reported.
``heartbeat``: the heartbeat writer's counters (null where this process writes none).

``lww`` (null unless this process also runs the datacenter's lww guard, drc.apply.lww_guard):
the tables DRC could not give its conflict triggers, each with what to do, and how many local
deletes came without a tombstone and were given a derived one.

``channels``: the apply channels this process runs (``drc run``; ApplyChannel.report): ``state``
(drc.apply.progress: starting, connecting, running, disconnected, waiting, stopped) and the
``error`` behind it, ``lag_seconds`` (now - source time of the newest change the target has
applied; grows while the remote is unreachable or the channel stopped), ``last_scn`` (the
applied SCN), ``last_error`` (only while stopped), ``last_stop`` (``{"at": Unix time,
"error"}`` of the newest stop, kept once a skip, resume or rewind continued the channel), and
the counters (drc.apply.stats.ApplyStats): ``ddl`` statements run,
``ddl_skipped`` statements left out (account statements, object kinds not in the channel's
``objects``, DDL on mapped tables), ``parallel_parts`` (parts of groups written on several
connections, ``parallel_workers``). Where the process runs channels, the desk's fields too
(drc.apply.desk): ``stopped_at`` (SCN, error, tables, rows of the transaction a stopped channel
stopped at), ``pause_at``, ``replay_until`` and ``last_action`` (the newest audited action:
``action``, ``actor``, ``reason``, ``at`` in UTC). A channel with ``[channels.verify]`` also
has ``verify``: its periodic verify (drc.verify.schedule: state, runs by result, the last
run's times, error and per-table rows and differences, the next run's time).

A ``drc run --role apply`` process has no buffer: ``buffer``, ``lag`` and ``capture`` are null.
``consumer_groups`` (null where none are served): each group's ``name``, ``members``, its
``ranges`` counted by state (open, closing, closed), ``oldest_checkpoint``,
``max_lag_seconds`` (its slowest range: now - commit time of the first record after it, 0 when
caught up) and ``backlog_bytes`` (buffer bytes after each range, summed), both null where this
process holds no buffer (drc.api.group_lag); a full group also ``full``: its ``chunks`` and how
many are ``terminated``.
``hot_path``: whether the compiled decoder and codec run (drc.native: ``compiled``, the
``DRC_COMPILED`` ``setting``, and the ``reason``, e.g. a build that is stale after an upgrade).
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends

from drc import native
from drc.api import wire
from drc.api.deps import ApiDeps, Deps, require_token
from drc.api.errors import ApiError
from drc.api.group_lag import group_lag
from drc.core.errors import RetriableError, ScnTooOldError
from drc.core.heartbeat import lag_seconds
from drc.eventbuffer.position import scn_before

router = APIRouter(dependencies=[Depends(require_token)])

CAPTURE_COUNTERS = (
    "transactions", "rows", "bytes", "commits", "filtered_out", "account_statements_dropped",
    "reconnects", "triggers_guarded", "triggers_unguarded", "source_switches",
    "drc_applied_markers",
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
    buffer = None if deps.buffer is None else buffer_status(deps.buffer)
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
        "lag": None if buffer is None else lag(deps, buffer["newest_commit_ms"], position),
        "capture": None if stats is None else capture_status(stats, failure),
        "heartbeat": deps.heartbeat() if deps.heartbeat is not None else None,
        "lww": deps.protection() if deps.protection is not None else None,
        "channels": deps.channels() if deps.channels is not None else [],
        "hot_path": hot_path(),
        "consumer_groups": consumer_groups(deps),
    }


def consumer_groups(deps: ApiDeps) -> list[dict[str, Any]] | dict[str, str] | None:
    """Each consumer group (drc.api.group_service.GroupService.summary); null where none are
    served, ``{"error"}`` when their store (ZooKeeper) does not answer."""
    if deps.groups is None:
        return None
    try:
        return deps.groups.summary(lambda state: group_lag(deps.buffer, state, deps.wall_clock()))
    except RetriableError as exc:
        return {"error": str(exc)}


def hot_path() -> dict[str, Any]:
    """Whether this process runs the compiled hot path (drc.native), and why (or why not)."""
    state = native.STATE
    return {"compiled": state.compiled, "setting": state.setting, "reason": state.reason}


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
    return {"seconds": capture_lag(deps, newest_ms), "caught_up": caught_up}


def capture_lag(deps: ApiDeps, newest_ms: int | None) -> float | None:
    """now - source time of the newest change captured (heartbeats included)."""
    stats = deps.capture_stats() if deps.capture_stats is not None else None
    captured = getattr(stats, "source_time_ms", None)
    newest = max((t for t in (newest_ms, captured) if t is not None), default=None)
    return lag_seconds(deps.wall_clock(), newest)


def capture_status(stats: Any, failure: BaseException | None) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(stats, name, None) for name in CAPTURE_COUNTERS}
    out["last_error"] = getattr(stats, "last_error", None)
    out["source_server"] = getattr(stats, "source_server", None)  # the server read now
    out["change_id"] = getattr(stats, "change_id", None)
    out["failed"] = None if failure is None else f"{type(failure).__name__}: {failure}"
    return out
