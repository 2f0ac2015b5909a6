"""Capture waits out a full EventBuffer filesystem, saying so, and continues by itself."""

from __future__ import annotations

import threading

import pytest

from drc.core.errors import BufferFullError
from drc.core.retry import Stopped
from drc.replicator import room
from drc.replicator.replicator import CaptureStats
from drc.replicator.room import RoomWait


class Waits(threading.Event):
    """A stop event whose waits return at once (counted), set after ``limit`` of them."""

    def __init__(self, limit: int | None = None) -> None:
        super().__init__()
        self.waited: list[float] = []
        self.limit = limit

    def wait(self, timeout: float | None = None) -> bool:
        self.waited.append(timeout or 0.0)
        if self.limit is not None and len(self.waited) >= self.limit:
            self.set()
        return self.is_set()


def test_a_full_buffer_is_waited_for_then_the_call_goes_through() -> None:
    stats = CaptureStats()
    calls = []
    refusals = 3

    def commit() -> str:
        calls.append(stats.last_error)
        if len(calls) <= refusals:
            raise BufferFullError("EventBuffer /b: no space left on its filesystem")
        return "committed"

    wait = RoomWait(stats)
    stop = Waits()
    wait.watch(stop)
    assert wait.call(commit) == "committed"
    assert stop.waited == [room.RETRY_S] * refusals
    assert stats.disk_full_waits == refusals
    assert calls[-1] is not None and "capture paused" in calls[-1], "status said why meanwhile"
    assert stats.last_error is None, "cleared once it went through"


def test_a_stop_ends_the_wait() -> None:
    stats = CaptureStats()

    def full() -> None:
        raise BufferFullError("no space left")

    wait = RoomWait(stats)
    wait.watch(Waits(limit=2))
    with pytest.raises(Stopped):
        wait.call(full)
    assert stats.disk_full_waits == 2
