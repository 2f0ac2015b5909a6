"""Consumer groups over HTTP (drc.core.consumer_groups is the model, drc.api.group_service the
state kept in ZooKeeper)::

    GET    /v1/groups                                   every group: name, members, ranges
    POST   /v1/groups                        admin      create {name, tables, rows,
                                                        partitioning, ranges,
                                                        heartbeat_timeout_s, after, skip_drc,
                                                        full, chunk_rows}
    GET    /v1/groups/{name}                            its spec, members and ranges
    DELETE /v1/groups/{name}                 admin      delete it (members get 404)
    POST   /v1/groups/{name}/reset           admin      {"scn"}: every range reads after it
    POST   /v1/groups/{name}/members                    join: {"member", "assignment", ...}
    POST   /v1/groups/{name}/members/{id}/heartbeat     {"released": [range, ...]}: the
                                                        current assignment (410: join again)
    DELETE /v1/groups/{name}/members/{id}               leave: its ranges are handed out
    GET    /v1/groups/{name}/ranges/{i}/events?member=ID&version=V&after=SCN[&max_events=N]
                   [&max_bytes=B][&wait_ms=W][&epoch=E]  the range's row changes, as
                                                        /v1/events answers (JSON or records)
    POST   /v1/groups/{name}/ranges/{i}/commit          {"member", "version", "scn"}
    GET    /v1/groups/{name}/chunks/{i}/rows?member=ID&version=V   a full group's chunk: its
                                                        rows from one consistent read
    POST   /v1/groups/{name}/chunks/{i}/commit          {"member", "version"}: TERMINATED

A pull or commit by a member that does not hold the range at that version is refused with 409
(``stale_assignment``; ``full_phase_running`` for a range of a full group whose chunks are not
all TERMINATED yet, drc.core.group_full). A pull stopped by the per-key barrier
(drc.core.range_filter) answers what comes before it with ``X-DRC-Waiting: <ranges>`` (the
ranges whose checkpoints it waits for); ``next`` then stops before the barrier's transaction.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from drc.api import wire
from drc.api.deps import ApiDeps, Deps, admin_caller, require_token
from drc.api.errors import ApiError
from drc.api.events import READ_FAILURES, pull_failure, wants_records
from drc.api.group_lag import group_lag
from drc.api.group_service import GroupService, group_summary
from drc.api.metrics import Family
from drc.api.pull import Batch, batch_headers, pull, render_json, render_records
from drc.api.pullquery import BadQuery, PullQuery, ServerLimits, parse_pull_query, single_values
from drc.core import group_full
from drc.core.consumer_groups import (
    BY_KEY,
    CLOSED,
    CLOSING,
    DEFAULT_CHUNK_ROWS,
    OPEN,
    GroupSpec,
    GroupState,
    GroupStateError,
)
from drc.core.errors import MalformedScnError, RetriableError, shown
from drc.core.range_filter import KeyColumns, RangeFilter
from drc.core.scn import SCN

router = APIRouter(dependencies=[Depends(require_token)])
PATH = wire.PATH_GROUPS
HEADER_WAITING = wire.HEADER_WAITING
ERROR_STALE = wire.ERROR_STALE_ASSIGNMENT
BARRIER_RETRY_S = 0.1
_PULL_PARAMS = ("member", "version", "after", "max_events", "max_bytes", "wait_ms", "epoch")


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=64)
    tables: str = Field("", max_length=16384)
    rows: dict[str, str] | None = None
    partitioning: str = BY_KEY
    ranges: int = 64
    heartbeat_timeout_s: float = 10.0
    after: str | None = Field(None, max_length=120)  # default: the buffer's newest SCN
    skip_drc: bool = False
    full: bool = False
    chunk_rows: int = Field(DEFAULT_CHUNK_ROWS, ge=1, le=1_000_000)


class HeartbeatBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    released: list[int] = Field(default_factory=list, max_length=65536)


class CommitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    member: str = Field(max_length=64)
    version: int
    scn: str = Field(max_length=120)


def service(deps: ApiDeps) -> GroupService:
    if deps.groups is None:
        raise ApiError(404, "this process serves no consumer groups (it holds no buffer)")
    return deps.groups


def refusal(error: GroupStateError) -> ApiError:
    # 410 has its own code: the clients' default for 410 is scn_too_old (a pull's)
    default = {409: ERROR_STALE, 410: wire.ERROR_NOT_A_MEMBER}.get(error.status)
    code = error.code or default
    return ApiError(error.status, str(error), code=code)


def full_view(state: GroupState) -> dict[str, Any] | None:
    """A full group's phase: its start SCN (where the ranges read after), chunks done."""
    if not state.spec.full:
        return None
    return {"running": state.full_running, "scn": state.spec.start,
            **group_full.progress(state.chunks)}  # fmt: skip


