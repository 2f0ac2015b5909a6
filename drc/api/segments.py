"""``GET /v1/segments`` and ``GET /v1/segments/{name}``: the buffer's segments as files, for
bulk catch-up executors that copy them instead of pulling batches.

Listing (JSON)::

    GET /v1/segments[?after=SCN][&to=SCN]
    {"epoch": "<buffer uuid>", "oldest_servable": "c:s:i:p", "last_scn": "c:s:i:p" | null,
     "segments": [{"name": "00000000000000000007.seg", "seq": 7, "prev_scn": ..., "first_scn":
                   ..., "last_scn": ..., "records": N, "size": BYTES, "sha256": "<hex>",
                   "sealed": true}, ...]}

``size`` and ``sha256`` cover what is served of the segment: the whole file once sealed, the
active segment up to its last committed record (drc.eventbuffer.export). With ``after`` only
the segments holding records after that SCN are listed (410 when retention deleted some of
them, like /v1/events), with ``to`` only those holding records up to it.

Download: ``GET /v1/segments/{name}`` sends the segment's bytes (``application/x-drc-segment``)
up to the size served *now*; a client sends ``Range: bytes=FIRST-LAST`` (drc.api.ranges) with
LAST = the listed size - 1 to get exactly the listed bytes, and resumes a broken download from
where it stopped (206, ``Content-Range``). 404 for a segment not committed yet, 410 for one
retention deleted. The checksum is the client's to verify (drc.client.segments).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse

from drc.api import accept, pullquery, wire
from drc.api.deps import ApiDeps, Deps, require_token
from drc.api.errors import ApiError
from drc.api.pullquery import BadQuery, single_values
from drc.api.ranges import Unsatisfiable, parse_range
from drc.core.errors import MalformedScnError, shown
from drc.core.scn import SCN
from drc.eventbuffer.export import Checksums, SegmentExtent, covering, servable_extents

router = APIRouter(dependencies=[Depends(require_token)])
SEND_CHUNK = 1 << 20
_NAME = re.compile(r"[0-9]{20}\.seg", re.ASCII)
_LIST_PARAMS = (pullquery.PARAM_AFTER, wire.PARAM_TO)


@router.get(wire.PATH_SEGMENTS)
async def list_segments(request: Request, deps: Deps) -> dict[str, Any]:
    after, to = _bounds(request)
    sums: Checksums = request.app.state.segment_sums
    return await anyio.to_thread.run_sync(listing, deps, sums, after, to, limiter=deps.limiter)


def _bounds(request: Request) -> tuple[SCN | None, SCN | None]:
    try:
        values = single_values(request.query_params.multi_items(), _LIST_PARAMS)
        after, to = (_scn(values, name) for name in _LIST_PARAMS)
    except BadQuery as exc:
        raise ApiError(400, str(exc)) from exc
    if after is not None and to is not None and to < after:
        raise ApiError(400, f"to ({to}) is before after ({after})")
    return after, to


def _scn(values: dict[str, str], name: str) -> SCN | None:
    text = values.get(name)
    try:
        return None if text is None else SCN.parse(text)
    except MalformedScnError as exc:
        raise BadQuery(f"{name}: {exc}") from exc


def listing(deps: ApiDeps, sums: Checksums, after: SCN | None, to: SCN | None) -> dict[str, Any]:
    view = deps.buffer.view()
    if after is not None and after < view.oldest_servable:
        raise ApiError(
            410,
            f"SCN {after} is older than this buffer holds; its segments serve records after "
            f"{view.oldest_servable}: catch up from a snapshot instead",
            oldest=str(view.oldest_servable),
        )
    extents = servable_extents(view)
    sums.keep_only(view.epoch, (ext.seq for ext in extents))
    if after is not None or to is not None:
        extents = covering(extents, after or SCN.ZERO, to)
    segments = []
    for ext in extents:
        try:
            segments.append(_describe(ext, sums.digest(view.epoch, ext)))
        except FileNotFoundError:
            continue  # deleted by retention since the view was taken: no longer served
    return {
        "epoch": view.epoch,
        "oldest_servable": str(view.oldest_servable),
        "last_scn": None if view.last_scn is None else str(view.last_scn),
        "segments": segments,
    }


def _describe(ext: SegmentExtent, sha256: str) -> dict[str, Any]:
    return {
        "name": ext.name,
        "seq": ext.seq,
        "prev_scn": str(ext.prev_scn),
        "first_scn": None if ext.first_scn is None else str(ext.first_scn),
        "last_scn": None if ext.last_scn is None else str(ext.last_scn),
        "records": ext.records,
        "size": ext.size,
        "sha256": sha256,
        "sealed": ext.sealed,
    }


@router.get(wire.PATH_SEGMENTS + "/{name}")
async def get_segment(name: str, request: Request, deps: Deps) -> Response:
    if not _NAME.fullmatch(name):
        raise ApiError(400, f"{shown(name, 40)} is not a segment name (20 digits + .seg)")
    if accept.choose(request.headers.get("accept"), (wire.MEDIA_SEGMENT,)) is None:
        raise ApiError(406, f"segments are served as {wire.MEDIA_SEGMENT} only")
    view = await anyio.to_thread.run_sync(deps.buffer.view, limiter=deps.limiter)
    extent = next((ext for ext in servable_extents(view) if ext.name == name), None)
    seq = int(name[:20])
    if extent is None:
        raise _missing(seq, view)
    try:
        span = parse_range(request.headers.get("range"), extent.size)
    except Unsatisfiable as exc:
        raise ApiError(
            416, f"{exc}: segment {name} serves {extent.size} bytes now",
            headers={"Content-Range": f"bytes */{extent.size}"},
        ) from exc  # fmt: skip
    try:
        fd = os.open(extent.path, os.O_RDONLY)  # kept open: retention may unlink the name
    except FileNotFoundError:
        raise _missing(seq, deps.buffer.view()) from None
    start, end = span or (0, extent.size)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(end - start),
        wire.HEADER_EPOCH: view.epoch,
    }
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{extent.size}"
    return StreamingResponse(
        _chunks(fd, start, end),
        status_code=206 if span is not None else 200,
        media_type=wire.MEDIA_SEGMENT,
        headers=headers,
    )


def _missing(seq: int, view: Any) -> ApiError:
    if view.segments and seq < view.segments[0].seq:
        return ApiError(
            410,
            f"segment {seq} was deleted by retention; the oldest is {view.segments[0].seq}",
            oldest=str(view.oldest_servable),
        )
    return ApiError(404, f"no committed segment {seq} here; see {wire.PATH_SEGMENTS}")


def _chunks(fd: int, start: int, end: int) -> Iterator[bytes]:
    """The file's bytes ``start..end``, read as they are sent (Starlette runs this in a
    worker thread)."""
    try:
        offset = start
        while offset < end:
            chunk = os.pread(fd, min(SEND_CHUNK, end - offset), offset)
            if not chunk:
                return  # cannot happen for committed bytes; the client's checksum catches it
            offset += len(chunk)
            yield chunk
    finally:
        os.close(fd)
