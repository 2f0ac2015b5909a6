"""Split pages on the wire: the pull's X-DRC-Next-Within header and JSON next_within over HTTP
(FastAPI's TestClient), the stream's 4-token batch and 3-token heartbeat metas, and the stream
loop's position (next, within)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drc.api import streamwire, wire
from drc.api.app import create_app
from drc.api.commits import CommitSignal
from drc.api.deps import ApiDeps
from drc.api.pullquery import ServerLimits, parse_pull_query
from drc.api.stream import StreamLoop
from drc.core.codec import decode_transaction, encode_transaction
from drc.core.events import Op, RowChange, Transaction
from drc.core.jsonwire import transaction_from_json
from drc.eventbuffer import EventBuffer
from tests.support.api import AUTH, TOKEN, TestClient, ins, scn, store, txn

FRAGMENTS = 6


def big(n: int, table: str = "orders") -> list[Transaction]:
    row = {"note": "x" * 1000}
    return [
        dataclasses.replace(
            txn(n, RowChange("shop", table, Op.INSERT, None, {"id": i, **row})),
            fragment=i,
            last_fragment=i == FRAGMENTS - 1,
        )
        for i in range(FRAGMENTS)
    ]


STREAM = [txn(1, ins("orders", 1)), *big(2), txn(3, ins("orders", 3))]
FRAGMENT_BYTES = len(encode_transaction(big(2)[0]))


@pytest.fixture
def buffer(tmp_path: Path) -> Iterator[EventBuffer]:
    with EventBuffer.open(tmp_path / "buf") as buf:
        store(buf, *STREAM)
        yield buf


@pytest.fixture
def client(buffer: EventBuffer) -> TestClient:
    deps = ApiDeps(
        buffer=buffer, limits=ServerLimits(max_wait_ms=2000), tokens=(TOKEN,), datacenter="dc1"
    )
    return TestClient(create_app(deps), raise_server_exceptions=False)


def events(client: TestClient, params: dict[str, str], records: bool = False) -> Any:
    headers = {**AUTH, "Accept": wire.MEDIA_RECORDS} if records else AUTH
    return client.get(wire.PATH_EVENTS, params=params, headers=headers)


# -- the pull over HTTP ---------------------------------------------------------------------------


def test_a_split_pull_says_where_it_ended_in_both_forms(client: TestClient) -> None:
    params = {"after": str(scn(1)), "split": "1", "max_bytes": str(FRAGMENT_BYTES * 2)}
    as_json = events(client, params)
    as_records = events(client, params, records=True)
    assert as_json.status_code == as_records.status_code == 200
    body = as_json.json()
    assert (body["next"], body["next_within"]) == (str(scn(2)), 2)
    assert as_records.headers[wire.HEADER_NEXT] == str(scn(2))
    assert as_records.headers[wire.HEADER_NEXT_WITHIN] == "2"
    assert wire.split_records(as_records.content) == big(2)[:2]
    assert [transaction_from_json(t) for t in body["transactions"]] == big(2)[:2]


def test_a_split_pull_continues_and_ends_after_the_transaction(client: TestClient) -> None:
    params = {"after": str(scn(2)), "split": "1", "within": "2"}
    as_json = events(client, params)
    as_records = events(client, params, records=True)
    assert "next_within" not in as_json.json()
    assert wire.HEADER_NEXT_WITHIN not in as_records.headers
    assert wire.split_records(as_records.content) == [*big(2)[2:], STREAM[-1]]


def test_without_split_nothing_changes(client: TestClient) -> None:
    response = events(client, {"after": str(scn(1)), "max_bytes": "1"}, records=True)
    assert wire.split_records(response.content) == big(2)
    assert wire.HEADER_NEXT_WITHIN not in response.headers


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"after": str(scn(2)), "within": "2"}, "within=2 is a position inside"),
        ({"after": str(scn(2)), "split": "1", "within": str(FRAGMENTS)}, "within: .*no record"),
        ({"after": str(scn(1)), "split": "1", "within": "1"}, "did not come from this buffer"),
    ],
)
def test_positions_that_are_not_the_buffers_are_a_400(
    client: TestClient, params: dict[str, str], message: str
) -> None:
    response = events(client, params)
    assert response.status_code == 400
    assert re.search(message, response.json()["message"]), response.json()


def test_an_epoch_mismatch_is_checked_first(client: TestClient) -> None:
    params = {"after": str(scn(1)), "split": "1", "within": "1", "epoch": "other"}
    assert events(client, params).status_code == 409


# -- stream frames ------------------------------------------------------------------------------


def records_of(*txns: Transaction) -> bytes:
    return b"".join(encode_transaction(t) for t in txns)


@pytest.mark.parametrize("compress", [False, True])
def test_batch_frames_round_trip_with_and_without_within(compress: bool) -> None:
    records = records_of(*big(2)[:2]) * 4
    inside = streamwire.batch_frame(scn(2), scn(9), 8, records, compress, within=2)
    whole = streamwire.batch_frame(scn(2), scn(9), 8, records, compress)
    got = streamwire.FrameParser().feed(inside + whole)
    assert [(f.next, f.newest, f.within, len(f.transactions)) for f in got] == [
        (scn(2), scn(9), 2, 8),
        (scn(2), scn(9), 0, 8),
    ]
    if not compress:  # the two forms of the meta, as the spec writes them
        assert f"{scn(2)} {scn(9)} 8 2".encode() in inside
        assert f"{scn(2)} {scn(9)} 8".encode() + records[:1] in whole


def test_a_batch_head_says_within_like_the_frame() -> None:
    records = records_of(big(2)[0])
    head = streamwire.batch_head(scn(2), None, 1, len(records), within=3)
    assert head + records == streamwire.batch_frame(scn(2), None, 1, records, within=3)
    (frame,) = streamwire.FrameParser().feed(head + records)
    assert (frame.within, frame.newest) == (3, None)


def test_heartbeats_round_trip_with_and_without_within() -> None:
    beats = streamwire.heartbeat_frame(scn(2), scn(9), 5) + streamwire.heartbeat_frame(scn(3), None)
    assert f"{scn(2)} {scn(9)} 5".encode() in beats
    got = streamwire.FrameParser().feed(beats)
    assert [(f.next, f.newest, f.within) for f in got] == [(scn(2), scn(9), 5), (scn(3), None, 0)]


@pytest.mark.parametrize(
    "meta",
    [
        f"{scn(2)} {scn(9)} 0 2 7",  # five tokens
        f"{scn(2)} {scn(9)} 0 -2",
        f"{scn(2)} {scn(9)} 0 x",
        f"{scn(2)}",
    ],
)
def test_malformed_metas_are_broken_streams(meta: str) -> None:
    raw = meta.encode()
    batch = b"B" + (2 + len(raw)).to_bytes(4, "big") + len(raw).to_bytes(2, "big") + raw
    with pytest.raises(streamwire.BrokenStream):
        streamwire.FrameParser().feed(batch)
    beat = meta.replace(" 0 ", " ").encode()
    with pytest.raises(streamwire.BrokenStream):
        streamwire.FrameParser().feed(b"H" + len(beat).to_bytes(4, "big") + beat)


# -- the stream's loop ----------------------------------------------------------------------------


def make_loop(buffer: EventBuffer, **params: str) -> StreamLoop:
    deps = ApiDeps(buffer=buffer, limits=ServerLimits(max_wait_ms=5000))
    query = parse_pull_query(list({"after": "0:0:0:0", **params}.items()), deps.limits)
    return StreamLoop(deps, CommitSignal(buffer, deps.stop), query)


def frames(loop: StreamLoop, seconds: float = 0.5) -> list[streamwire.Frame]:
    parser = streamwire.FrameParser()
    got: list[streamwire.Frame] = []

    async def send(data: bytes) -> None:
        got.extend(parser.feed(data))

    async def writable() -> None:
        return

    async def main() -> None:
        try:
            async with asyncio.timeout(seconds):
                await loop.run(await loop.scan(), send, writable)
        except TimeoutError:
            pass

    asyncio.run(main())
    return got


@pytest.mark.parametrize("compress", [False, True])
def test_a_split_stream_sends_pages_inside_the_transaction(
    buffer: EventBuffer, compress: bool
) -> None:
    loop = make_loop(buffer, split="1", max_bytes=str(FRAGMENT_BYTES * 2), wait_ms="100")
    loop.compress = compress
    got = [f for f in frames(loop) if f.transactions]
    assert [t for f in got for t in f.transactions] == STREAM
    positions = [(f.next, f.within) for f in got]
    assert positions == [(scn(1), 0), (scn(2), 2), (scn(2), 4), (scn(2), 0), (scn(3), 0)]
    assert (loop.next, loop.within) == (scn(3), 0)


def test_a_stream_continues_from_a_position_inside_a_transaction(buffer: EventBuffer) -> None:
    loop = make_loop(buffer, after=str(scn(2)), split="1", within="4", wait_ms="100")
    got = [f for f in frames(loop) if f.transactions]
    assert [t for f in got for t in f.transactions] == [*big(2)[4:], STREAM[-1]]


def test_a_stream_without_split_sends_the_transaction_whole(buffer: EventBuffer) -> None:
    loop = make_loop(buffer, max_bytes=str(FRAGMENT_BYTES * 2), wait_ms="100")
    got = [f for f in frames(loop) if f.transactions]
    assert [len(f.transactions) for f in got] == [1, FRAGMENTS, 1]
    assert all(f.within == 0 for f in got)


def test_heartbeats_say_the_position_inside_a_transaction(buffer: EventBuffer) -> None:
    loop = make_loop(buffer, after=str(scn(2)), split="1", within="4", wait_ms="50")
    loop.next, loop.within = scn(2), 4  # as after a page that ended there

    async def main() -> bytes:
        sent: list[bytes] = []

        async def send(data: bytes) -> None:
            sent.append(data)

        async def slow() -> Any:
            await asyncio.sleep(0.3)  # a long read: heartbeats meanwhile
            return await loop.scan()

        await loop._beating(send, slow(), scn(3))
        return b"".join(sent)

    beats = streamwire.FrameParser().feed(asyncio.run(main()))
    assert beats and all((f.next, f.within) == (scn(2), 4) for f in beats)


def test_pages_are_shared_only_at_the_same_position(buffer: EventBuffer) -> None:
    one = make_loop(buffer, after=str(scn(2)), split="1", within="2", wait_ms="100")
    two = make_loop(buffer, after=str(scn(2)), split="1", within="4", wait_ms="100")

    async def main() -> tuple[Any, Any]:
        return await one.scan(), await two.scan()

    first, second = asyncio.run(main())
    assert decode_transaction(first.records)[0] == big(2)[2]
    assert decode_transaction(second.records)[0] == big(2)[4]
