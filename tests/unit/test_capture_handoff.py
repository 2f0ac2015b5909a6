"""The reader's queue to capture (drc.replicator.replicator._Handoff) is bounded by the row
bytes it holds, not only by items: a huge transaction is never decoded far ahead of capture."""

from __future__ import annotations

import threading

from drc.replicator.replicator import _Handoff


def test_the_reader_waits_once_the_queue_holds_its_bytes_and_goes_on_when_drained() -> None:
    handoff = _Handoff(depth=100, max_bytes=10)
    stop = threading.Event()
    handoff.put("a", stop, 6)
    handoff.put("b", stop, 6)  # 12 bytes held: over the bound, the next put waits
    third = threading.Thread(target=handoff.put, args=("c", stop, 6))
    third.start()
    third.join(0.5)
    assert third.is_alive()  # waiting for room
    assert handoff.get(1) == "a" and handoff.get(1) == "b"  # drained below half: room again
    third.join(2)
    assert not third.is_alive() and handoff.get(1) == "c"


def test_items_without_row_bytes_are_bounded_by_count_as_before() -> None:
    handoff = _Handoff(depth=2, max_bytes=10)
    stop = threading.Event()
    handoff.put("a", stop)
    handoff.put("b", stop)
    blocked = threading.Thread(target=handoff.put, args=("c", stop))
    blocked.start()
    blocked.join(0.5)
    assert blocked.is_alive()
    stop.set()  # a stopping session never waits
    blocked.join(2)
    assert not blocked.is_alive()
    assert [handoff.get(1) for _ in range(3)] == ["a", "b", "c"]
