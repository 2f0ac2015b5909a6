"""Fuzzing GET /v1/events: no query, however odd, gets a 500 or an answer that is not JSON."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.pullquery import ServerLimits
from drc.eventbuffer import EventBuffer
from tests.support.api import STREAM, TestClient, scn, store

EXPECTED = {200, 400, 409, 410}
FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    directory: Path = tmp_path_factory.mktemp("fuzz")
    with EventBuffer.open(directory / "buf", base_scn=scn(0)) as buffer:
        store(buffer, *STREAM)
        # Every wait is capped at 5 ms, so random wait_ms values keep the run fast.
        limits = ServerLimits(max_events=50, max_bytes=1 << 16, max_wait_ms=5)
        yield TestClient(create_app(ApiDeps(buffer=buffer, limits=limits)))


def scn_texts() -> st.SearchStrategy[str]:
    part = st.one_of(st.integers(-5, 2**65).map(str), st.text(max_size=6))
    fields = st.lists(part, min_size=0, max_size=6).map(":".join)
    known = st.sampled_from(["0:0:0:0", str(scn(3)), str(scn(99)), "1:7:1:0"])
    return st.one_of(known, fields, st.text(max_size=30))


def numbers() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(str),
        st.text(max_size=12),
        st.just(""),
    )


def table_lists() -> st.SearchStrategy[str]:
    pattern = st.one_of(
        st.sampled_from(["shop.orders", "shop.*", "*.*", "other.[a-z]*", "a.b.c", ".", "[.]"]),
        st.text(max_size=12),
    )
    return st.lists(pattern, max_size=4).map(",".join)


PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "after": scn_texts(),
        "tables": table_lists(),
        "max_events": numbers(),
        "max_bytes": numbers(),
        "wait_ms": st.one_of(st.sampled_from(["-1", "0", "1", "3"]), numbers()),
        "epoch": st.one_of(st.text(max_size=40), st.just("0" * 32)),
        "skip_drc": st.one_of(st.sampled_from(["0", "1", "true"]), st.text(max_size=4)),
        "bogus": st.text(max_size=5),
    },
)


def check(response) -> None:  # noqa: ANN001
    assert response.status_code in EXPECTED, (response.status_code, response.text)
    body = response.json()
    if response.status_code != 200:
        assert set(body) >= {"error", "message"} and "Traceback" not in response.text


@FUZZ
@given(params=PARAMS, binary=st.booleans())
def test_random_parameters_never_cause_a_500(
    client: TestClient, params: dict, binary: bool
) -> None:
    headers = {"Accept": wire.MEDIA_RECORDS} if binary else {}
    response = client.get(wire.PATH_EVENTS, params=params, headers=headers)
    if binary and response.status_code == 200:
        wire.split_records(response.content)
    else:
        check(response)


@FUZZ
@given(raw=st.binary(max_size=80))
def test_raw_query_bytes_never_cause_a_500(client: TestClient, raw: bytes) -> None:
    query = urllib.parse.quote_from_bytes(raw, safe="=&;:,.*")
    check(client.get(wire.PATH_EVENTS + "?" + query))
