"""``GET /ui``: the status page, and ``GET /v1/peers``: what it shows of the other datacenters.

The page is two static files (no build step), the markup at ``/ui`` and its script at ``/ui.js``
(its own file, so the policy allows no inline script), that poll ``/v1/status`` and
``/v1/peers`` of the API serving them; with tokens configured it asks for one and keeps it for
the browser tab only.
``/v1/peers`` (token required) is the status of every remote replicator this datacenter's
channels pull from, fetched by this process with the channels' own tokens (drc.client.peers).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, Response

from drc.api import wire
from drc.api.deps import Deps, require_token

open_router = APIRouter()
router = APIRouter(dependencies=[Depends(require_token)])

# The page builds everything from JSON as text nodes; no script runs but /ui.js (none inline,
# none injected), and nothing may frame it.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


@cache
def _static(name: str) -> str:
    return (files("drc.api") / "static" / name).read_text(encoding="utf-8")


@open_router.get(wire.PATH_UI, response_class=HTMLResponse)
async def get_ui() -> HTMLResponse:
    return HTMLResponse(_static("ui.html"), headers=_HEADERS)


@open_router.get(wire.PATH_UI_SCRIPT)
async def get_ui_script() -> Response:
    return Response(_static("ui.js"), media_type="text/javascript", headers=_HEADERS)


@router.get(wire.PATH_PEERS)
async def get_peers(deps: Deps) -> list[dict[str, Any]]:
    if deps.peers is None:
        return []
    return await anyio.to_thread.run_sync(deps.peers)