def _summary(state: GroupState) -> dict[str, Any]:
    spec = dataclasses.asdict(state.spec)
    spec["rows"] = None if state.spec.rows is None else dict(state.spec.rows)
    return {
        "name": state.spec.name,
        "spec": spec,
        "members": [{"member": m, "heartbeat": t} for m, t in sorted(state.members.items())],
        "ranges": [
            {
                "range": r.index,
                "owner": r.owner,
                "state": r.state,
                "version": r.version,
                "checkpoint": str(state.position(r.index)),
            }
            for r in state.ranges
        ],
        "full": full_view(state),
        "chunks": [
            {
                "chunk": c.index,
                "table": c.table,
                "owner": c.owner,
                "state": c.state,
                "version": c.version,
                "read_at": c.read_at,
            }  # fmt: skip
            for c in state.chunks
        ],
    }


def _member_view(state: GroupState, member: str) -> dict[str, Any]:
    return {
        "group": state.spec.name,
        "member": member,
        "heartbeat_timeout_s": state.spec.heartbeat_timeout_s,
        "ranges": state.spec.ranges,
        "assignment": state.assignment(member),
        "full": full_view(state),
        "chunks": state.full_assignment(member),
    }


@router.get(PATH)
def list_groups(deps: Deps) -> dict[str, Any]:
    groups = service(deps)
    out = []
    for name in groups.names():
        try:
            state = groups.get(name)
        except GroupStateError:
            continue  # deleted meanwhile
        out.append({"name": name, "members": len(state.members), "ranges": state.spec.ranges})
    return {"groups": out}


@router.post(PATH, status_code=201)
def create_group(request: Request, body: CreateBody, deps: Deps) -> dict[str, Any]:
    admin_caller(request)
    after = body.after
    if body.full and after is not None:
        raise ApiError(400, "a full group starts where its snapshot stands: leave after out")
    if after is None:
        last = deps.buffer.last_scn if deps.buffer is not None else None
        after = str(last if last is not None else SCN.zero())
    try:
        spec = GroupSpec(
            body.name, body.tables, body.rows, body.partitioning, body.ranges,
            body.heartbeat_timeout_s, after, body.skip_drc, body.full, body.chunk_rows,
        )  # fmt: skip
        if spec.full and SCN.parse(after).server_id == 0:
            raise GroupStateError(503, "the replicator has captured nothing yet: a full group "
                                  "needs its stream's position; retry once it has")  # fmt: skip
        _check_filters(spec)
        return _summary(service(deps).create(spec))
    except GroupStateError as exc:
        raise refusal(exc) from exc


def _check_filters(spec: GroupSpec) -> None:
    """400 now for tables or rows a pull would refuse later."""
    try:
        parse_pull_query(_filter_params(spec, str(SCN.zero())), _UNBOUNDED)
    except BadQuery as exc:
        raise GroupStateError(400, str(exc)) from exc


