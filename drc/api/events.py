"""``GET /v1/events``: the next committed transactions after an SCN (see :mod:`drc.api.wire`).

The pull (reading, filtering, long-poll waiting, rendering) runs in a worker thread under the
app's CapacityLimiter, so hundreds of subscribers can wait for commits at once while the event
loop stays free for other requests.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response

from drc.api import accept, wire
from drc.api.deps import ApiDeps, Deps, require_token
from drc.api.errors import ApiError
from drc.api.pull import EpochMismatch, batch_headers, pull, render_json, render_records
from drc.api.query import BadQuery, PullQuery, parse_pull_query
from drc.core.errors import ScnTooOldError, shown

router = APIRouter(dependencies=[Depends(require_token)])
OFFERED = (wire.MEDIA_JSON, wire.MEDIA_RECORDS)  # the first is the default


@router.get(wire.PATH_EVENTS)
async def get_events(request: Request, deps: Deps) -> Response:
    try:
        query = parse_pull_query(request.query_params.multi_items(), deps.limits)
    except BadQuery as exc:
        raise ApiError(400, str(exc)) from exc
    records = _wants_records(request.headers.get("accept"))
    gone = threading.Event()
    stopped = functools.partial(_stopped, deps.stop, gone)
    serve = functools.partial(_serve, deps, query, records, stopped)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_watch_disconnect, request, gone)
        response = await anyio.to_thread.run_sync(serve, limiter=deps.limiter)
        tasks.cancel_scope.cancel()
    return response


def _wants_records(header: str | None) -> bool:
    media = accept.choose(header, OFFERED)
    if media is None:
        raise ApiError(
            406,
            f"Accept {shown(header or '')} allows none of the forms served here: "
            f"send Accept: {wire.MEDIA_JSON} or {wire.MEDIA_RECORDS} (or leave it out for JSON)",
            code=wire.ERROR_NOT_ACCEPTABLE,
            offered=list(OFFERED),
        )
    return media == wire.MEDIA_RECORDS


async def _watch_disconnect(request: Request, gone: threading.Event) -> None:
    """Flag a client that hung up, so its long poll frees the worker thread early."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()


def _stopped(server_stop: threading.Event, gone: threading.Event) -> bool:
    return server_stop.is_set() or gone.is_set()


def _serve(deps: ApiDeps, query: PullQuery, records: bool, stopped: Callable[[], bool]) -> Response:
    # Errors are returned, not raised: the task group would wrap them in an ExceptionGroup.
    try:
        batch = pull(deps.buffer, query, stopped=stopped, waiting=deps.metrics.waiting)
    except EpochMismatch as exc:
        return ApiError(
            409,
            f"epoch {query.epoch} is not this buffer's: it was rebuilt or is another "
            "replicator's. SCNs are shared by every replicator of the group, so continuing from "
            "the same SCN without an epoch is normally safe; check first that the stream was not "
            "restored or re-seeded",
            epoch=exc.current,
        ).response()
    except ScnTooOldError as exc:
        return ApiError(
            410,
            f"SCN {query.after} is older than this buffer holds; it serves reads after "
            f"{exc.oldest}: resume from a snapshot or the source binlog",
            oldest=str(exc.oldest),
        ).response()
    body = render_records(batch) if records else render_json(batch)
    deps.metrics.served(len(batch.items), sum(len(item.record()) for item in batch.items))
    media = wire.MEDIA_RECORDS if records else wire.MEDIA_JSON
    return Response(body, media_type=media, headers=batch_headers(batch))
