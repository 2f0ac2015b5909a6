"""Channel control: ``/v1/channels`` (list, one, history) and the actions on a channel.

    GET  /v1/channels                          every channel of this process, with its state
    GET  /v1/channels/{name}                   one channel; a stopped one with its transaction
    GET  /v1/channels/{name}/history[?limit=N] its audit trail (drc.channel_audit), newest first
    POST /v1/channels/{name}/{action}          the actions the desk offers (drc.apply.actions):
    POST /v1/channels/{name}/pause             {"reason", "until": SCN?}
    POST /v1/channels/{name}/resume            {"reason"}
    POST /v1/channels/{name}/skip              {"reason", "scn": SCN}  (the stopped transaction)
    POST /v1/channels/{name}/rewind            {"reason", "scn": SCN} or {"reason", "time": T}

Reading needs a token like every /v1 path; acting needs an admin token (``[api] admin_tokens``)
when tokens are configured, and the audit row names that token's name, never the token. Which
actions there are, and what their bodies must hold, this module learns from
:class:`drc.api.deps.ChannelDesk` (the node's, which declares them in drc.apply.actions); the
desk carries them out and answers what it did, or raises
:class:`drc.core.control.ControlError` with the status to answer (a 400 for a body the action
will not do with).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from drc.api import wire
from drc.api.deps import ApiDeps, ChannelDesk, Deps, admin_caller, require_token
from drc.api.errors import ApiError
from drc.core.control import ControlError
from drc.core.errors import MalformedScnError, shown
from drc.core.scn import SCN

router = APIRouter(dependencies=[Depends(require_token)])
HISTORY_MAX = 1000


class ActionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=2000)
    scn: str | None = Field(None, max_length=120)
    until: str | None = Field(None, max_length=120)
    time: str | None = Field(None, max_length=64)


def desk_of(deps: ApiDeps) -> ChannelDesk:
    desk = deps.desk() if deps.desk is not None else None
    if desk is None:
        raise ApiError(404, "this process runs no apply channels (drc run --role replicator)")
    return desk


def _known(desk: ChannelDesk, name: str) -> None:
    names = [c["name"] for c in desk.channels()]
    if name not in names:
        raise ApiError(404, f"no channel {shown(name)} here; channels: {', '.join(names) or '-'}")


def _scn(text: str | None, what: str) -> SCN | None:
    if text is None:
        return None
    try:
        return SCN.parse(text)
    except MalformedScnError as exc:
        raise ApiError(400, f"{what}: {exc}") from exc


def _time(text: str | None) -> float | None:
    """A wall-clock time: ISO 8601 ("2026-11-23 14:00", UTC unless an offset is given)."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ApiError(400, f"time {shown(text)} is not ISO 8601, e.g. 2026-11-23 14:00") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@router.get("/v1/channels")
async def list_channels(deps: Deps) -> list[dict[str, Any]]:
    desk = desk_of(deps)
    return await anyio.to_thread.run_sync(desk.channels)


@router.get("/v1/channels/{name}")
async def get_channel(name: str, deps: Deps) -> dict[str, Any]:
    desk = desk_of(deps)
    _known(desk, name)
    return next(c for c in await anyio.to_thread.run_sync(desk.channels) if c["name"] == name)


@router.get("/v1/channels/{name}/history")
async def get_history(name: str, deps: Deps, limit: int = 100) -> list[dict[str, Any]]:
    desk = desk_of(deps)
    _known(desk, name)
    if not 1 <= limit <= HISTORY_MAX:
        raise ApiError(400, f"limit must be 1..{HISTORY_MAX}, got {limit}")
    return await anyio.to_thread.run_sync(desk.history, name, limit)


@router.post("/v1/channels/{name}/{action}")
async def act(
    name: str, action: str, body: ActionBody, request: Request, deps: Deps
) -> dict[str, Any]:
    actor = admin_caller(request)
    desk = desk_of(deps)
    offered = desk.actions()
    if action not in offered:
        raise ApiError(404, f"unknown action {shown(action)}; one of {', '.join(offered)}")
    _known(desk, name)
    scn, until, at = _scn(body.scn, "scn"), _scn(body.until, "until"), _time(body.time)
    try:
        return await anyio.to_thread.run_sync(
            lambda: desk.act(name, action, actor, body.reason, scn=scn, until=until, at=at)
        )
    except ControlError as exc:
        code = wire.ERROR_CHANNEL_STATE if exc.status == 409 else None
        raise ApiError(exc.status, str(exc), code=code) from exc
