"""Content negotiation of GET /v1/events: the Accept header parsed as media ranges with q."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.api import wire
from drc.api.accept import choose, parse_accept
from drc.core.errors import shown

JSON, RECORDS = wire.MEDIA_JSON, wire.MEDIA_RECORDS
OFFERED = (JSON, RECORDS)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, JSON),
        ("", JSON),
        (RECORDS, RECORDS),
        (JSON, JSON),
        ("application/X-DRC-Records", RECORDS),
        (f"{RECORDS};q=0", None),
        (f"{RECORDS};q=0, {JSON}", JSON),
        (f"{RECORDS};q=0, */*", JSON),
        (f"{RECORDS};q=0, application/*", JSON),
        ("*/*", JSON),
        ("application/*", JSON),
        (f"*/*;q=0.1, {RECORDS}", RECORDS),
        (f"{JSON};q=0.5, {RECORDS};q=0.9", RECORDS),
        (f"{JSON};q=0.9, {RECORDS};q=0.5", JSON),
        (f"{JSON};q=0.5, {RECORDS};q=0.5", JSON),
        (f"{RECORDS};version=1;q=1, {JSON};charset=utf-8;q=0.2", RECORDS),
        (f"{RECORDS} ; q=0.8 ; ext=1, {JSON};q=0.7", RECORDS),
        ("text/html", None),
        ("text/*", None),
        ("application/*;q=0", None),
        ("*/*;q=0", None),
        ("application/*;q=0, application/json", JSON),
        (f"{RECORDS};q=2", None),  # a q out of range makes the range invalid
        (f"{RECORDS};q=abc, {JSON}", JSON),
        ("json", None),
        ("*/json", None),
        (f"text/html,application/xhtml+xml,{RECORDS};q=0.95,*/*;q=0.8", RECORDS),
    ],
)
def test_the_acceptable_type_with_the_highest_q_wins_json_on_ties(
    header: str | None, expected: str | None
) -> None:
    assert choose(header, OFFERED) == expected


def test_parameters_and_q_are_parsed() -> None:
    (one,) = parse_accept(f"{RECORDS}; charset=x; q=0.25; ext=2")
    assert (one.type, one.subtype, one.q) == ("application", "x-drc-records", 0.25)


@given(st.text(max_size=120))
def test_any_header_text_gives_an_offered_type_or_none(header: str) -> None:
    assert choose(header, OFFERED) in (*OFFERED, None)


def test_shown_cuts_long_text_and_says_how_long_it_was() -> None:
    assert shown("abc") == "'abc'"
    assert shown("y" * 300) == repr("y" * 200) + "... (300 chars)"
