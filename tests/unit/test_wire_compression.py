"""Records compressed on the wire (X-DRC-Compression: lz4): the body and frame forms, their
refusals, and subscribers on pulls and streams against the real API (uvicorn on loopback)
getting the same transactions compressed as plain, with fewer bytes sent."""

from __future__ import annotations

import os
import struct
import time
from typing import Any

import httpx
import pytest

from drc.api import streamwire, wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer
from drc.client import Subscriber
from drc.client.http import make_client
from drc.core.codec import encode_transaction
from drc.core.events import Transaction
from drc.eventbuffer import EventBuffer
from tests.support.api import ins, scn, store, txn


def serve(deps: ApiDeps) -> ApiServer:
    return ApiServer(
        create_app(deps), "127.0.0.1", 0, open_access=True, stop_event=deps.stop
    ).start()


def records(*txns: Transaction) -> bytes:
    return b"".join(encode_transaction(t) for t in txns)


def test_a_body_compresses_only_when_that_pays_and_reads_back() -> None:
    body = records(*(txn(n, ins("orders", n)) for n in range(1, 50)))
    packed = wire.compress_body(body)
    assert packed is not None and len(packed) < len(body)
    assert wire.decompress_body(packed) == body
    assert wire.compress_body(b"x" * (wire.MIN_COMPRESS_BYTES - 1)) is None  # too small
    assert wire.compress_body(os.urandom(4096)) is None  # would not shrink


@pytest.mark.parametrize(
    "bad",
    [
        b"\x01\x00",  # no size prefix
        struct.pack("<I", wire.MAX_UNCOMPRESSED_BYTES + 1) + b"\x00" * 8,  # a bomb's claim
        struct.pack("<I", 1000) + b"\xff" * 20,  # not LZ4
    ],
)
def test_a_damaged_compressed_body_is_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        wire.decompress_body(bad)


def test_the_request_header_is_read_as_a_list() -> None:
    assert wire.accepts_compression("lz4")
    assert wire.accepts_compression("zstd, LZ4")
    assert not wire.accepts_compression("zstd")
    assert not wire.accepts_compression(None)


def test_a_compressed_batch_frame_reads_back_as_the_plain_one() -> None:
    txns = tuple(txn(n, ins("orders", n)) for n in range(1, 30))
    plain = streamwire.batch_frame(scn(29), scn(40), len(txns), records(*txns))
    packed = streamwire.batch_frame(scn(29), scn(40), len(txns), records(*txns), compress=True)
    assert packed[:1] == streamwire.COMPRESSED and len(packed) < len(plain)
    for body in (plain, packed):
        (frame,) = streamwire.FrameParser().feed(body)
        assert frame.transactions == txns and (frame.next, frame.newest) == (scn(29), scn(40))
        assert frame.size == len(records(*txns))
    small = streamwire.batch_frame(scn(1), None, 1, records(txns[0]), compress=True)
    assert small[:1] == streamwire.BATCH  # nothing to gain: sent plain
    with pytest.raises(streamwire.BrokenStream):
        streamwire.FrameParser().feed(streamwire.COMPRESSED + struct.pack(">I", 8) + b"\0" * 8)


def test_a_client_asks_for_compression_only_when_told() -> None:
    assert wire.HEADER_COMPRESSION not in make_client(None).headers
    assert make_client(None, compression="lz4").headers[wire.HEADER_COMPRESSION] == "lz4"
    with pytest.raises(ValueError, match="compression must be one of"):
        make_client(None, compression="gzip")


def workload(n: int) -> Transaction:
    return txn(n, *(ins("orders", n * 100 + i) for i in range(5)))


def read_all(buffer: EventBuffer, url: str, upto: int, **kwargs: Any) -> list[Transaction]:
    got: list[Transaction] = []
    with Subscriber(url, tables="shop.orders", wait_ms=100, **kwargs) as sub:
        deadline = time.monotonic() + 20
        while sub.position < scn(upto) and time.monotonic() < deadline:
            batch = sub.get(timeout=5)
            got += batch.transactions
            sub.ack(batch)
    return got


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "pull"])
def test_subscribers_get_the_same_transactions_with_fewer_bytes_sent(
    buffer: EventBuffer, stream: bool
) -> None:
    store(buffer, *(workload(n) for n in range(1, 200)))
    deps = ApiDeps(buffer=buffer)
    server = serve(deps)
    try:
        plain = read_all(buffer, server.url, 199, stream=stream)
        assert deps.metrics.compression == (0, 0)  # nobody asked
        packed = read_all(buffer, server.url, 199, stream=stream, compression="lz4")
        assert packed == plain and len(plain) == 199
        raw, sent = deps.metrics.compression
        assert 0 < sent < raw / 2  # row changes of one table compress well
        scrape = httpx.get(server.url + wire.PATH_METRICS).text
        assert f"drc_api_compression_input_bytes_total {raw}" in scrape
    finally:
        server.stop()


def test_a_server_that_does_not_compress_is_read_plain(buffer: EventBuffer) -> None:
    # An older server ignores the header and says nothing: the answer is read as it is.
    body = records(*(workload(n) for n in range(1, 5)))
    headers = {
        "content-type": wire.MEDIA_RECORDS,
        wire.HEADER_EPOCH: "e",
        wire.HEADER_NEXT: str(scn(4)),
        wire.HEADER_NEWEST: str(scn(4)),
        wire.HEADER_COUNT: "4",
    }

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers[wire.HEADER_COMPRESSION] == "lz4"
        return httpx.Response(200, headers=headers, content=body)

    with Subscriber(
        "http://old:1", wait_ms=0, compression="lz4", transport=httpx.MockTransport(answer)
    ) as sub:
        assert [t.scn for t in sub.get(timeout=5).transactions] == [scn(n) for n in range(1, 5)]
