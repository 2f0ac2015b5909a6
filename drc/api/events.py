"""``GET /v1/events``: the next committed transactions after an SCN (see :mod:`drc.api.wire`).

A pull reads the buffer in worker threads (:class:`drc.api.pull.Pull`) and waits for commits
on the event loop (:class:`drc.api.commits.CommitSignal`), so a waiting long poll holds no
thread. Pulls that do not wait read under their own thread limiter, never queueing behind long
polls. A pull about to wait first takes a long-poll slot (:mod:`drc.api.longpolls`: 429/503
when its token or the server holds too many). A client that hangs up cancels its pull.

A pull reads only once the reader budget has room (:mod:`drc.api.budget`; after
:data:`drc.api.budget.PULL_ADMIT_S` without room: 503 ``reader_memory_full`` with
``Retry-After``); what it read is charged to the budget until its answer is written, in pieces
that each wait for the connection's transport to drain.
"""

from __future__ import annotations

from contextlib import ExitStack

import anyio
import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from drc.api import accept, pullquery, wire
from drc.api.batching import RowsOmitted
from drc.api.budget import CHUNK_BYTES, PULL_ADMIT_S, RETRY_AFTER_S, Charge
from drc.api.commits import CommitSignal
from drc.api.deps import ApiDeps, Deps, get_deps, require_token
from drc.api.errors import ApiError
from drc.api.pull import (
    INLINE_BYTES,
    STOP_CHECK_S,
    Batch,
    EpochMismatch,
    Pull,
    batch_headers,
    render_json,
    render_records,
)
from drc.api.pullquery import BadQuery, PullQuery, parse_pull_query
from drc.core.errors import RetriableError, ScnTooOldError, shown
from drc.core.rowfilter import RowFilterColumnError
from drc.eventbuffer.reader import PositionError

router = APIRouter(dependencies=[Depends(require_token)])
OFFERED = (wire.MEDIA_JSON, wire.MEDIA_RECORDS)  # the first is the default
GONE_STATUS = 499  # never sent: the client hung up
# What a read may raise that answers the pull (pull_failure); a stream ends with it.
READ_FAILURES = (
    RowsOmitted,
    EpochMismatch,
    ScnTooOldError,
    PositionError,
    RetriableError,
    RowFilterColumnError,
)


@router.get(wire.PATH_EVENTS)
async def get_events(request: Request, deps: Deps) -> Response:
    query = request_query(request, deps)
    records = wants_records(request.headers.get("accept"))
    compress = records and wire.accepts_compression(request.headers.get(wire.HEADER_COMPRESSION))
    commits: CommitSignal = request.app.state.commits
    caller: str = request.state.caller
    response = Response(status_code=GONE_STATUS)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_cancel_on_disconnect, request, tasks.cancel_scope)
        response = await _serve(deps, commits, caller, query, records, compress)
        tasks.cancel_scope.cancel()
    return response


def request_query(request: Request, deps: ApiDeps) -> PullQuery:
    """The pull's (or stream's) query; ApiError 400 if malformed, 409 if it would get records
    this replicator stores without their rows."""
    try:
        query = parse_pull_query(request.query_params.multi_items(), deps.limits)
    except BadQuery as exc:
        raise ApiError(400, str(exc)) from exc
    if deps.drc_applied == pullquery.DRC_APPLIED_MARKER and query.selection.refuses_markers:
        raise rows_omitted_error(None)
    return query


