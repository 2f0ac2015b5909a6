"""assemble(): fragments of one SCN become one transaction; broken sequences are refused."""

from __future__ import annotations

import itertools

import pytest

from drc.client import FragmentError, MemoryCheckpointStore, Subscriber, assemble
from drc.core.scn import SCN
from tests.support.fake_api import FakeApi, txn


def big(n: int, parts: int, rows: int = 2) -> list:
    return [txn(n, rows=rows, fragment=k, last=k == parts - 1) for k in range(parts)]


def test_fragments_merge_in_order_and_whole_transactions_pass_through() -> None:
    fragments = big(2, 3)
    whole = list(assemble([txn(1), *fragments, txn(3)]))
    assert [t.scn for t in whole] == [txn(1).scn, fragments[0].scn, txn(3).scn]
    merged = whole[1]
    assert merged.changes == tuple(c for f in fragments for c in f.changes)
    assert (merged.fragment, merged.last_fragment) == (0, True)
    assert whole[0] is not None and whole[0] == txn(1)


def test_a_filtered_stream_may_skip_fragment_numbers() -> None:
    fragments = big(2, 4)
    merged = list(assemble([fragments[1], fragments[3]]))
    assert merged[0].changes == fragments[1].changes + fragments[3].changes


@pytest.mark.parametrize(
    "sequence, problem",
    [
        ([*big(2, 3)[:2], txn(3)], "without its last fragment"),
        ([big(2, 3)[1], big(2, 3)[0]], "arrived after fragment"),
        (big(2, 3)[:2], "stream ended inside"),
    ],
)
def test_broken_fragment_sequences_raise(sequence: list, problem: str) -> None:
    with pytest.raises(FragmentError, match=problem):
        list(assemble(sequence))


def test_memory_is_bounded_by_max_changes() -> None:
    with pytest.raises(FragmentError, match="more than 5 row changes"):
        list(assemble(big(2, 3, rows=2), max_changes=5))
    assert len(list(assemble(big(2, 3, rows=2), max_changes=6))[0].changes) == 6


def test_assembling_the_subscriber_keeps_ack_after_the_batch() -> None:
    txns = [txn(1), *big(2, 3), txn(3)]
    store = MemoryCheckpointStore()
    api = FakeApi(txns)
    with Subscriber(["http://a"], transport=api.transport, max_events=1, checkpoint=store) as sub:
        whole = list(itertools.islice(assemble(sub), 2))
        assert [len(t.changes) for t in whole] == [1, 6]
        assert store.saved == [txns[0].scn]  # the fragmented batch is not acked yet
        assert sub.position == txns[0].scn and sub.pending is not None
        assert sub.pending.transactions == tuple(txns[1:4])
    assert SCN.zero() < store.load()