@router.get(PATH + "/{name}")
def show_group(name: str, deps: Deps) -> dict[str, Any]:
    try:
        return _summary(service(deps).get(name))
    except GroupStateError as exc:
        raise refusal(exc) from exc


@router.delete(PATH + "/{name}")
def delete_group(request: Request, name: str, deps: Deps) -> dict[str, Any]:
    admin_caller(request)
    try:
        service(deps).delete(name)
    except GroupStateError as exc:
        raise refusal(exc) from exc
    return {"deleted": name}


@router.post(PATH + "/{name}/reset")
def reset_group(request: Request, name: str, body: dict[str, str], deps: Deps) -> dict[str, Any]:
    admin_caller(request)
    scn = _scn(body.get("scn", ""), "scn")
    try:
        return _summary(service(deps).update(name, lambda s: s.reset(scn)))
    except GroupStateError as exc:
        raise refusal(exc) from exc


@router.post(PATH + "/{name}/members", status_code=201)
def join(name: str, deps: Deps) -> dict[str, Any]:
    try:
        member, state = service(deps).join(name)
    except GroupStateError as exc:
        raise refusal(exc) from exc
    return _member_view(state, member)


@router.post(PATH + "/{name}/members/{member}/heartbeat")
def heartbeat(name: str, member: str, body: HeartbeatBody, deps: Deps) -> dict[str, Any]:
    try:
        state = service(deps).heartbeat(name, member, body.released)
    except GroupStateError as exc:
        raise refusal(exc) from exc
    return _member_view(state, member)


@router.delete(PATH + "/{name}/members/{member}")
def leave(name: str, member: str, deps: Deps) -> dict[str, Any]:
    try:
        service(deps).update(name, lambda s: s.leave(member))
    except GroupStateError as exc:
        raise refusal(exc) from exc
    return {"left": member}


@router.post(PATH + "/{name}/ranges/{index}/commit")
def commit(name: str, index: int, body: CommitBody, deps: Deps) -> dict[str, Any]:
    scn = _scn(body.scn, "scn")
    try:
        state = service(deps).update(
            name, lambda s: s.commit(body.member, index, body.version, scn)
        )
    except GroupStateError as exc:
        raise refusal(exc) from exc
    return {"range": index, "checkpoint": str(state.position(index))}


@router.get(PATH + "/{name}/ranges/{index}/events")
def range_events(request: Request, name: str, index: int, deps: Deps) -> Response:
    if deps.buffer is None:
        raise ApiError(404, "this process holds no buffer")
    records = wants_records(request.headers.get("accept"))
    try:
        values = single_values(request.query_params.multi_items(), _PULL_PARAMS)
    except BadQuery as exc:
        raise ApiError(400, str(exc)) from exc
    version = parse_version(values.get("version", ""))
    member = values.get("member", "")
    deadline: float | None = None
    while True:
        try:
            state = service(deps).get(name)
            state.check_holder(member, index, version)
        except GroupStateError as exc:
            raise refusal(exc) from exc
        query = _range_query(deps, state, index, values)
        if deadline is None:
            deadline = time.monotonic() + query.wait_s
        try:
            batch = pull(deps.pull_buffer(), query, stopped=deps.stop.is_set)
        except READ_FAILURES as exc:
            raise pull_failure(deps, query, exc) from exc
        barrier = _barrier(query)
        if barrier is None or batch.items or time.monotonic() >= deadline or deps.stop.is_set():
            return _response(batch, records, barrier)
        time.sleep(BARRIER_RETRY_S)  # other ranges commit meanwhile: look again


