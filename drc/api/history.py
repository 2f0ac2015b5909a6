"""``GET /v1/history?after=S&upto=U``: the metastore's entries at SCNs in (S, U], as stored.

Group followers copy the leader's schema history with it before they append the records up to
``U``, so every member holds the same history (drc.replicator.follower). Entries come in the
order they were recorded: ``{"entries": [{"db", "table", "scn", "kind", "columns",
"statement"}]}``, ``columns`` being the stored JSON text of a schema entry.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request

from drc.api import wire
from drc.api.deps import Deps, require_token
from drc.api.errors import ApiError
from drc.core.errors import MalformedScnError
from drc.core.scn import SCN

router = APIRouter(dependencies=[Depends(require_token)])


@router.get(wire.PATH_HISTORY)
async def get_history(request: Request, deps: Deps) -> dict[str, Any]:
    params = dict(request.query_params.multi_items())
    if set(params) != {"after", "upto"} or len(request.query_params.multi_items()) != 2:
        raise ApiError(400, "give after=SCN and upto=SCN, once each")
    try:
        after, upto = SCN.parse(params["after"]), SCN.parse(params["upto"])
    except MalformedScnError as exc:
        raise ApiError(400, str(exc)) from exc
    if deps.metastore is None:
        raise ApiError(404, "this server has no schema history (no metastore)")
    entries = await anyio.to_thread.run_sync(deps.metastore.entries_between, after, upto)
    return {
        "entries": [
            {
                "db": e.db,
                "table": e.tbl,
                "scn": str(e.scn),
                "kind": e.kind,
                "columns": e.columns,
                "statement": e.statement,
            }
            for e in entries
        ]
    }
