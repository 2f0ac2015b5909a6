"""``GET /ui``: the status page, and ``GET /v1/peers``: what it shows of the other datacenters.

The page is one static file (no build step) that polls ``/v1/status`` and ``/v1/peers`` of the
API serving it; with tokens configured it asks for one and keeps it for the browser tab only.
``/v1/peers`` (token required) is the status of every remote replicator this datacenter's
channels pull from, fetched by this process with the channels' own tokens (drc.client.peers).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse

from drc.api import wire
from drc.api.deps import Deps, require_token

open_router = APIRouter()
router = APIRouter(dependencies=[Depends(require_token)])

# The page builds everything from JSON as text nodes; nothing else may run or be framed.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


@cache
def _page() -> str:
    return (files("drc.api") / "static" / "ui.html").read_text(encoding="utf-8")


@open_router.get(wire.PATH_UI, response_class=HTMLResponse)
async def get_ui() -> HTMLResponse:
    return HTMLResponse(_page(), headers=_HEADERS)


@router.get(wire.PATH_PEERS)
async def get_peers(deps: Deps) -> list[dict[str, Any]]:
    if deps.peers is None:
        return []
    return await anyio.to_thread.run_sync(deps.peers)