def parse_version(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ApiError(400, f"version must be the range's version from your assignment, got "
                       f"{shown(text)}")  # fmt: skip
    return int(text)


def _barrier(query: PullQuery) -> str | None:
    ranges = query.selection.ranges
    found = None if ranges is None else ranges.found
    return None if found is None else ",".join(str(i) for i in found.ranges)


_UNBOUNDED = ServerLimits()


def _filter_params(spec: GroupSpec, after: str) -> list[tuple[str, str]]:
    params = [("after", after), ("skip_drc", "1" if spec.skip_drc else "0")]
    if spec.tables:
        params.append(("tables", spec.tables))
    if spec.rows:
        params.append(("rows", json.dumps(dict(spec.rows))))
    return params


def _range_query(deps: ApiDeps, state: GroupState, index: int, values: dict[str, str]) -> PullQuery:
    params = _filter_params(state.spec, values.get("after", ""))
    params += [(k, v) for k, v in values.items() if k not in ("member", "version", "after")]
    try:
        query = parse_pull_query(params, deps.limits)
    except BadQuery as exc:
        raise ApiError(400, str(exc)) from exc
    ranges = RangeFilter(
        index,
        state.spec.ranges,
        state.spec.partitioning == BY_KEY,
        _key_columns(deps),
        {i: state.position(i) for i in range(state.spec.ranges)},
    )
    return dataclasses.replace(query, selection=dataclasses.replace(query.selection, ranges=ranges))


def _key_columns(deps: ApiDeps) -> KeyColumns:
    def columns(schema: str, table: str, scn: SCN) -> tuple[str, ...]:
        found = None if deps.metastore is None else deps.metastore.schema_at(schema, table, scn)
        return () if found is None else tuple(found.primary_key)

    return columns


def _response(batch: Batch, records: bool, waiting: str | None) -> Response:
    body = render_records(batch) if records else render_json(batch)
    headers = batch_headers(batch)
    if waiting is not None:
        headers[HEADER_WAITING] = waiting
    media = wire.MEDIA_RECORDS if records else wire.MEDIA_JSON
    return Response(body, media_type=media, headers=headers)


def group_families(deps: ApiDeps) -> list[Family]:
    """/metrics of the consumer groups: members, ranges by state, the oldest checkpoint's
    binlog position (how far the slowest range is behind the buffer's own position), and each
    range's lag and backlog (drc.api.group_lag)."""
    if deps.groups is None:
        return []
    try:
        states = deps.groups.states()
    except RetriableError:
        return []  # ZooKeeper does not answer: /v1/status says so
    members = Family("drc_consumer_group_members", "gauge", "Live members of a consumer group")
    ranges = Family("drc_consumer_group_ranges", "gauge", "Ranges of a consumer group by state")
    index = Family("drc_consumer_group_oldest_log_index", "gauge",
                   "Binlog file of the group's oldest range checkpoint")  # fmt: skip
    pos = Family("drc_consumer_group_oldest_log_pos", "gauge",
                 "Binlog position of the group's oldest range checkpoint")  # fmt: skip
    lag = Family("drc_consumer_group_range_lag_seconds", "gauge",
                 "Now - commit time of the first record after a range's position")  # fmt: skip
    backlog = Family("drc_consumer_group_range_backlog_bytes", "gauge",
                     "Buffer bytes stored after a range's position")  # fmt: skip
    now = deps.wall_clock()
    for state in states:
        group = group_summary(state)
        name = str(group["name"])
        members.add(group["members"], group=name)
        for range_state in (OPEN, CLOSING, CLOSED):
            ranges.add(group["ranges"].get(range_state, 0), group=name, state=range_state)
        oldest = SCN.parse(group["oldest_checkpoint"])
        index.add(oldest.log_index, group=name)
        pos.add(oldest.log_pos, group=name)
        for measured in group_lag(deps.buffer, state, now):
            lag.add(measured.lag_seconds, group=name, range=str(measured.range))
            backlog.add(measured.backlog_bytes, group=name, range=str(measured.range))
    return [members, ranges, index, pos, lag, backlog] if states else []


def _scn(text: str, name: str) -> SCN:
    try:
        return SCN.parse(text)
    except MalformedScnError as exc:
        raise ApiError(400, f"{name}: {exc} (got {shown(text)})") from exc
