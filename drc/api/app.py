"""The FastAPI application: routers per resource, error shape, auth, metrics.

Endpoints (all but /healthz need a bearer token when tokens are configured)::

    GET /v1/events?after=SCN[&tables=db.t,db2.*][&max_events=N][&max_bytes=B][&wait_ms=W]
                   [&epoch=E][&skip_drc=1]        the change stream; see drc.api.pullquery
    GET /v1/stream?after=SCN[&...same as /v1/events]  the same records on one long-lived
                                                  response, as they commit (drc.api.stream)
    GET /v1/status                                role, buffer, source position, lag, capture
    GET /v1/position?at_ms=T                      the SCN to read after for changes from time T
    GET /v1/schema/{db}/{table}[?scn=S]           a table's schema as of S (default: newest)
    GET /v1/segments[?after=S][&to=S]             the buffer's segments: SCN range, size, sha256
    GET /v1/segments/{name}                       one segment's bytes, with Range (resumable)
    GET /v1/history?after=S&upto=U                schema history entries (group followers)
    /v1/groups[/...]                              consumer groups: create, join, heartbeat,
                                                  range pulls, commits (drc.api.groups)
    GET /metrics                                  Prometheus text format
    GET /v1/wait?gtid=G[&timeout_ms=T][&channel=C]  200 once this process's channels applied
                                                  source GTID G, 408 after T (drc.api.waits)
    GET /v1/peers                                 the remote replicators the channels pull from
    GET /ui, /ui.js                               the status page and its script (open; its data
                                                  needs a token)
    GET /healthz                                  200 ok, 503 buffer closed, capture failed,
                                                  a channel or another component stopped
                                                  (the failure's detail only with a token)

Without a buffer (``drc run --role apply``) only /v1/status, /metrics, /healthz, the channel
control (/v1/channels) and /v1/wait are served.

A pull about to wait takes a long-poll slot (drc.api.longpolls): 429 when its token holds
``[api] max_long_polls_per_token``, 503 when the server holds ``max_long_polls``.

Serving it (uvicorn in a thread, TLS) is :mod:`drc.api.server`.
"""

from __future__ import annotations

from fastapi import FastAPI

from drc.api import (
    control,
    errors,
    events,
    group_chunks,
    groups,
    health,
    history,
    schema,
    segments,
    status,
    stream,
    ui,
    waits,
)
from drc.api.commits import CommitSignal
from drc.api.deps import ApiDeps
from drc.eventbuffer.export import Checksums


def create_app(deps: ApiDeps) -> FastAPI:
    app = FastAPI(
        title="DRC pull API",
        summary="The change stream of one replicator, pulled by SCN",
        docs_url=None,  # no interactive docs or schema endpoints on a replication port
        redoc_url=None,
        openapi_url=None,
        # A path with a trailing slash is a 404, not a redirect: Starlette builds the redirect's
        # Location from the request's Host header, which a client controls.
        redirect_slashes=False,
    )
    app.state.deps = deps
    errors.install(app)
    if deps.buffer is not None:
        app.state.commits = CommitSignal(deps.buffer, deps.stop)
        app.state.segment_sums = Checksums()
        for module in (events, stream, schema, history, segments, groups, group_chunks):
            app.include_router(module.router)
    app.state.applied = waits.AppliedSignal()
    for module in (status, health, ui, control, waits):
        app.include_router(module.router)
    app.include_router(health.open_router)
    app.include_router(ui.open_router)
    app.add_middleware(events.FastPath)  # inside Guard: counted, and a 500 for a crash
    app.add_middleware(errors.Guard, metrics=deps.metrics)
    return app