class FastPath:
    """ASGI middleware that serves ``GET /v1/events`` with the endpoint above, called
    directly: the same token check, query parsing, errors and answer, without FastAPI's
    routing, dependency solving and inner middleware, which cost more CPU than a pull that
    answers one or two transactions. Installed inside errors.Guard (metrics, the 500 for an
    unexpected error); every other request goes on to the application."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The route, which metrics name (errors.Guard reads scope["route"]), as FastAPI's would.
        self.route = next(r for r in router.routes if getattr(r, "path", "") == wire.PATH_EVENTS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != wire.PATH_EVENTS
            or scope["method"] != "GET"
            or not hasattr(scope["app"].state, "commits")  # no buffer: the app says 404
        ):
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route
        request = Request(scope, receive, send)
        try:
            await require_token(request)
            response = await get_events(request, get_deps(request))
        except ApiError as exc:
            response = exc.response()
        await response(scope, receive, send)


def wants_records(header: str | None) -> bool:
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


async def _cancel_on_disconnect(request: Request, scope: anyio.CancelScope) -> None:
    """End the pull of a client that hung up: its long poll frees its slot at once."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _serve(
    deps: ApiDeps,
    commits: CommitSignal,
    caller: str,
    query: PullQuery,
    records: bool,
    compress: bool,
) -> Response:
    # Errors are returned, not raised: the task group would wrap them in an ExceptionGroup.
    charge = Charge(deps.budget)
    try:
        response = await _answer(deps, commits, caller, query, (records, compress), charge)
    except BaseException:
        charge.close()
        raise
    if not charge.size:
        return response
    return ChargedResponse(response, charge)


async def _answer(
    deps: ApiDeps,
    commits: CommitSignal,
    caller: str,
    query: PullQuery,
    form: tuple[bool, bool],  # records (else JSON), compressed
    charge: Charge,
) -> Response:
    records, compress = form
    try:
        batch = await _collect(deps, commits, caller, query, charge)
    except ApiError as exc:
        charge.close()
        return exc.response()
    except READ_FAILURES as exc:
        charge.close()
        return pull_failure(deps, query, exc).response()
    if not batch.items or sum(len(i.record()) for i in batch.items) <= INLINE_BYTES:
        return _response(deps, batch, records, compress)  # small: beats a thread hand-off
    limiter = deps.long_poll_limiter if query.waits else deps.limiter
    return await anyio.to_thread.run_sync(
        _response, deps, batch, records, compress, limiter=limiter
    )


def memory_full(deps: ApiDeps) -> ApiError:
    """The 503 for a reader the budget had no room for (counted as shed)."""
    deps.budget.shed()
    limit_mb = deps.budget.limit / (1 << 20)
    return ApiError(
        503,
        f"the readers of this server hold all of its reader memory ({limit_mb:g} MB of records "
        f"read and not yet sent, [api] reader_memory_mb): pull again after {RETRY_AFTER_S}s",
        code=wire.ERROR_READER_MEMORY_FULL,
        headers={"Retry-After": str(RETRY_AFTER_S)},
        retry_after_s=RETRY_AFTER_S,
    )


class ChargedResponse(Response):
    """A pull's answer whose records are charged to the reader budget until written: the body
    goes out in pieces, each after the transport drained (uvicorn's flow control), so a
    client that stops reading holds it here, counted, not in an unbounded transport buffer."""

    def __init__(self, answer: Response, charge: Charge) -> None:
        super().__init__(answer.body, status_code=answer.status_code)
        self.raw_headers = answer.raw_headers
        self._charge = charge

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            start = {"type": "http.response.start", "status": self.status_code}
            await send({**start, "headers": self.raw_headers})
            body = self.body
            for offset in range(0, len(body), CHUNK_BYTES):
                piece = body[offset : offset + CHUNK_BYTES]
                more = offset + CHUNK_BYTES < len(body)
                await send({"type": "http.response.body", "body": piece, "more_body": more})
        finally:
            self._charge.close()


