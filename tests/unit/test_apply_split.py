"""A channel reading split pages (a large transaction over several batches, each ending inside
it: ``within``): nothing of it commits, and the checkpoint does not move, before its last
fragment, however long the group waited; stopped inside it, none of it lands."""

from __future__ import annotations

from typing import Any

import pytest

from drc.apply import group as group_module
from drc.core.scn import SCN
from tests.support.apply_fakes import Harness, batch, ins, scn, target, txn


def fragments(position: int, count: int) -> list[Any]:
    return [
        txn(position, ins("t", id=100 * f), fragment=f, last_fragment=f == count - 1)
        for f in range(count)
    ]


def split_batches() -> list[Any]:
    """txn 10 whole, then txn 20's six fragments over three batches."""
    big = fragments(20, 6)
    return [
        batch(1, txn(10, ins("t", id=1)), *big[:2], next_scn=scn(20), within=2, newest=scn(20)),
        batch(2, *big[2:4], next_scn=scn(20), within=4, newest=scn(20)),
        batch(3, *big[4:], newest=scn(20)),
    ]


def slow_clock(harness: Harness) -> Harness:
    """Ten seconds pass at every get: every open group is long past its delay."""
    get = harness.subscriber.get

    def later(timeout: float | None = None) -> Any:
        harness.now += 10
        return get(timeout)

    harness.subscriber.get = later  # type: ignore[method-assign]
    return harness


def test_a_split_transaction_commits_once_whole_however_long_its_pages_take() -> None:
    fake = target()
    channel = slow_clock(Harness(fake, split_batches())).run()
    # One target transaction for both: the group could not close inside the large one.
    assert [m[1] for m in fake.marks()] == ["1:11:1:20"]
    assert len(fake.committed) == 1 and channel.stats.rows == 7


def test_written_in_pieces_across_pages_still_one_target_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(group_module, "STREAM_PIECE_ROWS", 2)
    fake = target()
    slow_clock(Harness(fake, split_batches())).run()
    # The transaction before it on its own, then the large one in ONE transaction of pieces.
    assert [m[1] for m in fake.marks()] == ["1:11:1:10", "1:11:1:20"]
    assert len(fake.committed[1]) == 4  # three pieces and the checkpoint


@pytest.mark.parametrize("pieces", [2, 1000])
def test_stopped_inside_a_split_transaction_none_of_it_lands(
    monkeypatch: pytest.MonkeyPatch, pieces: int
) -> None:
    monkeypatch.setattr(group_module, "STREAM_PIECE_ROWS", pieces)
    fake = target()
    channel = Harness(fake, split_batches()[:2]).run()  # then the remote goes quiet: stop
    assert [m[1] for m in fake.marks()] == ["1:11:1:10"]  # the whole one before it only
    assert all("(0)" not in s and "(100)" not in s for s in fake.writes())
    assert channel.applied == scn(10)
    if pieces == 2:  # its first pieces were written in an open transaction: rolled back
        assert fake.rollbacks >= 1


@pytest.mark.parametrize("pieces", [2, 1000])
def test_a_place_inside_the_remote_does_not_hold_takes_the_transaction_again(
    monkeypatch: pytest.MonkeyPatch, pieces: int
) -> None:
    """A member that stores the transaction in other fragments answers 400 for the place
    inside it: the channel rolls back what it wrote of it and subscribes again after its
    checkpoint, then applies it once, whole."""
    monkeypatch.setattr(group_module, "STREAM_PIECE_ROWS", pieces)
    from drc.client.errors import ApiRequestError

    fake = target()
    first = split_batches()[0]
    # Large, txn 10 committed on its own before the first piece; else it waited in the group.
    again = () if pieces == 2 else (txn(10, ins("t", id=1)),)
    whole = batch(4, *again, *fragments(20, 6), newest=scn(20))
    harness = Harness(fake, [first, whole])
    get = harness.subscriber.get
    calls = [0]

    def lost_once(timeout: float | None = None) -> Any:
        calls[0] += 1
        if calls[0] == 2:  # the page after the first: the place is not the remote's
            raise ApiRequestError("x", "http://x", 400, "bad_request", "within: no such place")
        return get(timeout)

    harness.subscriber.get = lost_once  # type: ignore[method-assign]
    channel = harness.run()
    checkpoint = scn(10) if pieces == 2 else SCN.zero()
    assert harness.started_after == checkpoint  # subscribed again after its checkpoint
    marks = ["1:11:1:10", "1:11:1:20"] if pieces == 2 else ["1:11:1:20"]
    assert [m[1] for m in fake.marks()] == marks
    assert channel.stats.rows == 7  # every row of it once, none twice
    if pieces == 2:
        assert fake.rollbacks >= 1  # its first pieces, written before the 400
