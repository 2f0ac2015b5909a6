"""Split pages on the subscriber's side: a large transaction in several batches, each asked
for at the place the last one ended (``after`` + ``within``), checked, and never saved as a
checkpoint in the middle (drc.client.subscriber, fetcher, stream)."""

from __future__ import annotations

import pytest

from drc.api.streamwire import Frame
from drc.client import MemoryCheckpointStore, Subscriber, http
from drc.client.errors import ProtocolError
from drc.client.fetcher import check_page
from drc.client.stream import FrameQueue
from drc.core.scn import SCN
from tests.support.fake_api import FakeApi, txn


def big(n: int, parts: int) -> list:  # type: ignore[type-arg]
    return [txn(n, rows=2, fragment=k, last=k == parts - 1) for k in range(parts)]


def subscriber(api: FakeApi, **kw: object) -> Subscriber:
    options: dict[str, object] = {"transport": api.transport, "prefetch": False, **kw}
    return Subscriber(["http://a"], **options)  # type: ignore[arg-type]


def test_a_large_transaction_comes_in_pages_each_asked_for_where_the_last_ended() -> None:
    txns = [txn(1), *big(2, 5), txn(3)]
    api = FakeApi(txns)
    store = MemoryCheckpointStore()
    with subscriber(api, split=True, checkpoint=store, max_events=1) as sub:
        batches = []
        for _ in range(4):
            batches.append(sub.get(timeout=5))
            sub.ack(batches[-1])
        fragments = [[(t.scn, t.fragment) for t in b.transactions] for b in batches]
    assert fragments == [
        [(txns[0].scn, 0)],
        [(txns[1].scn, 0), (txns[1].scn, 1)],
        [(txns[1].scn, 2), (txns[1].scn, 3)],
        [(txns[1].scn, 4)],  # the rest (not cut), alone: the fake answers it as a page
    ]
    assert [b.within for b in batches] == [0, 2, 4, 0]
    sent = [(s.params.get("split"), s.params.get("within")) for s in api.events_seen()]
    assert sent == [("1", None), ("1", None), ("1", "2"), ("1", "4")]
    # Saved only after whole transactions: a restart takes the large one from its start.
    assert store.saved == [txns[0].scn, txns[1].scn]


def test_the_json_form_carries_the_position_too() -> None:
    api = FakeApi(big(2, 3))
    with subscriber(api, split=True, binary=False) as sub:
        first = sub.get(timeout=5)
        sub.ack(first)
        assert (first.within, sub.position, sub.within) == (2, first.next, 2)
        rest = sub.get(timeout=5)
    assert [t.fragment for t in rest.transactions] == [2] and rest.within == 0


def test_without_split_nothing_is_cut_and_nothing_new_is_sent() -> None:
    api = FakeApi(big(2, 5))
    with subscriber(api) as sub:
        batch = sub.get(timeout=5)
    assert len(batch.transactions) == 5 and batch.within == 0
    assert "split" not in api.events_seen()[0].params


def test_a_server_that_does_not_know_split_is_read_whole() -> None:
    api = FakeApi([txn(1), *big(2, 5)])
    api.knows_split = False
    with subscriber(api, split=True, max_events=1) as sub:
        first = sub.get(timeout=5)
        sub.ack(first)
        second = sub.get(timeout=5)
    assert len(second.transactions) == 5 and second.within == 0
    assert [s.params.get("split") for s in api.events_seen()] == ["1", None, None]


def page(*txns: object, next_scn: SCN, within: int = 0) -> http.Page:
    return http.Page("e", next_scn, None, tuple(txns), within)  # type: ignore[arg-type]


def test_check_page_takes_a_continued_and_a_cut_page() -> None:
    parts = big(2, 5)
    at = parts[0].scn
    check_page(SCN.zero(), page(*parts[:2], next_scn=at, within=2), "u")
    check_page(at, page(*parts[2:4], next_scn=at, within=4), "u", within=2)
    check_page(at, page(parts[4], txn(3), next_scn=txn(3).scn), "u", within=4)
    check_page(at, page(next_scn=at, within=3), "u", within=2)  # all of it filtered out


@pytest.mark.parametrize(
    "case, problem",
    [
        ("cut without saying so", "ends inside transaction"),
        ("within past the last fragment", "past the end"),
        ("the position's transaction after another", "not after the requested position"),
        ("a continued page going back", "behind the page"),
    ],
)
def test_check_page_refuses_what_breaks_the_contract(case: str, problem: str) -> None:
    parts = big(2, 5)
    at = parts[0].scn
    broken = {
        "cut without saying so": (SCN.zero(), page(*parts[:2], next_scn=at), 0),
        "within past the last fragment": (at, page(parts[4], next_scn=at, within=5), 4),
        "the position's transaction after another": (
            at,
            page(txn(1), parts[3], next_scn=at, within=4),
            3,
        ),
        "a continued page going back": (at, page(next_scn=at, within=2), 3),
    }
    after, answer, within = broken[case]
    with pytest.raises(ProtocolError, match=problem):
        check_page(after, answer, "u", within)


def frame(*txns: object, within: int = 0) -> Frame:
    last = txns[-1]
    return Frame(last.scn, None, tuple(txns), 10, within=within)  # type: ignore[attr-defined]


def test_a_cut_stream_frame_is_a_page_of_its_own() -> None:
    queue = FrameQueue(1 << 20)
    parts = big(2, 5)
    for f in (frame(txn(1)), frame(*parts[:2], within=2), frame(*parts[2:], within=0)):
        queue.put(f)
    taken = [queue.take(100, 1 << 20, 0) for _ in range(3)]
    assert [[f.within for f in t] for t in taken] == [[0], [2], [0]]


def test_a_reader_that_is_behind_keeps_frames_as_bytes_until_taken() -> None:
    from drc.api import lazyrecords, streamwire
    from drc.core.codec import encode_transaction

    parts = big(2, 3)
    whole = streamwire.batch_frame(txn(1).scn, None, 1, encode_transaction(txn(1)))
    cut = streamwire.batch_frame(
        parts[0].scn, None, 2, b"".join(map(encode_transaction, parts[:2]))
    )
    behind = [False]
    parser = streamwire.FrameParser(lambda: behind[0])
    first = parser.feed(whole + cut[:7])  # a whole frame, and the start of the next
    behind[0] = True
    second = parser.feed(cut[7:])
    assert not hasattr(first[0].transactions, "heads")  # decoded at once: the reader keeps up
    lazy = second[0].transactions
    assert hasattr(lazy, "heads") and [t.fragment for t in lazy] == [0, 1]
    assert [h.fragment for h in lazyrecords.heads(lazy)] == [0, 1] and parser.pending == 0
