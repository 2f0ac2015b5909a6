"""``GET /v1/schema/{db}/{table}?scn=S``: a table's schema as of an SCN (default: the newest),
from the metastore. 404 names the table when it is unknown or was dropped at that SCN."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request

from drc.api import wire
from drc.api.deps import Deps, require_token
from drc.api.errors import ApiError
from drc.core.errors import MalformedScnError, shown
from drc.core.events import TableSchema
from drc.core.scn import SCN

router = APIRouter(dependencies=[Depends(require_token)])


@router.get(wire.PATH_SCHEMA + "/{db}/{table}")
async def get_schema(db: str, table: str, request: Request, deps: Deps) -> dict[str, Any]:
    scn = _scn(request)
    if deps.metastore is None:
        raise ApiError(404, "this server has no schema history (no metastore)")
    entry = await anyio.to_thread.run_sync(deps.metastore.version_at, db, table, scn)
    where = "now" if scn is None else f"at SCN {scn}"
    name = shown(f"{db}.{table}")
    if entry is None:
        raise ApiError(404, f"no schema recorded for {name} {where}")
    if entry.schema is None:
        raise ApiError(404, f"{name} was dropped at SCN {entry.scn}, {where} it does not exist")
    return {"since": str(entry.scn), **schema_to_json(entry.schema)}


def _scn(request: Request) -> SCN | None:
    params = request.query_params.multi_items()
    unknown = sorted({name for name, _ in params} - {"scn"})
    if unknown or len(params) > 1:
        raise ApiError(400, "the only parameter is scn, given once (default: the newest)")
    if not params:
        return None
    try:
        return SCN.parse(params[0][1])
    except MalformedScnError as exc:
        raise ApiError(400, f"scn: {exc}") from exc


def schema_to_json(schema: TableSchema) -> dict[str, Any]:
    return {
        "schema": schema.schema,
        "table": schema.table,
        "columns": [
            {"name": c.name, "type": c.type, "nullable": c.nullable, "charset": c.charset}
            for c in schema.columns
        ],
        "primary_key": list(schema.primary_key),
    }
