"""Segments for catch-up executors: the listing and download API over a real EventBuffer, and
the SDK's checked, resuming download through a transport that corrupts and cuts bodies."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.ranges import Unsatisfiable, parse_range
from drc.client import assemble
from drc.client.errors import PositionTooOldError, SegmentDownloadError
from drc.client.segments import SegmentSource, read_segment
from drc.core.codec import encode_transaction
from drc.core.errors import CorruptRecordError
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.export import read_segment_file
from tests.support.api import TestClient, ins, scn, txn

TOKEN = "segment-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
URL = "http://testserver"


def store(buffer: EventBuffer, *txns: Transaction, commit: bool = True) -> None:
    for t in txns:
        buffer.append(t.scn, encode_transaction(t), t.timestamp * 1000, not t.last_fragment)
    if commit:
        buffer.commit()


def stream(first: int, count: int) -> list[Transaction]:
    return [txn(n, ins("orders", n), ins("items", n)) for n in range(first, first + count)]


@pytest.fixture
def buffer(tmp_path: Path) -> Iterator[EventBuffer]:
    # Small segments: a few transactions each, so the stream spans several.
    with EventBuffer.open(tmp_path / "buf", segment_bytes=512) as buf:
        store(buf, *stream(1, 12))
        yield buf


@pytest.fixture
def app_client(buffer: EventBuffer) -> TestClient:
    return TestClient(create_app(ApiDeps(buffer=buffer, tokens=(TOKEN,))))


def listing(client: TestClient, **params: str) -> dict[str, Any]:
    response = client.get(wire.PATH_SEGMENTS, params=params, headers=AUTH)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_the_listing_covers_every_record_once_in_order(
    app_client: TestClient, buffer: EventBuffer
) -> None:
    body = listing(app_client)
    segments = body["segments"]
    assert len(segments) > 2
    assert body["epoch"] == buffer.epoch and body["last_scn"] == str(scn(12))
    assert [s["seq"] for s in segments] == sorted(s["seq"] for s in segments)
    assert sum(s["records"] for s in segments) == 12
    for before, after in zip(segments, segments[1:], strict=False):
        assert after["prev_scn"] == before["last_scn"]
    assert [s["sealed"] for s in segments] == [True] * (len(segments) - 1) + [False]
    for s in segments:
        data = Path(buffer.directory / s["name"]).read_bytes()[: s["size"]]
        assert hashlib.sha256(data).hexdigest() == s["sha256"]


def test_the_active_segment_is_served_only_up_to_its_last_committed_record(
    tmp_path: Path,
) -> None:
    buffer = EventBuffer.open(tmp_path / "big")
    app_client = TestClient(create_app(ApiDeps(buffer=buffer)))
    store(buffer, *stream(1, 12))
    store(buffer, txn(13, ins("orders", 13)), commit=False)  # appended, not committed
    store(buffer, txn(14, ins("orders", 14), last=False), commit=True)  # an unfinished txn
    active = listing(app_client)["segments"][-1]
    assert active["last_scn"] == str(scn(13))
    whole = app_client.get(f"{wire.PATH_SEGMENTS}/{active['name']}")
    assert whole.status_code == 200 and len(whole.content) == active["size"]
    assert hashlib.sha256(whole.content).hexdigest() == active["sha256"]
    assert (buffer.directory / active["name"]).stat().st_size > active["size"]
    buffer.close()


def test_after_and_to_list_only_the_segments_holding_that_range(app_client: TestClient) -> None:
    every = listing(app_client)["segments"]
    some = listing(app_client, after=every[1]["last_scn"], to=every[2]["last_scn"])["segments"]
    assert [s["name"] for s in some] == [every[2]["name"]]


def test_a_listing_after_what_retention_deleted_is_410(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "b", segment_bytes=512, retain_bytes=1024) as buf:
        store(buf, *stream(1, 12))
        client = TestClient(create_app(ApiDeps(buffer=buf)))
        response = client.get(wire.PATH_SEGMENTS, params={"after": "0:0:0:0"})
        assert response.status_code == 410
        assert response.json()["oldest"] == str(buf.oldest_servable)


@pytest.mark.parametrize(
    "params", [{"after": "1:2"}, {"nope": "1"}, {"after": "0:0:0:5", "to": "0:0:0:1"}]
)
def test_bad_listing_parameters_are_400(app_client: TestClient, params: dict[str, str]) -> None:
    response = app_client.get(wire.PATH_SEGMENTS, params=params, headers=AUTH)
    assert response.status_code == 400 and response.json()["error"] == wire.ERROR_BAD_REQUEST


def test_segments_need_the_token(app_client: TestClient) -> None:
    assert app_client.get(wire.PATH_SEGMENTS).status_code == 401
    assert app_client.get(f"{wire.PATH_SEGMENTS}/{0:020d}.seg").status_code == 401


def test_a_range_gets_206_with_exactly_those_bytes(app_client: TestClient) -> None:
    first = listing(app_client)["segments"][0]
    path = f"{wire.PATH_SEGMENTS}/{first['name']}"
    whole = app_client.get(path, headers=AUTH).content
    part = app_client.get(path, headers={**AUTH, "Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == whole[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{first['size']}"
    tail = app_client.get(path, headers={**AUTH, "Range": "bytes=-10"})
    assert tail.content == whole[-10:]
    past = app_client.get(path, headers={**AUTH, "Range": f"bytes={first['size']}-"})
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{first['size']}"


def test_unknown_malformed_and_deleted_segment_names(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "b", segment_bytes=512, retain_bytes=1024) as buf:
        store(buf, *stream(1, 12))
        client = TestClient(create_app(ApiDeps(buffer=buf)))
        oldest = buf.segments()[0].seq
        assert oldest > 0
        assert client.get(f"{wire.PATH_SEGMENTS}/{0:020d}.seg").status_code == 410
        assert client.get(f"{wire.PATH_SEGMENTS}/{oldest + 99:020d}.seg").status_code == 404
        assert client.get(f"{wire.PATH_SEGMENTS}/..%2Fbuffer.json").status_code in (400, 404)
        assert client.get(f"{wire.PATH_SEGMENTS}/{'9' * 300}.seg").status_code == 400
        refused = client.get(
            f"{wire.PATH_SEGMENTS}/{oldest:020d}.seg", headers={"Accept": "text/html"}
        )
        assert refused.status_code == 406


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 10, None),
        ("bytes=0-", 10, (0, 10)),
        ("bytes=2-4", 10, (2, 5)),
        ("bytes=2-400", 10, (2, 10)),
        ("bytes=-3", 10, (7, 10)),
        ("bytes=-30", 10, (0, 10)),
        ("bytes=5-2", 10, None),
        ("bytes=0-1,4-5", 10, None),
        ("items=0-1", 10, None),
        ("bytes=" + "1" * 200 + "-", 10, None),
    ],
)
def test_range_headers(header: str | None, size: int, expected: tuple[int, int] | None) -> None:
    assert parse_range(header, size) == expected


@pytest.mark.parametrize("header", ["bytes=10-", "bytes=-0"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(Unsatisfiable):
        parse_range(header, 10)


# -- the SDK ---------------------------------------------------------------------------------


class Faulty(httpx.BaseTransport):
    """Forwards to the app; ``faults`` are applied, one per download request, in order."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.faults: list[Callable[[bytes], bytes | None]] = []
        self.ranges: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.client.request(request.method, str(request.url), headers=request.headers)
        headers = {k: v for k, v in answer.headers.items() if k != "content-length"}
        body = answer.content
        if request.url.path.startswith(wire.PATH_SEGMENTS + "/"):
            self.ranges.append(request.headers.get("range"))
            if self.faults:
                changed = self.faults.pop(0)(body)
                if changed is None:  # the connection drops half way through the body
                    return httpx.Response(answer.status_code, headers=headers, stream=Cut(body))
                body = changed
        return httpx.Response(answer.status_code, headers=headers, content=body)


