"""The subscriber on GET /v1/stream, against the real API (uvicorn on loopback, an
EventBuffer written by the test): the same transactions and positions as pulls, a stop
mid-stream resumed from the last position with nothing lost or repeated, and the pull's
refusals (token, long-poll limits, too old) when the stream is opened."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.api import pullquery, streamwire, wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.longpolls import LongPollGate, LongPollLimits
from drc.api.server import ApiServer
from drc.client import ApiAuthError, Subscriber
from drc.client.errors import PositionTooOldError
from drc.client.fetcher import NO_STREAM_RETRY_S
from drc.client.records import RawStreams, pull_raw
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from tests.support.api import ins, scn, store, txn
from tests.support.fake_api import FakeApi
from tests.support.fake_api import stream as fake_stream

TOKEN = "stream-token"


def serve(deps: ApiDeps, port: int = 0) -> ApiServer:
    return ApiServer(create_app(deps), "127.0.0.1", port, open_access=not deps.tokens,
                     stop_event=deps.stop).start()  # fmt: skip


def workload(n: int) -> Transaction:
    """Every third transaction in a table the subscribers leave out, every fifth in two
    fragments."""
    if n % 3 == 0:
        return txn(n, ins("audit", n))
    return txn(n, ins("orders", n))


def collect(sub: Subscriber, upto: SCN, seconds: float = 20) -> list[Transaction]:
    got: list[Transaction] = []
    deadline = time.monotonic() + seconds
    while sub.position < upto and time.monotonic() < deadline:
        batch = sub.get(timeout=seconds)
        assert batch.after == sub.position
        got += batch.transactions
        sub.ack(batch)
    return got


def test_streamed_and_pulled_subscribers_see_the_same_transactions(buffer: EventBuffer) -> None:
    store(buffer, *(workload(n) for n in range(1, 40)))
    deps = ApiDeps(buffer=buffer)
    server = serve(deps)
    try:

        def write() -> None:
            for n in range(40, 120):
                store(buffer, workload(n))
                time.sleep(0.002)

        writer = threading.Thread(target=write)
        writer.start()
        kwargs: dict[str, Any] = {"tables": "shop.orders", "skip_drc": True, "wait_ms": 100}
        with Subscriber(server.url, **kwargs) as streamed:
            got = collect(streamed, scn(119))
        writer.join()
        requests = deps.metrics.snapshot()[0]
        assert not any(route == wire.PATH_EVENTS for _m, route, _s in requests)  # no pulls
        with Subscriber(server.url, stream=False, **kwargs) as pulled:
            want = collect(pulled, scn(119))
        assert [t.scn for t in got] == [t.scn for t in want]
        assert [t.scn for t in got] == [scn(n) for n in range(1, 120) if n % 3]
        assert got == want
    finally:
        server.stop()


def test_a_server_stopped_mid_stream_is_resumed_from_the_last_position(
    buffer: EventBuffer,
) -> None:
    store(buffer, *(workload(n) for n in range(1, 20)))
    deps = ApiDeps(buffer=buffer)
    server = serve(deps)
    port = server.port
    got: list[Transaction] = []
    with Subscriber(server.url, wait_ms=100, backoff_initial=0.05) as sub:
        got += collect(sub, scn(19))
        server.stop()  # the stream ends (END frame); the subscriber retries
        store(buffer, *(workload(n) for n in range(20, 40)))
        deps.stop.clear()
        server = serve(deps, port)
        try:
            got += collect(sub, scn(39))
        finally:
            server.stop()
    assert [t.scn for t in got] == [scn(n) for n in range(1, 40)]


def test_opening_a_stream_is_refused_like_a_pull(buffer: EventBuffer) -> None:
    store(buffer, *(workload(n) for n in range(1, 5)))
    gate = LongPollGate(LongPollLimits(total=10, per_token=1))
    deps = ApiDeps(buffer=buffer, tokens=(TOKEN,), long_polls=gate)
    server = serve(deps)
    try:
        url = server.url + streamwire.PATH_STREAM
        assert httpx.get(url, params={"after": "0:0:0:0"}).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.stream("GET", url, params={"after": "0:0:0:0"}, headers=auth) as held:
            assert held.status_code == 200 and held.headers[wire.HEADER_EPOCH] == buffer.epoch
            busy = httpx.get(url, params={"after": "0:0:0:0"}, headers=auth)
            assert busy.status_code == 429 and busy.headers["retry-after"]
            # the subscriber pulls without waiting meanwhile: it still gets everything
            with Subscriber(server.url, token=TOKEN, wait_ms=100) as sub:
                assert [t.scn for t in collect(sub, scn(4))] == [scn(n) for n in range(1, 5)]
        with pytest.raises(ApiAuthError), Subscriber(server.url, token="wrong") as sub:
            sub.get(timeout=10)
        refusals = {
            "epoch": ({"after": "0:0:0:0", "epoch": "not-this-one"}, 409, "epoch_mismatch"),
            "query": ({"after": "yesterday"}, 400, "bad_request"),
        }
        for params, status, code in refusals.values():
            answer = httpx.get(url, params=params, headers=auth)
            assert (answer.status_code, answer.json()["error"]) == (status, code)
    finally:
        server.stop()


def test_a_marker_mode_replicator_refuses_a_stream_that_would_want_rows(
    buffer: EventBuffer,
) -> None:
    server = serve(ApiDeps(buffer=buffer, drc_applied=pullquery.DRC_APPLIED_MARKER))
    try:
        url = server.url + streamwire.PATH_STREAM
        answer = httpx.get(url, params={"after": "0:0:0:0"})
        assert answer.status_code == 409 and answer.json()["error"] == wire.ERROR_ROWS_OMITTED
        with httpx.stream("GET", url, params={"after": "0:0:0:0", "skip_drc": "1"}) as ok:
            assert ok.status_code == 200
    finally:
        server.stop()


def test_a_position_older_than_the_buffer_is_refused_when_opening(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "b", base_scn=scn(10)) as buffer:
        store(buffer, workload(11))
        server = serve(ApiDeps(buffer=buffer))
        try:
            answer = httpx.get(server.url + streamwire.PATH_STREAM, params={"after": str(scn(2))})
            assert answer.status_code == 410 and answer.json()["oldest"] == str(scn(10))
            with pytest.raises(PositionTooOldError), Subscriber(server.url, after=scn(2)) as sub:
                sub.get(timeout=10)
        finally:
            server.stop()


def test_rollback_reopens_the_stream_at_the_acked_position(buffer: EventBuffer) -> None:
    store(buffer, *(workload(n) for n in range(1, 10)))
    # One stream at a time: the stream a rollback leaves must hang up before the next opens.
    gate = LongPollGate(LongPollLimits(total=1, per_token=1))
    deps = ApiDeps(buffer=buffer, long_polls=gate)
    server = serve(deps)
    try:
        with Subscriber(server.url, tables="shop.orders", wait_ms=2000, max_events=2) as sub:
            first = sub.get(timeout=10)
            sub.ack(first)
            second = sub.get(timeout=10)
            sub.rollback()  # not acked: delivered again, from the acked position
            again = sub.get(timeout=10)
            assert again.after == first.next == second.after
            assert again.transactions == second.transactions and again.id != second.id
            sub.ack(again)
            rest = collect(sub, scn(9))
            # past the last match (9 is left out), a heartbeat moves the position on
            assert sub.position == scn(9)
        seen = [t.scn for t in (*first.transactions, *again.transactions, *rest)]
        assert seen == [scn(n) for n in range(1, 10) if n % 3]
        requests = deps.metrics.snapshot()[0]
        assert not any(route == wire.PATH_EVENTS for _m, route, _s in requests)  # no pulls
    finally:
        server.stop()


def test_the_stream_through_an_httpx_transport(buffer: EventBuffer) -> None:
    """A subscriber given its own transport (or proxy settings) reads the stream through
    httpx instead of its lean connections: the same transactions."""
    store(buffer, *(workload(n) for n in range(1, 30)))
    server = serve(ApiDeps(buffer=buffer))
    try:
        with Subscriber(server.url, wait_ms=100, transport=httpx.HTTPTransport()) as sub:
            got = collect(sub, scn(29))
        assert [t.scn for t in got] == [scn(n) for n in range(1, 30)]
    finally:
        server.stop()


def test_an_older_server_is_pulled_from_and_asked_for_a_stream_again_later() -> None:
    api = FakeApi(fake_stream(6))
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return api.handle(request)  # 404 to /v1/stream, like a server from before it

    now = [0.0]
    with Subscriber("http://a", transport=httpx.MockTransport(handle), max_events=2,
                    clock=lambda: now[0], prefetch=False) as sub:  # fmt: skip
        got = []
        for _ in range(2):
            batch = sub.get(timeout=10)
            got += batch.transactions
            sub.ack(batch)
        assert asked == [streamwire.PATH_STREAM, wire.PATH_EVENTS, wire.PATH_EVENTS]
        now[0] += NO_STREAM_RETRY_S
        batch = sub.get(timeout=10)
        got += batch.transactions
        assert asked[3:] == [streamwire.PATH_STREAM, wire.PATH_EVENTS]
    assert [t.scn for t in got] == [t.scn for t in fake_stream(6)]


def test_a_follower_copies_the_same_records_off_a_stream_as_by_pulls(
    buffer: EventBuffer,
) -> None:
    store(
        buffer,
        txn(1, ins("orders", 1)),
        txn(2, ins("items", 2), fragment=0, last=False),
        txn(2, ins("items", 3), fragment=1),
        txn(3),  # a progress marker
    )
    server = serve(ApiDeps(buffer=buffer, group=lambda: {"term": 4, "role": "leader"}))
    client = httpx.Client()
    streams = RawStreams(client, None)
    try:
        pulled = pull_raw(client, server.url, SCN.ZERO, 100, None)
        streamed = streams.page(server.url, SCN.ZERO, 100)
        assert streamed.records == pulled.records and len(pulled.records) == 4
        assert streamed.term == pulled.term == 4 and streamed.newest == scn(3)
        store(buffer, txn(4, ins("orders", 4)))
        more = streams.page(server.url, scn(3), 100)  # the same stream, read on
        assert [r.scn for r in more.records] == [scn(4)]
        assert more.records[0].payload == buffer.read_after(scn(3), 1, 1 << 20)[0].payload
    finally:
        streams.close()
        client.close()
        server.stop()
