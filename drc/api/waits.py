"""Read your writes across datacenters: ``GET /v1/wait``.

    GET /v1/wait?gtid=G[,G2...][&timeout_ms=T][&channel=NAME]

A client wrote on another datacenter and read its GTID there (``SELECT @@last_gtid``); this
answers 200 as soon as this process's apply channels have passed it (committed it, or moved
past it with nothing to write: drc.apply.gtids), else 408 after ``timeout_ms`` (default
:data:`DEFAULT_TIMEOUT_MS`, at most ``[api] max_wait_ms``) with ``waiting_for`` saying where
the channel is. Several comma-separated GTIDs (a ``gtid_binlog_pos``) wait for all. 400: a
malformed GTID or timeout, or several channels receive the domain (name one with ``channel``);
404: no channel here receives that domain, or this process runs no channels.

200 body::

    {"applied": true, "waited_ms": 12,
     "gtids": [{"gtid": "1-1-42", "channel": "from-dc1", "position": "1-1-45",
                "applied_at": 1795000000.25}]}

``position`` is the channel's position in that domain now, ``applied_at`` the Unix time of
the commit that passed the GTID (null: before what the channel remembers, e.g. before a
restart). A waiting request holds no thread: it awaits :class:`AppliedSignal`, which the
channels' threads set after each commit, and takes a long-poll slot (drc.api.longpolls), so
the same limits bound it as pulls.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request

from drc.api import wire
from drc.api.control import desk_of
from drc.api.deps import ChannelDesk, Deps, require_token
from drc.api.errors import ApiError
from drc.core.control import ControlError
from drc.core.errors import DrcError, shown
from drc.core.gtid import Gtid, parse_gtids

router = APIRouter(dependencies=[Depends(require_token)])
DEFAULT_TIMEOUT_MS = 10_000
MAX_GTIDS = 64  # one per domain is a full position; more is a mistake
MAX_TEXT = 2000


class AppliedSignal:
    """Wakes every awaiting wait when a channel commits. No wake-up is lost: a waiter takes the
    current event *before* it checks, and a commit replaces the event only after it moved the
    channel's position, so a commit is either seen by the check or sets the event taken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._desk: object | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._waiters = 0

    def attach(self, desk: ChannelDesk) -> None:
        """Listen to ``desk``'s channels (once per desk; the node builds one)."""
        with self._lock:
            if self._desk is desk:
                return
            self._desk = desk
        desk.on_applied(self.notify)

    def notify(self) -> None:
        """In a channel's thread, after a commit: wake the waiters, if any."""
        with self._lock:
            loop = self._loop if self._waiters else None
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._set)
        except RuntimeError:  # that loop is closed (a TestClient that finished)
            pass

    async def until(self, check: Callable[[], dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        """``check()`` again after every commit until it says applied, at most ``timeout_s``."""
        with self._lock:
            self._waiters += 1
        try:
            async with asyncio.timeout(max(timeout_s, 0)):
                while True:
                    event = self._current_event()
                    answer = check()
                    if answer["applied"]:
                        return answer
                    await event.wait()
        except TimeoutError:
            return check()
        finally:
            with self._lock:
                self._waiters -= 1

    def _current_event(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is not loop or self._event is None:  # a new loop (TestClient)
                self._loop, self._event = loop, asyncio.Event()
            return self._event

    def _set(self) -> None:
        with self._lock:
            event, self._event = self._event, asyncio.Event()
        if event is not None:
            event.set()


@router.get("/v1/wait")
async def wait(
    request: Request, deps: Deps, gtid: str = "", timeout_ms: str = "", channel: str | None = None
) -> dict[str, Any]:
    desk = desk_of(deps)
    gtids = _gtids(gtid)
    timeout = _timeout_ms(timeout_ms, deps.limits.max_wait_ms)
    started = time.monotonic()

    def check() -> dict[str, Any]:
        try:
            return desk.gtids_applied(gtids, channel)
        except ControlError as exc:
            raise ApiError(exc.status, str(exc)) from exc

    answer = check()
    if not answer["applied"] and timeout > 0:
        signal: AppliedSignal = request.app.state.applied
        signal.attach(desk)
        with deps.long_polls.slot(request.state.caller):
            answer = await signal.until(check, timeout / 1000)
    if not answer["applied"]:
        raise ApiError(
            408,
            f"GTID {gtid.strip()} not applied here within {timeout} ms: "
            f"{answer['waiting_for']}; ask again to wait longer",
            code=wire.ERROR_WAIT_TIMEOUT,
            waiting_for=answer["waiting_for"],
        )
    return {**answer, "waited_ms": round((time.monotonic() - started) * 1000)}


def _gtids(text: str) -> tuple[Gtid, ...]:
    if not text.strip():
        raise ApiError(400, "gtid is required: the GTID to wait for (SELECT @@last_gtid)")
    if len(text) > MAX_TEXT:
        raise ApiError(400, f"gtid is longer than {MAX_TEXT} characters")
    try:
        gtids = parse_gtids(text)
    except DrcError as exc:
        raise ApiError(400, f"gtid: {exc}") from exc
    if len(gtids) > MAX_GTIDS:
        raise ApiError(400, f"gtid holds {len(gtids)} GTIDs; at most {MAX_GTIDS}")
    return gtids


def _timeout_ms(text: str, most: int) -> int:
    if not text.strip():
        return min(DEFAULT_TIMEOUT_MS, most)
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= most:
        raise ApiError(400, f"timeout_ms must be 0..{most} ([api] max_wait_ms), got {shown(text)}")
    return value
