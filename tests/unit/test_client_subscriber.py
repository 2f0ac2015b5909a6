"""The Subscriber against the in-memory fake API: order, get/ack/rollback, iteration, prefetch."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drc.api import wire
from drc.client import (
    AckError,
    FileCheckpointStore,
    MemoryCheckpointStore,
    ProtocolError,
    Subscriber,
)
from drc.core.jsonwire import transaction_to_json
from drc.core.scn import SCN
from tests.support.fake_api import FakeApi, rich_stream, stream, txn

A = "http://a"


def subscriber(api: FakeApi, urls: tuple[str, ...] = (A,), **kwargs: Any) -> Subscriber:
    kwargs.setdefault("sleep", lambda s: None)
    return Subscriber(list(urls), transport=api.transport, **kwargs)


def drain(sub: Subscriber, last: SCN) -> list[Any]:
    """get/ack until the acked position reaches ``last``; returns every transaction."""
    got: list[Any] = []
    while sub.position < last:
        batch = sub.get(timeout=5)
        got.extend(batch.transactions)
        sub.ack(batch)
    return got


def eventually(check: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


@pytest.mark.parametrize("prefetch", [True, False])
def test_batches_deliver_the_whole_stream_in_scn_order(prefetch: bool) -> None:
    txns = stream(25)
    with subscriber(FakeApi(txns), max_events=4, prefetch=prefetch) as sub:
        assert drain(sub, txns[-1].scn) == txns


def test_get_without_ack_returns_the_same_batch_again() -> None:
    txns = stream(6)
    with subscriber(FakeApi(txns), max_events=2) as sub:
        first = sub.get()
        assert sub.get() is first and sub.pending is first
        sub.ack(first)
        second = sub.get()
        assert second.id == first.id + 1 and second.after == first.next
        assert second.transactions == tuple(txns[2:4])


def test_a_batch_is_acked_once_and_only_while_it_awaits_its_ack() -> None:
    with subscriber(FakeApi(stream(6)), max_events=2) as sub:
        first = sub.get()
        sub.ack(first)
        with pytest.raises(AckError, match="acked already"):
            sub.ack(first)
        second = sub.get()
        sub.rollback()
        with pytest.raises(AckError):
            sub.ack(second)
        assert sub.position == first.next


def test_rollback_redelivers_from_the_acked_position() -> None:
    txns = stream(6)
    with subscriber(FakeApi(txns), max_events=2) as sub:
        sub.ack(sub.get())
        second = sub.get()
        sub.rollback()
        again = sub.get()
        assert again.id != second.id and again.after == second.after
        assert again.transactions == second.transactions == tuple(txns[2:4])


def test_iterator_acks_a_batch_when_the_transaction_after_its_last_is_requested() -> None:
    txns = stream(6)
    store = MemoryCheckpointStore()
    with subscriber(FakeApi(txns), max_events=2, checkpoint=store) as sub:
        it = iter(sub)
        assert [next(it), next(it)] == txns[:2]
        assert store.saved == [] and sub.position == SCN.zero()
        assert next(it) == txns[2]
        assert store.saved == [txns[1].scn] and sub.position == txns[1].scn


def test_leaving_the_iterator_mid_batch_redelivers_that_batch() -> None:
    txns = stream(6)
    with subscriber(FakeApi(txns), max_events=3) as sub:
        assert list(itertools.islice(sub, 4)) == txns[:4]  # stops inside the second batch
        assert sub.position == txns[2].scn
        assert list(itertools.islice(sub.transactions(), 3)) == txns[3:6]


def test_empty_batches_still_move_the_position_past_filtered_changes() -> None:
    txns = stream(9, ("db.t", "db.u", "db.v"))
    store = MemoryCheckpointStore()
    with subscriber(FakeApi(txns), tables="db.v", max_events=1, checkpoint=store) as sub:
        got = drain(sub, txns[-1].scn)
    assert got == [t for t in txns if t.changes[0].table == "v"]
    assert store.load() == txns[-1].scn


def test_start_position_is_the_checkpoint_else_after_else_zero() -> None:
    txns = stream(6)
    api = FakeApi(txns)
    with subscriber(api, after=txns[1].scn) as sub:
        assert sub.get().transactions[0] == txns[2]
    with subscriber(api, after=txns[1].scn, checkpoint=MemoryCheckpointStore(txns[3].scn)) as sub:
        assert sub.get().transactions[0] == txns[4]
    with subscriber(api) as sub:
        assert sub.position == SCN.zero()


def test_checkpoint_is_saved_only_on_ack_and_a_new_subscriber_resumes_from_it(
    tmp_path: Path,
) -> None:
    txns = stream(9)
    api = FakeApi(txns)
    path = tmp_path / "sub.ckpt"
    with subscriber(api, max_events=3, checkpoint=FileCheckpointStore(path)) as sub:
        first = sub.get()
        assert not path.exists()
        sub.ack(first)
        sub.get()  # received, processed maybe, never acked: a crash here
    assert FileCheckpointStore(path).load() == txns[2].scn
    with subscriber(api, max_events=3, checkpoint=FileCheckpointStore(path)) as sub:
        assert sub.get().transactions == tuple(txns[3:6])


def test_a_failed_checkpoint_save_keeps_the_batch_awaiting_its_ack() -> None:
    class Broken(MemoryCheckpointStore):
        def save(self, scn: SCN) -> None:
            raise OSError("disk full")

    with subscriber(FakeApi(stream(4)), checkpoint=Broken()) as sub:
        batch = sub.get()
        with pytest.raises(OSError):
            sub.ack(batch)
        assert sub.pending is batch and sub.position == SCN.zero()


def test_prefetch_asks_for_the_next_batch_before_the_current_one_is_acked() -> None:
    txns = stream(6)
    api = FakeApi(txns)
    with subscriber(api, max_events=2) as sub:
        first = sub.get()
        eventually(lambda: any(s.params["after"] == str(first.next) for s in api.events_seen()))
        sub.ack(first)
        count = len(api.events_seen())
        second = sub.get()  # served from the prefetch: no new request for it
        assert second.transactions == tuple(txns[2:4])
        assert [s.params["after"] for s in api.events_seen()[:count]] == [
            str(SCN.zero()),
            str(first.next),
        ]


def test_without_prefetch_nothing_is_asked_before_the_next_get() -> None:
    api = FakeApi(stream(6))
    with subscriber(api, max_events=2, prefetch=False) as sub:
        sub.get()
        time.sleep(0.1)
        assert len(api.events_seen()) == 1


def test_rollback_discards_the_prefetched_batch() -> None:
    txns = stream(6)
    api = FakeApi(txns)
    with subscriber(api, max_events=2) as sub:
        first = sub.get()
        eventually(lambda: len(api.events_seen()) == 2)  # the prefetch of after=first.next
        sub.rollback()
        again = sub.get()
        assert again.after == SCN.zero() and again.transactions == first.transactions
        assert [s.params["after"] for s in api.events_seen()[:3]] == [
            str(SCN.zero()),
            str(first.next),
            str(SCN.zero()),
        ]


def test_a_slow_prefetch_overlaps_with_processing() -> None:
    txns = stream(8)
    api = FakeApi(txns)
    api.delay_s = 0.15
    with subscriber(api, max_events=2) as sub:
        sub.get(timeout=5)
        time.sleep(0.5)  # "processing" while the next batch is fetched
        started = time.monotonic()
        sub.ack(sub.pending)  # type: ignore[arg-type]
        sub.get(timeout=5)
        assert time.monotonic() - started < api.delay_s  # a fetch now would take longer


def test_fragments_of_one_transaction_arrive_together_and_in_order() -> None:
    big = [txn(3, rows=2, fragment=k, last=k == 2) for k in range(3)]
    txns = [txn(1), txn(2), *big, txn(4)]
    with subscriber(FakeApi(txns), max_events=1) as sub:
        batches = [sub.get()]
        while batches[-1].next < txns[-1].scn:
            sub.ack(batches[-1])
            batches.append(sub.get())
    assert [len(b) for b in batches] == [1, 1, 3, 1]
    assert [(t.fragment, t.last_fragment) for t in batches[2].transactions] == [
        (0, False),
        (1, False),
        (2, True),
    ]


@pytest.mark.parametrize("page", ["reordered", "split_fragment", "behind"])
def test_a_page_that_breaks_the_contract_is_refused(page: str) -> None:
    t1, t2 = txn(1), txn(2)
    bodies = {
        "reordered": ([t2, t1], t2.scn),
        "split_fragment": ([t1, txn(2, fragment=0, last=False)], t2.scn),
        "behind": ([t1, t2], t1.scn),
    }
    txns, next_scn = bodies[page]

    def serve(request: Any) -> Any:
        import httpx

        body = {
            "epoch": "e",
            "next": str(next_scn),
            "newest": None,
            "transactions": [transaction_to_json(t) for t in txns],
        }
        return httpx.Response(200, json=body)

    api = FakeApi([])
    api.fail("a", serve)
    with subscriber(api) as sub, pytest.raises(ProtocolError, match="breaks the contract"):
        sub.get(timeout=5)


def test_binary_and_json_answers_give_equal_transactions() -> None:
    txns = rich_stream()
    api = FakeApi(txns)
    with subscriber(api, binary=True) as binary, subscriber(api, binary=False) as text:
        got_binary = drain(binary, txns[-1].scn)
        got_json = drain(text, txns[-1].scn)
    assert got_binary == got_json == txns
    accepts = {s.accept for s in api.events_seen()}
    assert accepts == {wire.MEDIA_RECORDS, wire.MEDIA_JSON}


def test_filters_and_limits_are_sent_as_query_parameters() -> None:
    api = FakeApi(stream(3))
    with subscriber(
        api, tables="db.t,x.*", skip_drc=True, max_events=7, max_bytes=99, wait_ms=250
    ) as sub:
        sub.get()
    params = api.events_seen()[0].params
    assert params == {
        "after": "0:0:0:0",
        "tables": "db.t,x.*",
        "skip_drc": "1",
        "max_events": "7",
        "max_bytes": "99",
        "wait_ms": "250",
    }


def test_bad_arguments_fail_at_construction() -> None:
    api = FakeApi([])
    for kwargs in (
        {"tables": "nodot"},
        {"max_events": 0},
        {"wait_ms": -2},
        {"on_rebuild": "ignore"},
    ):
        with pytest.raises(ValueError):
            subscriber(api, **kwargs)
    with pytest.raises(ValueError, match="http"):
        Subscriber(["dc1:8640"])


def test_close_stops_the_prefetch_and_get_after_close_fails() -> None:
    api = FakeApi(stream(4))
    sub = subscriber(api, max_events=1)
    sub.get()
    sub.close()
    sub.close()
    with pytest.raises(RuntimeError, match="closed"):
        sub.get()


def test_rollback_during_iteration_redelivers_instead_of_acking() -> None:
    txns = stream(4)
    with Subscriber("http://a", transport=FakeApi(txns).transport, max_events=2) as sub:
        it = sub.transactions()
        assert [next(it), next(it)] == txns[:2]
        sub.rollback()
        assert [next(it), next(it)] == txns[:2]  # the rolled-back batch again, not acked
        assert sub.position == SCN.zero()
