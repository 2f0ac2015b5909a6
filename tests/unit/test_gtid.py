"""GTIDs and GTID positions: parsing, containment, what a record stores."""

from __future__ import annotations

import pytest

from drc.core import gtid as gtids
from drc.core.errors import SourceConfigError
from drc.core.gtid import Gtid


def test_a_gtid_round_trips_through_its_text() -> None:
    assert str(Gtid.parse("1-11-42")) == "1-11-42"
    assert Gtid.parse("0-1-5") == Gtid(0, 1, 5)


@pytest.mark.parametrize(
    "text", ["", "1-2", "1-2-3-4", "a-1-2", "1--2", "-1-2-3", "1-2-99999999999999999999999"]
)
def test_a_malformed_gtid_is_refused(text: str) -> None:
    with pytest.raises(SourceConfigError):
        Gtid.parse(text)


def test_a_binlog_state_becomes_one_gtid_per_domain_the_newest() -> None:
    state = gtids.parse_gtids("1-1-100,1-11-140,2-2-7")
    assert gtids.format_position(gtids.position(state)) == "1-11-140,2-2-7"
    assert gtids.parse_gtids("") == () and gtids.parse_gtids(None) == ()


def test_advance_replaces_only_the_gtids_domain() -> None:
    pos = gtids.position(gtids.parse_gtids("1-1-5,2-2-7"))
    after = gtids.advance(pos, Gtid(2, 2, 8))
    assert gtids.format_position(after) == "1-1-5,2-2-8"
    assert gtids.format_position(pos) == "1-1-5,2-2-7"  # unchanged


def test_a_single_domain_record_stores_only_its_gtid() -> None:
    one = Gtid(1, 1, 9)
    assert gtids.record_fields({1: one}, one) == ("1-1-9", None)
    assert gtids.stored_position("1-1-9", None) == {1: one}


def test_a_record_of_a_source_with_several_domains_stores_the_whole_position() -> None:
    pos = {1: Gtid(1, 1, 9), 2: Gtid(2, 2, 3)}
    fields = gtids.record_fields(pos, Gtid(1, 1, 9))
    assert fields == ("1-1-9", "1-1-9,2-2-3")
    assert gtids.stored_position(*fields) == pos


def test_a_marker_without_gtid_still_stores_its_position_even_empty() -> None:
    assert gtids.record_fields({}, None) == (None, "")
    assert gtids.stored_position(None, "") == {}
    assert gtids.stored_position(None, None) is None  # unknown: written before positions


def test_a_server_contains_a_gtid_its_server_ids_sequence_reached() -> None:
    pos = {1: Gtid(1, 1, 100)}
    promoted_replica = gtids.parse_gtids("1-1-100,1-11-120")
    assert gtids.missing(pos, promoted_replica) == []
    lagging = gtids.parse_gtids("1-1-99")
    assert gtids.missing(pos, lagging) == [Gtid(1, 1, 100)]


def test_the_same_sequence_number_from_another_server_is_not_containment() -> None:
    # A server that wrote its own 1-12-150 never had 1-1-100: it diverged.
    assert gtids.missing({1: Gtid(1, 1, 100)}, gtids.parse_gtids("1-12-150")) == [Gtid(1, 1, 100)]


def test_every_domain_of_the_position_must_be_contained() -> None:
    pos = {1: Gtid(1, 1, 10), 2: Gtid(2, 2, 5)}
    assert gtids.missing(pos, gtids.parse_gtids("1-1-10,2-2-4")) == [Gtid(2, 2, 5)]


def test_shares_domain_tells_an_unrelated_server_from_a_lagging_one() -> None:
    pos = {1: Gtid(1, 1, 10)}
    assert gtids.shares_domain(pos, gtids.parse_gtids("1-1-3"))
    assert not gtids.shares_domain(pos, gtids.parse_gtids("2-2-300"))
    assert not gtids.shares_domain(pos, ())
