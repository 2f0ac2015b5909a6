"""Waiting for the buffer's next commit without holding a thread per waiter.

A long poll awaits :meth:`CommitSignal.wait` on the event loop; one watcher thread per buffer
blocks in :meth:`EventBuffer.wait_for_commit` (woken by the writer's commit, or polling a
read-only buffer) and wakes every awaiting long poll at once. So hundreds of long polls cost
no worker threads, and a pull that does not wait always finds one.

A buffer written in this process tells the signal of each commit (``EventBuffer.on_commit``),
in the writer's thread, which wakes the waiting long polls directly; only a read-only buffer
(written by another process) needs the watcher below.

No wake-up is lost: a waiter takes the loop's current event *before* it compares the buffer's
newest SCN with its position, and the watcher reads the newest SCN it has seen *before* it
schedules the wake, so a commit is either seen by the comparison or sets the event taken.
The watcher runs only while someone waits, or waited less than :data:`LINGER_S` ago (so a
subscriber that pulls again right after each answer does not start a thread per pull), and the
server is not stopping; it wakes the loop only when someone waits. Asyncio only: uvicorn and
Starlette's TestClient both run it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from drc.core.errors import DrcError
from drc.core.scn import SCN

log = logging.getLogger("drc.api")

WATCH_SLICE_S = 0.5  # the watcher checks for "no more waiters" and the stop event this often
# A watcher with no waiter left stays this long for the next one: a subscriber keeping up pulls
# again right after each answer, and starting a thread per long poll cost more than the pull.
LINGER_S = 2.0


class CommitBuffer(Protocol):
    @property
    def last_scn(self) -> SCN | None: ...

    def wait_for_commit(self, after: SCN, timeout_s: float) -> bool: ...


class CommitSignal:
    def __init__(self, buffer: CommitBuffer, stop: threading.Event) -> None:
        self._buffer = buffer
        self._stop = stop
        self._lock = threading.Lock()  # guards the fields below; the watcher reads them too
        self._waiters = 0
        self._watcher: threading.Thread | None = None
        self._seen = SCN.ZERO
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        # The writer in this process tells of each commit itself: no watcher thread, and one
        # thread hand-off less between a commit and the long polls it answers.
        on_commit: Callable[[Callable[[], None]], bool] | None = getattr(buffer, "on_commit", None)
        self._told = on_commit is not None and on_commit(self._committed)

    def _committed(self) -> None:
        """In the writer's thread, its records visible: wake the waiters, if any. A waiter
        counted after this check compares the newest SCN after the commit: it sees it."""
        with self._lock:
            waiting = self._waiters > 0
        if waiting:
            self._wake()

    async def wait(self, after: SCN, timeout_s: float) -> bool:
        """Await a committed record with SCN > ``after``, at most ``timeout_s``; True if one
        is there. Raises what ``buffer.last_scn`` raises (a closed buffer)."""
        self._enter(after)
        try:
            async with asyncio.timeout(max(timeout_s, 0)):
                while True:
                    event = self._current_event()
                    if self._newer(after):
                        return True
                    await event.wait()
        except TimeoutError:
            return self._newer(after)
        finally:
            self._leave()

    @property
    def waiters(self) -> int:
        return self._waiters

    def _newer(self, after: SCN) -> bool:
        last = self._buffer.last_scn
        return last is not None and last > after

    def _current_event(self) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._loop is not loop or self._event is None:  # a new loop (TestClient)
                self._loop, self._event = loop, asyncio.Event()
            return self._event

    def _enter(self, after: SCN) -> None:
        with self._lock:
            self._waiters += 1
            if self._watcher is None and not self._told:
                self._seen = after  # the watcher wakes at once if there is more already
                self._watcher = threading.Thread(
                    target=self._watch, name="drc-api-commits", daemon=True
                )
                self._watcher.start()

    def _leave(self) -> None:
        with self._lock:
            self._waiters -= 1

    def _watch(self) -> None:
        try:
            self._watch_commits()
        except Exception:  # never leave waiters with a dead watcher nobody restarts
            log.exception("the API's commit watcher failed; long polls fall back to timeouts")
            with self._lock:
                self._watcher = None

    def _watch_commits(self) -> None:
        seen = self._seen
        idle_since: float | None = None
        while True:
            with self._lock:
                if self._waiters:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                if self._stop.is_set() or (
                    idle_since is not None and time.monotonic() - idle_since >= LINGER_S
                ):
                    self._watcher = None
                    return
            try:
                committed = self._buffer.wait_for_commit(seen, WATCH_SLICE_S)
                newest = self._buffer.last_scn
            except DrcError:  # closed: wake the waiters, whose own check reports it
                self._wake()
                self._stop.wait(WATCH_SLICE_S)
                continue
            if committed and newest is not None:
                seen = newest  # before the wake: a later commit makes the next wait return
                # A waiter that entered after this check compares after the commit: sees it.
                with self._lock:
                    waiting = self._waiters > 0
                if waiting:
                    self._wake()

    def _wake(self) -> None:
        with self._lock:
            loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._set)
        except RuntimeError:  # that loop is closed (a TestClient that finished)
            pass

    def _set(self) -> None:
        with self._lock:
            event, self._event = self._event, asyncio.Event()
        if event is not None:
            event.set()
