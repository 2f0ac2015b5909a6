"""Filtering and batching of pulls (drc.api.batching, drc.api.pullquery): pure, no I/O."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.api import batching, pullquery
from drc.api.batching import BatchBuilder, select, transactions
from drc.api.pullquery import BadQuery, Limits, Selection, ServerLimits, parse_pull_query
from drc.core.codec import decode_transaction, encode_transaction
from drc.core.events import SchemaChange, Transaction
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.eventbuffer.reader import Record
from tests.support.api import ORDERS, ins, scn, txn


def record(t: Transaction) -> Record:
    return Record(t.scn, encode_transaction(t), t.timestamp * 1000, not t.last_fragment, 0, 0)


def records(*txns: Transaction) -> list[Record]:
    return [record(t) for t in txns]


def sent(items: list) -> list[Transaction]:
    return [decode_transaction(item.record())[0] for item in items]


# -- selection -------------------------------------------------------------------------------


def test_a_filter_keeps_only_the_matching_rows_of_a_transaction() -> None:
    t = txn(1, ins("orders", 1), ins("items", 2), ins("orders", 3))
    (item,) = select(records(t), Selection(ORDERS))
    assert item.changed
    assert [c.row["id"] for c in sent([item])[0].changes] == [1, 3]
    assert item.transaction() == sent([item])[0]


def test_an_unchanged_record_is_sent_as_stored() -> None:
    t = txn(1, ins("orders", 1), ins("items", 2))
    group = records(t)
    (item,) = select(group, Selection(TableFilter.parse_list("shop.*")))
    assert not item.changed
    assert item.record() is group[0].payload


def test_a_transaction_kept_whole_is_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    t = txn(1, ins("orders", 1), ins("orders", 2))
    drc = dataclasses.replace(txn(2, ins("orders", 3)), drc_originated=True)
    monkeypatch.setattr(batching, "decode_transaction", None)  # any decode would fail
    group = records(t)
    (item,) = select(group, Selection(ORDERS, skip_drc=True))
    assert not item.changed and item.record() is group[0].payload
    assert select(records(drc), Selection(ORDERS, skip_drc=True)) == []


def test_a_large_transaction_ending_in_an_empty_fragment_is_not_decoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Capture flushes a large transaction's rows at the fragment limit, so its last fragment
    may hold none; that alone must not make every pull decode all its rows (a million rows
    took 20 s a scan, longer than a stream's read timeout: the channel never got them)."""
    first = dataclasses.replace(txn(1, ins("orders", 1)), last_fragment=False)
    second = dataclasses.replace(txn(1, ins("orders", 2)), fragment=1, last_fragment=False)
    empty = dataclasses.replace(txn(1), fragment=2)
    group = records(first, second, empty)
    monkeypatch.setattr(batching, "decode_transaction", None)  # any decode would fail
    items = select(group, Selection(ORDERS, skip_drc=True))
    assert [item.record() for item in items] == [r.payload for r in group]
    assert all(not item.changed for item in items)


def test_an_empty_first_fragment_still_needs_its_rows_read() -> None:
    empty = dataclasses.replace(txn(1), last_fragment=False)
    other = dataclasses.replace(txn(1, ins("items", 2)), fragment=1)
    assert select(records(empty, other), Selection(ORDERS)) == []


def test_without_a_filter_records_pass_through_undecoded() -> None:
    garbage = Record(scn(1), b"not a codec record", 0, False, 0, 0)
    (item,) = select([garbage], Selection())
    assert item.record() is garbage.payload


def test_transactions_with_nothing_matching_are_dropped() -> None:
    assert select(records(txn(1, ins("items", 1))), Selection(ORDERS)) == []


def test_empty_progress_markers_pass_only_without_a_filter() -> None:
    marker = txn(1)
    assert len(select(records(marker), Selection())) == 1
    assert select(records(marker), Selection(ORDERS)) == []


@pytest.mark.parametrize(
    ("statement", "schema", "tables", "kept"),
    [
        ("ALTER TABLE orders ADD COLUMN x INT", "shop", "shop.orders", True),
        ("ALTER TABLE shop.items ADD COLUMN x INT", "other", "shop.orders", False),
        ("RENAME TABLE shop.tmp TO shop.orders", "", "shop.orders", True),
        ("DROP TABLE IF EXISTS items, orders", "shop", "shop.orders", True),
        ("CREATE DATABASE extra", "shop", "shop.*", True),
        ("CREATE DATABASE extra", "other", "shop.*", False),
        ("DROP DATABASE shop", "", "shop.orders", True),
        ("GRANT SELECT ON *.* TO x", "other", "shop.orders", False),
    ],
)
def test_ddl_is_kept_when_it_names_or_may_concern_a_matching_table(
    statement: str, schema: str, tables: str, kept: bool
) -> None:
    t = txn(1, ddl=[SchemaChange(schema, statement)])
    items = select(records(t), Selection(TableFilter.parse_list(tables)))
    assert bool(items) is kept