class Cut(httpx.SyncByteStream):
    def __init__(self, body: bytes) -> None:
        self.body = body

    def __iter__(self) -> Iterator[bytes]:
        yield self.body[: len(self.body) // 2]
        raise httpx.ReadError("connection reset by peer")


def flip(body: bytes) -> bytes:
    return body[:70] + bytes([body[70] ^ 0x10]) + body[71:]


@pytest.fixture
def faulty(app_client: TestClient) -> Faulty:
    return Faulty(app_client)


@pytest.fixture
def source(faulty: Faulty) -> Iterator[SegmentSource]:
    sleeps: list[float] = []
    with SegmentSource(URL, token=TOKEN, transport=faulty, sleep=sleeps.append) as src:
        yield src


def test_downloaded_segments_read_back_as_the_stream(source: SegmentSource, tmp_path: Path) -> None:
    segments = source.list()
    txns: list[Transaction] = []
    for info in segments.segments:
        path = source.download(info, tmp_path, segments.epoch)
        txns.extend(read_segment(path, segments.epoch, info.seq))
    assert [t.scn for t in assemble(txns)] == [scn(n) for n in range(1, 13)]
    assert txns == stream(1, 12)


def test_a_corrupt_download_is_retried_and_never_kept(
    source: SegmentSource, faulty: Faulty, tmp_path: Path
) -> None:
    segments = source.list()
    info = segments.segments[0]
    faulty.faults = [flip, flip]
    path = source.download(info, tmp_path, segments.epoch)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == info.sha256
    assert faulty.ranges == [f"bytes=0-{info.size - 1}"] * 3
    assert not (tmp_path / (info.name + ".part")).exists()


def test_a_download_that_stays_corrupt_fails_naming_the_segment(
    source: SegmentSource, faulty: Faulty, tmp_path: Path
) -> None:
    segments = source.list()
    info = segments.segments[0]
    faulty.faults = [flip] * 5
    (tmp_path / "copies").mkdir()
    with pytest.raises(SegmentDownloadError, match=info.name) as caught:
        source.download(info, tmp_path / "copies", segments.epoch)
    assert "SHA-256" in str(caught.value)
    assert list((tmp_path / "copies").iterdir()) == []


def test_download_attempts_are_spaced_by_a_doubling_backoff(faulty: Faulty, tmp_path: Path) -> None:
    sleeps: list[float] = []
    with SegmentSource(URL, token=TOKEN, transport=faulty, sleep=sleeps.append) as src:
        segments = src.list()
        faulty.faults = [flip] * 5
        with pytest.raises(SegmentDownloadError, match="after 5 attempts"):
            src.download(segments.segments[0], tmp_path, segments.epoch)
    assert sleeps == [0.5, 1.0, 2.0, 4.0]


def test_a_truncated_download_resumes_where_it_stopped(
    source: SegmentSource, faulty: Faulty, tmp_path: Path
) -> None:
    segments = source.list()
    info = segments.segments[1]
    faulty.faults = [lambda body: None]
    path = source.download(info, tmp_path, segments.epoch)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == info.sha256
    half = info.size // 2
    assert faulty.ranges == [f"bytes=0-{info.size - 1}", f"bytes={half}-{info.size - 1}"]


def test_the_active_segment_downloads_as_listed_while_the_buffer_grows(
    source: SegmentSource, buffer: EventBuffer, tmp_path: Path
) -> None:
    segments = source.list()
    active = segments.segments[-1]
    store(buffer, txn(13, ins("orders", 13)))  # committed after the listing
    path = source.download(active, tmp_path, segments.epoch)
    assert [t.scn for t in read_segment(path, segments.epoch, active.seq)][-1] == scn(12)


def test_listing_after_a_deleted_range_is_position_too_old(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "b", segment_bytes=512, retain_bytes=1024) as buf:
        store(buf, *stream(1, 12))
        transport = Faulty(TestClient(create_app(ApiDeps(buffer=buf))))
        with SegmentSource(URL, transport=transport) as src:
            with pytest.raises(PositionTooOldError) as caught:
                src.list(after=SCN.ZERO)
        assert caught.value.oldest == buf.oldest_servable


def test_reading_a_damaged_copy_names_the_file_and_offset(
    source: SegmentSource, tmp_path: Path
) -> None:
    segments = source.list()
    info = segments.segments[0]
    path = source.download(info, tmp_path, segments.epoch)
    path.write_bytes(flip(path.read_bytes()))
    with pytest.raises(CorruptRecordError, match=f"{info.name} offset 64"):
        list(read_segment_file(path, segments.epoch, info.seq))
    with pytest.raises(ValueError, match="another buffer|epoch"):
        list(read_segment_file(path, "0" * 32, info.seq))


def test_reading_after_an_scn_skips_what_is_not_after_it(
    source: SegmentSource, tmp_path: Path
) -> None:
    segments = source.list()
    info = segments.segments[0]
    path = source.download(info, tmp_path, segments.epoch)
    every = list(read_segment(path, segments.epoch, info.seq))
    later = list(read_segment(path, segments.epoch, info.seq, after=every[0].scn))
    assert later == every[1:]
