"""Replicator.run: how capture reconnects after a retriable failure (sessions scripted, no
server; the waits recorded by a stand-in stop event)."""

from __future__ import annotations

import threading

import pytest

from drc.core.errors import SourceConfigError, SourceUnavailableError
from drc.replicator.replicator import CaptureOptions, Replicator
from drc.replicator.source import SourceSettings


class Stop(threading.Event):
    """A stop event whose waits return at once, recorded; set after ``waits`` of them."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.waits = waits
        self.waited: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.waited.append(timeout)
        if len(self.waited) >= self.waits:
            self.set()
        return self.is_set()


class Scripted(Replicator):
    """Sessions that end as scripted: an exception is raised, None ends without error."""

    def __init__(self, *outcomes: Exception | None, **options: float) -> None:
        super().__init__(
            SourceSettings("db", 3306, "u", "p"), None, None, CaptureOptions(**options)
        )
        self.outcomes = list(outcomes)

    def run_session(self, stop: threading.Event) -> None:
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome


def test_capture_reconnects_with_a_doubling_backoff_started_over_after_a_session() -> None:
    down = SourceUnavailableError("connection refused")
    replicator = Scripted(down, down, down, down, None, down, retry_initial_s=0.2, retry_max_s=1)
    stop = Stop(waits=5)
    replicator.run(stop)
    assert stop.waited == [0.2, 0.4, 0.8, 1, 0.2]
    assert replicator.stats.reconnects == 5
    assert replicator.stats.last_error == "connection refused"


def test_a_fatal_capture_error_ends_run() -> None:
    replicator = Scripted(SourceUnavailableError("down"), SourceConfigError("binlog_format"))
    with pytest.raises(SourceConfigError):
        replicator.run(Stop(waits=10))
    assert replicator.stats.reconnects == 1