def test_fragments_emptied_by_the_filter_are_dropped_but_the_last_is_always_sent() -> None:
    frags = [
        txn(1, ins("orders", 1), fragment=0, last=False),
        txn(1, ins("items", 2), fragment=1, last=False),
        txn(1, ins("items", 3), fragment=2, last=True),
    ]
    out = sent(select(records(*frags), Selection(ORDERS)))
    assert [(t.fragment, t.last_fragment, len(t.changes)) for t in out] == [
        (0, False, 1),
        (2, True, 0),
    ]


def test_a_transaction_whose_fragments_all_miss_the_filter_sends_nothing() -> None:
    frags = [txn(1, ins("items", 1), last=False), txn(1, ins("items", 2), fragment=1)]
    assert select(records(*frags), Selection(ORDERS)) == []


def test_a_transaction_matching_only_in_its_last_fragment_sends_just_that() -> None:
    frags = [txn(1, ins("items", 1), last=False), txn(1, ins("orders", 2), fragment=1)]
    assert [t.fragment for t in sent(select(records(*frags), Selection(ORDERS)))] == [1]


def test_skip_drc_drops_drc_originated_transactions_whole() -> None:
    frags = [txn(1, ins("orders", 1), drc=True, last=False), txn(1, drc=True, fragment=1)]
    assert select(records(*frags), Selection(skip_drc=True)) == []
    assert len(select(records(*frags), Selection())) == 2
    plain = txn(2, ins("orders", 1))
    assert len(select(records(plain), Selection(skip_drc=True))) == 1


def test_transactions_groups_fragments_and_refuses_a_cut_transaction() -> None:
    frags = records(txn(1, last=False), txn(1, fragment=1), txn(2))
    assert [len(g) for g in transactions(frags)] == [2, 1]
    with pytest.raises(ValueError, match="inside the transaction"):
        list(transactions(frags[:1]))


# -- batching --------------------------------------------------------------------------------


def test_next_advances_over_a_stretch_the_filter_drops() -> None:
    builder = BatchBuilder(Selection(ORDERS), Limits(10, 1 << 20), SCN.ZERO)
    builder.add(records(*(txn(n, ins("items", n)) for n in range(1, 51))))
    assert builder.items == [] and builder.next == scn(50) and builder.examined == 50


def test_max_events_counts_transactions_not_fragments() -> None:
    builder = BatchBuilder(Selection(), Limits(2, 1 << 20), SCN.ZERO)
    builder.add(records(txn(1, last=False), txn(1, fragment=1), txn(2), txn(3)))
    assert builder.full and builder.transactions == 2 and len(builder.items) == 3
    assert builder.next == scn(2)


def test_the_first_transaction_is_sent_whole_however_big_and_next_stops_before_the_rest() -> None:
    big = txn(1, *(ins("orders", i) for i in range(200)))
    builder = BatchBuilder(Selection(), Limits(100, 500), SCN.ZERO)
    builder.add(records(big, txn(2, ins("orders", 1))))
    assert builder.transactions == 1 and builder.bytes > 500
    assert builder.next == scn(1)


def test_a_transaction_that_would_overflow_max_bytes_waits_for_the_next_batch() -> None:
    rs = records(txn(1, ins("orders", 1)), txn(2, ins("orders", 2)), txn(3, ins("orders", 3)))
    limit = len(rs[0].payload) + len(rs[1].payload) + 5
    builder = BatchBuilder(Selection(), Limits(100, limit), SCN.ZERO)
    builder.add(rs)
    assert builder.transactions == 2 and builder.next == scn(2) and builder.full


def test_max_bytes_counts_the_filtered_record_size() -> None:
    t = txn(1, ins("orders", 1), *(ins("items", i) for i in range(100)))
    builder = BatchBuilder(Selection(ORDERS), Limits(100, 1 << 20), SCN.ZERO)
    builder.add(records(t))
    assert builder.bytes == len(builder.items[0].record()) < len(encode_transaction(t))


