"""A large page's transactions decoded as read (drc.api.lazyrecords)."""

from __future__ import annotations

import pytest

from drc.api import lazyrecords, streamwire
from drc.api.lazyrecords import Head, LazyTransactions
from drc.core.codec import encode_transaction
from drc.core.errors import CorruptRecordError
from tests.support.apply_fakes import ins, scn, txn


def records(count: int) -> tuple[list, bytes]:  # type: ignore[type-arg]
    txns = [
        txn(20, *(ins("t", id=f * 10 + r, v="x" * r) for r in range(5)), fragment=f,
            last_fragment=f == count - 1)
        for f in range(count)
    ]  # fmt: skip
    return txns, b"".join(encode_transaction(t) for t in txns)


def test_lazy_transactions_decode_each_record_as_read_and_peek_heads_without_decoding() -> None:
    txns, data = records(4)
    lazy, ends = LazyTransactions.of(data)
    assert len(lazy) == 4 and list(lazy) == txns and lazy[2] == txns[2] and lazy[-1] == txns[-1]
    assert ends[-1] == len(data) and list(lazy[1:3]) == txns[1:3]
    assert lazyrecords.heads(lazy) == tuple(Head(scn(20), f, f == 3) for f in range(4))


def test_joined_pages_stay_lazy_and_index_across_frames() -> None:
    txns, data = records(3)
    lazy, _ = LazyTransactions.of(data)
    more = (txn(30, ins("t", id=99)),)
    joined = lazyrecords.join([lazy, more])
    assert isinstance(joined, lazyrecords.Joined)
    assert len(joined) == 4 and joined[3] == more[0] and joined[1] == txns[1]
    assert list(joined) == [*txns, *more]
    assert [h.scn for h in lazyrecords.heads(joined)] == [scn(20)] * 3 + [scn(30)]
    assert lazyrecords.join([more, more]) == more + more  # eager parts stay a tuple


def test_a_large_frame_is_parsed_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    txns, data = records(3)
    monkeypatch.setattr(streamwire, "LAZY_BYTES", len(data) - 1)
    frame = streamwire.FrameParser().feed(streamwire.batch_frame(scn(20), scn(20), 3, data))[0]
    assert isinstance(frame.transactions, LazyTransactions) and list(frame.transactions) == txns
    monkeypatch.setattr(streamwire, "LAZY_BYTES", len(data))
    frame = streamwire.FrameParser().feed(streamwire.batch_frame(scn(20), scn(20), 3, data))[0]
    assert frame.transactions == tuple(txns)


def test_a_damaged_record_is_refused_when_the_page_is_read() -> None:
    _, data = records(2)
    with pytest.raises(CorruptRecordError):
        LazyTransactions.of(data[:-3])  # truncated
    damaged = bytearray(data)
    damaged[-2] ^= 0xFF  # in the last row image: the head reads, the CRC does not match
    with pytest.raises(CorruptRecordError, match="CRC"):
        LazyTransactions.of(bytes(damaged))


def test_both_lazy_sequences_slice_and_take_negative_indexes_as_a_tuple_does() -> None:
    txns, data = records(4)
    lazy, _ = LazyTransactions.of(data)
    more = (txn(30, ins("t", id=99)),)
    for seq, expected in ((lazy, tuple(txns)), (lazyrecords.join([lazy, more]), (*txns, *more))):
        for cut in (slice(1, 3), slice(None, None, -2), slice(-2, None), slice(9, 12)):
            assert list(seq[cut]) == list(expected[cut])
        assert seq[-1] == expected[-1] and seq[-len(expected)] == expected[0]
        with pytest.raises(IndexError):
            seq[len(expected)]
        with pytest.raises(IndexError):  # never wrapped around twice
            seq[-len(expected) - 1]
