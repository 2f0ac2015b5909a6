"""Long polls over a real EventBuffer (drc.api.pull): woken by commits, never by polling."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from drc.api.metrics import ApiMetrics
from drc.api.pull import EpochMismatch, pull
from drc.api.pullquery import Limits, PullQuery, Selection
from drc.core.errors import ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from tests.support.api import ORDERS, ins, scn, store, txn

Q = PullQuery(SCN.ZERO, Selection(), Limits(100, 1 << 20), -1, None)


def later(delay: float, fn, *args) -> threading.Thread:  # noqa: ANN001
    def run() -> None:
        time.sleep(delay)
        fn(*args)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def query(after: SCN = SCN.ZERO, wait_ms: int = -1, max_wait_ms: int = 10_000, **kw) -> PullQuery:  # noqa: ANN003
    longest = 0 if wait_ms == -1 else (max_wait_ms if wait_ms == 0 else min(wait_ms, max_wait_ms))
    return PullQuery(
        after,
        kw.get("selection", Selection()),
        kw.get("limits", Limits(100, 1 << 20)),
        wait_ms,
        kw.get("epoch"),
        longest,
    )


def timed(buffer: EventBuffer, q: PullQuery, **kw):  # noqa: ANN003, ANN201
    start = time.monotonic()
    batch = pull(buffer, q, **kw)
    return batch, time.monotonic() - start


def test_wait_minus_one_returns_what_is_there_at_once(buffer: EventBuffer) -> None:
    batch, took = timed(buffer, query())
    assert batch.items == [] and batch.next == SCN.ZERO and batch.newest is None and took < 0.1
    store(buffer, txn(1, ins("orders", 1)), txn(2, ins("orders", 2)))
    batch, took = timed(buffer, query())
    assert batch.transactions == 2 and batch.next == scn(2) == batch.newest and took < 0.1


def test_a_positive_wait_returns_as_soon_as_a_commit_arrives(buffer: EventBuffer) -> None:
    later(0.2, store, buffer, txn(1, ins("orders", 1)))
    batch, took = timed(buffer, query(wait_ms=10_000))
    assert batch.transactions == 1 and batch.next == scn(1)
    assert 0.15 < took < 1.0, "woken by the commit, long before the 10 s timeout"


def test_a_positive_wait_ignores_commits_the_filter_drops(buffer: EventBuffer) -> None:
    later(0.1, store, buffer, txn(1, ins("items", 1)))
    later(0.3, store, buffer, txn(2, ins("orders", 2)))
    batch, took = timed(buffer, query(wait_ms=10_000, selection=Selection(ORDERS)))
    assert [i.scn for i in batch.items] == [scn(2)] and batch.next == scn(2)
    assert 0.25 < took < 1.5


def test_a_positive_wait_times_out_with_an_empty_batch(buffer: EventBuffer) -> None:
    store(buffer, txn(1, ins("items", 1)))
    batch, took = timed(buffer, query(wait_ms=300, selection=Selection(ORDERS)))
    assert batch.items == [] and batch.next == scn(1), "next moves over the filtered stretch"
    assert 0.28 < took < 1.0


def test_wait_zero_waits_until_the_batch_is_full(buffer: EventBuffer) -> None:
    for n in (1, 2, 3):
        later(0.1 * n, store, buffer, txn(n, ins("orders", n)))
    batch, took = timed(buffer, query(wait_ms=0, limits=Limits(3, 1 << 20)))
    assert batch.transactions == 3 and batch.next == scn(3)
    assert 0.25 < took < 5.0, "returned when full, long before the 10 s cap"


def test_wait_zero_stops_at_the_servers_cap(buffer: EventBuffer) -> None:
    store(buffer, txn(1, ins("orders", 1)))
    batch, took = timed(buffer, query(wait_ms=0, max_wait_ms=300, limits=Limits(3, 1 << 20)))
    assert batch.transactions == 1 and 0.28 < took < 5.0, "the cap, not the 10 s default"


def test_a_stopping_server_ends_long_polls_promptly(buffer: EventBuffer) -> None:
    stop = threading.Event()
    later(0.1, stop.set)
    _, took = timed(buffer, query(wait_ms=10_000), stopped=stop.is_set)
    assert took < 5.0, "long before the 10 s wait ends"


def test_waiters_are_counted_while_they_wait(buffer: EventBuffer) -> None:
    metrics = ApiMetrics()
    seen: list[int] = []
    later(0.2, lambda: seen.append(metrics.waiters))
    later(0.3, store, buffer, txn(1, ins("orders", 1)))
    pull(buffer, query(wait_ms=5000), waiting=metrics.waiting)
    assert seen == [1] and metrics.waiters == 0


def test_the_scan_budget_bounds_a_pull_over_a_long_filtered_stretch(buffer: EventBuffer) -> None:
    store(buffer, *(txn(n, ins("items", n)) for n in range(1, 21)))
    q = query(wait_ms=10_000, selection=Selection(ORDERS))
    batch, took = timed(buffer, q, scan_records=5)
    assert batch.items == [] and scn(5) <= batch.next < scn(20) and took < 5.0


def test_an_old_scn_and_a_foreign_epoch_are_refused(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "b", base_scn=scn(10)) as buffer:
        store(buffer, txn(11, ins("orders", 1)))
        with pytest.raises(ScnTooOldError) as err:
            pull(buffer, query(after=scn(3)))
        assert err.value.oldest == scn(10)
        with pytest.raises(EpochMismatch) as mismatch:
            pull(buffer, query(after=scn(10), epoch="feedbeef"))
        assert mismatch.value.current == buffer.epoch
        assert pull(buffer, query(after=scn(10), epoch=buffer.epoch)).transactions == 1
