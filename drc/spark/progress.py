"""Progress lines while a Spark job runs: tasks done, elapsed, ETA (catch-up, snapshot,
verify)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

PROGRESS_EVERY_S = 5.0


@contextmanager
def every(seconds: float, tick: Callable[[], None], name: str) -> Iterator[None]:
    """``tick()`` every ``seconds`` in a thread of its own while the block runs."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(seconds):
            tick()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def progress(sc: Any, out: Callable[[str], None], what: str) -> Iterator[None]:
    """A line every PROGRESS_EVERY_S while a Spark job runs: tasks done, elapsed, ETA."""
    began = time.monotonic()
    tracker = sc.statusTracker()

    def report() -> None:
        finished, total = active_tasks(tracker)
        elapsed = time.monotonic() - began
        eta = f"{elapsed / finished * (total - finished):.0f}s" if finished else "unknown"
        out(f"{what}: {finished}/{total} tasks done, {elapsed:.0f}s, ETA {eta}")

    with every(PROGRESS_EVERY_S, report, "spark-progress"):
        yield


def active_tasks(tracker: Any) -> tuple[int, int]:
    """(finished, all) tasks of the stages running now, from a SparkContext's statusTracker()."""
    total = finished = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            total += info.numTasks
            finished += info.numCompletedTasks
    return finished, total