def pull_failure(deps: ApiDeps, query: PullQuery, exc: Exception) -> ApiError:
    """The answer to a pull (or stream) whose read raised ``exc``, one of READ_FAILURES."""
    if isinstance(exc, RowsOmitted):
        return rows_omitted_error(exc)
    if isinstance(exc, RowFilterColumnError):
        return ApiError(
            400,
            f"{pullquery.PARAM_ROWS}: {exc}: correct the predicate and pull again from SCN "
            f"{query.after}",
        )
    if isinstance(exc, EpochMismatch):
        return ApiError(
            409,
            f"epoch {query.epoch} is not this buffer's: it was rebuilt or is another "
            "replicator's. SCNs are shared by every replicator of the group, so continuing from "
            "the same SCN without an epoch is normally safe; check first that the stream was not "
            "restored or re-seeded",
            epoch=exc.current,
        )
    if isinstance(exc, PositionError):
        return ApiError(400, f"{pullquery.PARAM_WITHIN}: {exc}")
    if isinstance(exc, ScnTooOldError):
        # With back to source, the backfill's message says why the binlog cannot serve it.
        message = (
            str(exc)
            if deps.back_to_source is not None
            else (
                f"SCN {query.after} is older than this buffer holds; it serves reads after "
                f"{exc.oldest}: resume from a snapshot or the source binlog"
            )
        )
        return ApiError(410, message, oldest=str(exc.oldest))
    # RetriableError: back to source, and the source did not answer: try again soon
    return ApiError(
        503,
        f"SCN {query.after} is older than this buffer holds and the source binlog that has "
        "it cannot be read right now; retry shortly or ask another replicator",
        headers={"Retry-After": "1"},
    )


def rows_omitted_error(found: RowsOmitted | None) -> ApiError:
    """The 409 for a pull that would get DRC-applied transactions without their rows."""
    where = (
        "this replicator stores the transactions DRC's apply channels wrote without their rows "
        '([replicator] drc_applied = "marker")'
        if found is None
        else f'{found}, written by DRC\'s apply channels (stored with drc_applied = "marker")'
    )
    return ApiError(
        409,
        f"{where}: pull with skip_drc=1 to leave DRC-applied transactions out, or with "
        f"{pullquery.PARAM_DRC_APPLIED}={pullquery.DRC_APPLIED_MARKER} to receive them flagged "
        'rows_omitted without their rows; set drc_applied = "full" on the replicator for '
        "their rows from then on",
        code=wire.ERROR_ROWS_OMITTED,
        scn=None if found is None else str(found.scn),
    )


async def _collect(
    deps: ApiDeps, commits: CommitSignal, caller: str, query: PullQuery, charge: Charge
) -> Batch:
    """Scan, and while the query allows, wait for commits and scan again; what the batch
    holds is charged to ``charge``."""
    limiter = deps.long_poll_limiter if query.waits else deps.limiter
    state = Pull(deps.pull_buffer(), query)
    with ExitStack() as held:
        slot = False
        while True:
            if not await deps.budget.admit(PULL_ADMIT_S):
                raise memory_full(deps)
            if not state.scan_inline():
                await anyio.to_thread.run_sync(state.scan, limiter=limiter)
            charge.add(state.builder.bytes - charge.size)
            if state.finished or deps.stop.is_set():
                return state.batch()
            if not slot:
                if state.builder.transactions:  # wait_ms=0, partly full: send, never refuse
                    return state.batch()
                held.enter_context(deps.long_polls.slot(caller))
                slot = True
            with deps.metrics.waiting():
                await commits.wait(state.builder.next, min(state.remaining_s, STOP_CHECK_S))


def _response(deps: ApiDeps, batch: Batch, records: bool, compress: bool) -> Response:
    body = render_records(batch) if records else render_json(batch)
    deps.metrics.served(len(batch.items), sum(len(item.record()) for item in batch.items))
    media = wire.MEDIA_RECORDS if records else wire.MEDIA_JSON
    headers = batch_headers(batch)
    if compress:
        packed = wire.compress_body(body)
        deps.metrics.compressed(len(body), len(body) if packed is None else len(packed))
        if packed is not None:
            body = packed
            headers[wire.HEADER_COMPRESSION] = wire.COMPRESSION_LZ4
    if deps.group is not None:
        headers[wire.HEADER_TERM] = str(deps.group()["term"])
    return Response(body, media_type=media, headers=headers)
