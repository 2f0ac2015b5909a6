"""Split pages on the server (drc.api.batching, pull, pullquery): a batch ends inside a
transaction too big for max_bytes, at a position (next, within) the next pull continues from."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.api import pull as pull_module
from drc.api import wire
from drc.api.batching import BatchBuilder
from drc.api.pull import BackToSource, Batch, batch_headers, pull, render_json
from drc.api.pullquery import BadQuery, Limits, PullQuery, Selection, ServerLimits, parse_pull_query
from drc.core.codec import decode_transaction, encode_transaction
from drc.core.errors import ScnTooOldError
from drc.core.events import Op, RowChange, Transaction
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.reader import SOURCE_SEGMENT, PositionError, Record
from tests.support.api import ORDERS, ins, scn, store, txn

EVERYTHING = Selection()
NOBODY = TableFilter.parse_list("nobody.*")
FRAGMENTS = 6


def wide(table: str, row_id: int) -> RowChange:
    return RowChange("shop", table, Op.INSERT, None, {"id": row_id, "note": "x" * 1000})


def big(n: int, tables: Sequence[str] = ("orders",) * FRAGMENTS, drc: bool = False) -> list:
    """Transaction ``n`` in one fragment per table named, each a ~1 KB row of that table."""
    last = len(tables) - 1
    return [
        dataclasses.replace(txn(n, wide(table, i), drc=drc), fragment=i, last_fragment=i == last)
        for i, table in enumerate(tables)
    ]


def records(*txns: Transaction, segment: int = 0) -> list[Record]:
    return [Record(t.scn, encode_transaction(t), 0, not t.last_fragment, segment, 0) for t in txns]


def sent(builder: BatchBuilder) -> list[Transaction]:
    return [decode_transaction(item.record())[0] for item in builder.items]


def builder(
    max_bytes: int = 1 << 20,
    max_events: int = 100,
    after: SCN = SCN.ZERO,
    within: int = 0,
    selection: Selection = EVERYTHING,
    split: bool = True,
) -> BatchBuilder:
    return BatchBuilder(selection, Limits(max_events, max_bytes), after, within, split)


FRAGMENT_BYTES = len(records(*big(2))[0].payload)


# -- which batches end inside a transaction ------------------------------------------------------


def test_without_split_the_first_transaction_is_sent_whole() -> None:
    b = builder(max_bytes=1, split=False)
    b.add(records(*big(2), txn(3, ins("orders", 3))))
    assert len(b.items) == FRAGMENTS and (b.next, b.within) == (scn(2), 0)


@pytest.mark.parametrize("selection", [Selection(), Selection(ORDERS)])
def test_split_cuts_the_first_transaction_after_the_records_that_fit(
    selection: Selection,
) -> None:
    b = builder(max_bytes=int(FRAGMENT_BYTES * 2.5), selection=selection)
    b.add(records(*big(2), txn(3, ins("orders", 3))))
    assert sent(b) == big(2)[:2]
    assert (b.next, b.within, b.transactions, b.full) == (scn(2), 2, 1, True)


def test_at_least_one_record_however_small_max_bytes() -> None:
    b = builder(max_bytes=1)
    b.add(records(*big(2)))
    assert sent(b) == big(2)[:1] and (b.next, b.within) == (scn(2), 1)


def test_a_continued_transaction_starts_at_its_record_within() -> None:
    b = builder(after=scn(2), within=2)
    b.add(records(*big(2)[2:], txn(3, ins("orders", 3))))
    assert sent(b) == [*big(2)[2:], txn(3, ins("orders", 3))]
    assert (b.next, b.within, b.transactions) == (scn(3), 0, 2)


def test_records_that_do_not_continue_the_position_are_refused() -> None:
    with pytest.raises(ValueError, match="do not continue"):
        builder(after=scn(2), within=2).add(records(txn(3, ins("orders", 3))))
    with pytest.raises(ValueError, match="needs split"):
        builder(after=scn(2), within=2, split=False)


def test_a_later_transaction_that_does_not_fit_waits_as_today() -> None:
    b = builder(max_bytes=FRAGMENT_BYTES * 3)
    b.add(records(txn(1, ins("orders", 1)), *big(2)))
    assert sent(b) == [txn(1, ins("orders", 1))]
    assert (b.next, b.within, b.full) == (scn(1), 0, True)


def test_a_later_transaction_a_read_cut_waits_too() -> None:
    b = builder()
    b.add(records(txn(1, ins("orders", 1)), *big(2)[:3]))  # the read ended inside scn(2)
    assert sent(b) == [txn(1, ins("orders", 1))] and (b.next, b.within) == (scn(1), 0)


def test_max_events_counts_a_cut_transaction_as_one() -> None:
    b = builder(max_events=2)
    b.add(records(*big(2)[:3]))  # a read cut it
    assert (b.transactions, b.within, b.full) == (1, 3, False)
    b.add(records(*big(2)[3:], txn(3, ins("orders", 3)), txn(4, ins("orders", 4))))
    assert sent(b) == [*big(2), txn(3, ins("orders", 3))]
    assert (b.transactions, b.next, b.within) == (2, scn(3), 0)
    one = builder(max_events=1)
    one.add(records(*big(2)[:3]))
    assert not one.full  # more of the same transaction still fits
    one.add(records(*big(2)[3:], txn(3, ins("orders", 3))))
    assert sent(one) == big(2) and one.full


def test_a_batch_holding_part_of_a_transaction_stops_where_the_next_record_does_not_fit() -> None:
    b = builder(max_bytes=int(FRAGMENT_BYTES * 3.5), max_events=1)
    b.add(records(*big(2)[:3]))
    assert not b.full and b.room()[0] == 1  # a read for its rest, with max_events taken
    b.add(records(*big(2)[3:]))
    assert sent(b) == big(2)[:3] and (b.within, b.full) == (3, True)


def test_records_from_the_source_are_never_cut() -> None:
    b = builder(max_bytes=1)
    b.add(records(*big(2), segment=SOURCE_SEGMENT))
    assert sent(b) == big(2) and b.within == 0


# -- filters ------------------------------------------------------------------------------------


def test_a_filtered_out_large_transaction_moves_the_position_across_reads() -> None:
    b = builder(selection=Selection(NOBODY))
    stored = records(*big(2), txn(3, ins("orders", 3)))
    b.add(stored[:2])
    assert (b.items, b.next, b.within, b.transactions) == ([], scn(2), 2, 0)
    b.add(stored[2:5])
    assert (b.items, b.next, b.within) == ([], scn(2), 5)
    b.add(stored[5:])
    assert (b.items, b.next, b.within, b.full) == ([], scn(3), 0, False)


def test_each_piece_is_filtered_and_the_cut_counts_what_was_filtered_out() -> None:
    tables = ("items", "orders", "items", "items", "orders", "items")
    b = builder(max_bytes=FRAGMENT_BYTES, selection=Selection(ORDERS))
    b.add(records(*big(2, tables)))
    assert [t.fragment for t in sent(b)] == [1]
    # 0 to 3 examined (2 and 3 filtered out): the next kept one, 4, did not fit
    assert (b.next, b.within, b.full) == (scn(2), 4, True)


def test_a_continued_transaction_always_has_its_last_fragment_sent() -> None:
    tables = ("orders", "orders", "items", "items")
    whole = builder(selection=Selection(ORDERS))
    whole.add(records(*big(2, ("items",) * 4)))
    assert whole.items == []  # a whole one with nothing kept: nothing, as today
    continued = builder(after=scn(2), within=2, selection=Selection(ORDERS))
    continued.add(records(*big(2, tables)[2:]))
    (last,) = sent(continued)
    assert (last.fragment, last.last_fragment, last.changes) == (3, True, ())


def test_the_last_fragment_follows_a_piece_kept_earlier_in_the_same_batch() -> None:
    tables = ("orders", "items", "items")
    b = builder(selection=Selection(ORDERS))
    b.add(records(*big(2, tables)[:2]))
    b.add(records(*big(2, tables)[2:]))
    assert [(t.fragment, len(t.changes)) for t in sent(b)] == [(0, 1), (2, 0)]


def test_a_transaction_dropped_whole_drops_every_piece() -> None:
    b = builder(after=scn(2), within=2, selection=Selection(skip_drc=True))
    b.add(records(*big(2, drc=True)[2:], txn(3, ins("orders", 3))))
    assert sent(b) == [txn(3, ins("orders", 3))]


# -- the pull over a real buffer ----------------------------------------------------------------


@pytest.fixture
def stored(buffer: EventBuffer) -> list[Transaction]:
    stream = [
        txn(1, ins("orders", 1)),
        *big(2, ("orders", "items") * 4),
        txn(3, ins("items", 3)),
        *big(4, ("items",) * 5),
        txn(5, ins("orders", 5)),
    ]
    store(buffer, *stream)
    return stream


def pulls(buffer: EventBuffer, selection: Selection, max_bytes: int) -> list[Batch]:
    out: list[Batch] = []
    after, within = SCN.ZERO, 0
    while after != buffer.last_scn or within:
        query = PullQuery(after, selection, Limits(3, max_bytes), -1, None, split=True)
        batch = pull(buffer, dataclasses.replace(query, within=within), scan_records=4)
        out.append(batch)
        after, within = batch.next, batch.within
    return out


@pytest.mark.parametrize("max_bytes", [1, FRAGMENT_BYTES * 2, FRAGMENT_BYTES * 5, 1 << 20])
def test_split_pulls_resume_to_exactly_the_stream(
    buffer: EventBuffer, stored: list[Transaction], max_bytes: int
) -> None:
    batches = pulls(buffer, Selection(), max_bytes)
    assert [decode_transaction(i.record())[0] for b in batches for i in b.items] == stored
    for batch in batches:
        if batch.within:  # the check the client makes
            assert batch.items[-1].scn == batch.next
            assert not decode_transaction(batch.items[-1].record())[0].last_fragment
    assert any(b.within for b in batches) == (max_bytes < FRAGMENT_BYTES * 8)


def test_split_filtered_pulls_send_each_kept_fragment_once(
    buffer: EventBuffer, stored: list[Transaction], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pull_module, "READ_BYTES", FRAGMENT_BYTES * 2)  # reads cut them
    batches = pulls(buffer, Selection(ORDERS), FRAGMENT_BYTES)
    got = [decode_transaction(i.record())[0] for b in batches for i in b.items]
    kept = [(t.scn, t.fragment) for t in got if t.changes]
    assert kept == [(t.scn, t.fragment) for t in stored if t.changes[0].table == "orders"]
    # scn(2)'s last fragment (items only) closes it; scn(4), never kept, sends its last too
    # once a batch began inside it (the scan budget of 4 records ended one inside it)
    closing = [(t.scn, t.fragment) for t in got if not t.changes]
    assert (scn(2), 7) in closing and (scn(4), 4) in closing
    assert len(closing) == len(set(closing))


def test_a_position_the_buffer_does_not_hold_raises(
    buffer: EventBuffer, stored: list[Transaction]
) -> None:
    query = PullQuery(scn(2), Selection(), Limits(3, 1 << 20), -1, None, split=True, within=8)
    with pytest.raises(PositionError):
        pull(buffer, query)


# -- back to source -----------------------------------------------------------------------------


class _Fresh:
    """A buffer that began at scn(50) (nothing deleted) and raises too old below scn(10)."""

    epoch = "e"
    last_scn = scn(60)
    first_scn = scn(50)
    oldest_servable = SCN.ZERO

    def read_after(
        self, after: SCN, max_records: int, max_bytes: int, *, within: int = 0, split: bool = False
    ) -> list[Record]:
        if after < scn(10):
            raise ScnTooOldError("gone", scn(10))
        return []

    def wait_for_commit(self, after: SCN, timeout_s: float) -> bool:
        return False


def test_a_position_inside_a_transaction_is_never_served_from_the_source() -> None:
    def backfill(*_args: object) -> list[Record]:
        raise AssertionError("a transaction is never re-served whole from the source")

    source = BackToSource(_Fresh(), backfill)
    with pytest.raises(ScnTooOldError, match="part way"):
        source.read_after(scn(20), 10, 100, within=2, split=True)
    retained = _Fresh()
    retained.oldest_servable = scn(10)  # type: ignore[misc]  # retention deleted some
    with pytest.raises(ScnTooOldError, match="gone"):
        BackToSource(retained, backfill).read_after(scn(5), 10, 100, within=2, split=True)


# -- the query and the answer -------------------------------------------------------------------


def parse(**params: str) -> PullQuery:
    return parse_pull_query(list({"after": "0:0:0:0", **params}.items()), ServerLimits())


def test_split_and_within_parse_with_their_defaults() -> None:
    assert (parse().split, parse().within) == (False, 0)
    assert (parse(split="1").split, parse(split="true", within="7").within) == (True, 7)
    assert parse(split="0", within="0").within == 0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"within": "3"}, "within=3 is a position inside a transaction.*split=1"),
        ({"split": "0", "within": "3"}, "within=3"),
        ({"split": "yes"}, "split must be 0 or 1"),
        ({"split": "1", "within": "-1"}, "within must be >= 0"),
        ({"split": "1", "within": "9" * 40}, "within must be a decimal integer"),
    ],
)
def test_bad_split_parameters_are_refused(params: dict[str, str], message: str) -> None:
    with pytest.raises(BadQuery, match=message):
        parse(**params)


def test_the_answer_says_next_within_only_inside_a_transaction() -> None:
    inside = Batch("e", [], scn(2), scn(9), 1, within=4)
    after = Batch("e", [], scn(2), scn(9), 1)
    assert batch_headers(inside)[wire.HEADER_NEXT_WITHIN] == "4"
    assert wire.HEADER_NEXT_WITHIN not in batch_headers(after)
    assert b'"next_within":4' in render_json(inside)
    assert b"next_within" not in render_json(after)


def test_a_pull_inside_the_newest_transaction_reads_its_rest(buffer: EventBuffer) -> None:
    store(buffer, *big(2))
    query = PullQuery(scn(2), Selection(), Limits(3, 1 << 20), -1, None, split=True, within=1)
    batch = pull(buffer, query)  # next is the newest SCN, yet not at the end
    assert [decode_transaction(i.record())[0] for i in batch.items] == big(2)[1:]
    assert (batch.next, batch.within) == (scn(2), 0)


# -- any stream, any limits: split pages carry exactly what whole batches carry ------------------


@st.composite
def shop(draw: st.DrawFn) -> list[Transaction]:
    out: list[Transaction] = []
    for n in range(1, draw(st.integers(1, 8)) + 1):
        frags = draw(st.integers(1, 5))
        drc = draw(st.booleans())
        for f in range(frags):
            tables = draw(st.lists(st.sampled_from(["orders", "items"]), max_size=3))
            rows = [ins(t, n * 100 + f * 10 + k) for k, t in enumerate(tables)]
            out.append(txn(n, *rows, drc=drc, fragment=f, last=f == frags - 1))
    return out


def _paged(
    buffer: EventBuffer, selection: Selection, limits: Limits, scan: int, split: bool
) -> list[Transaction]:
    out: list[Transaction] = []
    after, within = SCN.ZERO, 0
    for _ in range(1000):
        query = PullQuery(after, selection, limits, -1, None, split=split, within=within)
        batch = pull(buffer, query, scan_records=scan)
        got = [decode_transaction(i.record())[0] for i in batch.items]
        if batch.within:
            assert not got or (got[-1].scn == batch.next and not got[-1].last_fragment)
        out += got
        after, within = batch.next, batch.within
        if after == buffer.last_scn and not within:
            return out
    raise AssertionError("the pages never reached the end")


@settings(max_examples=60, deadline=None)
@given(
    shop(),
    st.integers(1, 4),
    st.integers(1, 600),
    st.integers(1, 6),
    st.sampled_from(["all", "orders", "skip_drc"]),
)
def test_split_pages_carry_what_whole_batches_carry(
    stream: list[Transaction], max_events: int, max_bytes: int, scan: int, which: str
) -> None:
    selection = {
        "all": Selection(),
        "orders": Selection(ORDERS),
        "skip_drc": Selection(ORDERS, skip_drc=True),
    }[which]
    with tempfile.TemporaryDirectory() as tmp, EventBuffer.open(Path(tmp) / "buf") as buffer:
        store(buffer, *stream)
        whole = _paged(buffer, selection, Limits(100, 1 << 20), 10_000, split=False)
        split = _paged(buffer, selection, Limits(max_events, max_bytes), scan, split=True)
    if which == "all":
        assert split == stream
    # the same fragments with the same rows, each once, in order ...
    assert [t for t in split if t.changes] == [t for t in whole if t.changes]
    # ... and every transaction a fragment of which was sent ends with its last fragment
    for scn_sent in {t.scn for t in split}:
        assert [t for t in split if t.scn == scn_sent][-1].last_fragment