def test_records_that_do_not_follow_next_are_refused() -> None:
    builder = BatchBuilder(Selection(), Limits(10, 1 << 20), scn(5))
    with pytest.raises(ValueError, match="do not follow"):
        builder.add(records(txn(3)))


# -- query parsing ---------------------------------------------------------------------------

SERVER = ServerLimits(max_events=50, max_bytes=1000, max_wait_ms=2000)


def parse(**params: str):  # noqa: ANN201 (a PullQuery)
    return parse_pull_query(list(params.items()), SERVER)


def test_defaults_and_clamps() -> None:
    q = parse(after="0:0:0:0")
    assert (q.limits.max_events, q.limits.max_bytes, q.wait_ms, q.wait_s) == (50, 1000, -1, 0)
    assert q.selection == Selection() and q.epoch is None
    q = parse(after="1:2:3:4", max_events="999", max_bytes="99999", wait_ms="60000")
    assert (q.limits.max_events, q.limits.max_bytes, q.wait_ms, q.wait_s) == (50, 1000, 2000, 2)
    q = parse(after="1:2:3:4", wait_ms="0", skip_drc="1", tables="shop.orders, shop.x*")
    assert q.wait_ms == pullquery.WAIT_FULL and q.wait_s == 2 and q.selection.skip_drc
    assert q.selection.tables.matches("shop", "xy") and not q.selection.tables.matches("a", "b")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "after is required"),
        ({"after": "1:2:3"}, "after: SCN text '1:2:3' has 3 field"),
        ({"after": "0:0:0:0", "tables": "shop"}, "tables: table pattern 'shop' must look like"),
        ({"after": "0:0:0:0", "tables": ", ,"}, "names no table pattern"),
        ({"after": "0:0:0:0", "max_events": "0"}, "max_events must be >= 1, got 0"),
        ({"after": "0:0:0:0", "max_bytes": "1e6"}, "max_bytes must be a decimal integer"),
        ({"after": "0:0:0:0", "max_events": "١٢"}, "max_events must be a decimal integer"),
        ({"after": "0:0:0:0", "wait_ms": "-2"}, "wait_ms must be >= -1, got -2"),
        ({"after": "0:0:0:0", "wait_ms": "9" * 40}, "wait_ms must be a decimal integer"),
        ({"after": "0:0:0:0", "skip_drc": "yes"}, "skip_drc must be 0 or 1"),
        ({"after": "0:0:0:0", "epoch": ""}, "epoch must be a buffer epoch"),
        ({"after": "0:0:0:0", "aftr": "1"}, "unknown parameter 'aftr'"),
    ],
)
def test_bad_parameters_are_refused_with_what_is_wrong(params: dict, message: str) -> None:
    with pytest.raises(BadQuery, match=message.replace("(", r"\(")):
        parse(**params)


def test_a_parameter_given_twice_is_refused() -> None:
    with pytest.raises(BadQuery, match="after is given more than once"):
        parse_pull_query([("after", "0:0:0:0"), ("after", "0:0:0:1")], SERVER)


# -- the no-filter fast path agrees with the general path ----------------------------------------


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Record], list[int], Limits]:
    out: list[Record] = []
    for n in range(1, draw(st.integers(1, 12)) + 1):
        frags = draw(st.integers(1, 3))
        for f in range(frags):
            rows = [ins("orders", n * 10 + k) for k in range(draw(st.integers(1, 4)))]
            out.append(record(txn(n, *rows, fragment=f, last=f == frags - 1)))
    ends = [i + 1 for i, r in enumerate(out) if not r.more]
    cuts = sorted(draw(st.sets(st.sampled_from(ends))) | {ends[-1]})
    limits = Limits(draw(st.integers(1, 6)), draw(st.integers(1, 2000)))
    return out, cuts, limits


@given(streams())
def test_the_fast_path_batches_exactly_like_the_general_one(
    case: tuple[list[Record], list[int], Limits],
) -> None:
    stream, cuts, limits = case
    results = []
    for selection in (Selection(), Selection(TableFilter.parse_list("*.*"))):
        builder = BatchBuilder(selection, limits, SCN.ZERO)
        start = 0
        for cut in cuts:  # successive reads, as a pull makes them
            builder.add(stream[start:cut])
            start = cut
        items = [(i.scn, i.record()) for i in builder.items]
        results.append((items, builder.next, builder.transactions, builder.bytes, builder.full))
    assert results[0] == results[1]
