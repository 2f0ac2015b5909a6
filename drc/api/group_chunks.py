"""A full consumer group's chunks over HTTP (drc.core.group_full; the rest is drc.api.groups)::

    GET  /v1/groups/{name}/chunks/{i}/rows?member=ID&version=V
         {"chunk", "table", "version", "read_at", "columns", "rows": [[value, ...], ...]}:
         the chunk's rows from one consistent read of the source at ``read_at`` (>= the
         group's start SCN), values as /v1/events' JSON writes them
    POST /v1/groups/{name}/chunks/{i}/commit   {"member", "version"}: the chunk is done
         (TERMINATED); answers the group's full progress and the member's chunks now (its
         next one is given at once)

Both refuse a member that does not hold the chunk at that version (409 ``stale_assignment``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from drc.api import wire
from drc.api.deps import Deps, require_token
from drc.api.errors import ApiError
from drc.api.groups import full_view, parse_version, refusal, service
from drc.core.consumer_groups import GroupStateError
from drc.core.scn import SCN

router = APIRouter(dependencies=[Depends(require_token)])
PATH = wire.PATH_GROUPS


class ChunkCommitBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    member: str = Field(max_length=64)
    version: int


@router.get(PATH + "/{name}/chunks/{index}/rows")
def chunk_rows(name: str, index: int, member: str, version: str, deps: Deps) -> dict[str, Any]:
    groups = service(deps)
    held = parse_version(version)
    try:
        state = groups.get(name)
        chunk = state.check_chunk(member, index, held)
        if groups.full is None:
            raise GroupStateError(503, "this process cannot read the source's tables")
        found = groups.full.read(chunk, SCN.parse(state.spec.start))
        groups.update(name, lambda s: s.serve_chunk(member, index, held, found.read_at))
    except GroupStateError as exc:
        raise refusal(exc) from exc
    return {
        "chunk": index,
        "table": chunk.table,
        "version": held,
        "read_at": str(found.read_at),
        "columns": list(found.columns),
        "rows": [list(r) for r in found.rows],
    }


@router.post(PATH + "/{name}/chunks/{index}/commit")
def commit_chunk(name: str, index: int, body: ChunkCommitBody, deps: Deps) -> dict[str, Any]:
    try:
        state = service(deps).update(
            name, lambda s: s.commit_chunk(body.member, index, body.version)
        )
    except GroupStateError as exc:
        raise refusal(exc) from exc
    if index >= len(state.chunks):
        raise ApiError(404, f"no chunk {index}")
    return {
        "chunk": index,
        "state": state.chunks[index].state,
        "full": full_view(state),
        "chunks": state.full_assignment(body.member),  # its next chunk, at once
    }
