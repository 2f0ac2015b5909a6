"""Copy a replicator's segments (``GET /v1/segments``) and read the copies: bulk catch-up's input.

    with SegmentSource("https://dc1-a:8640", token=token, ca="ca.pem") as source:
        listing = source.list(after=checkpoint, to=end)
        for info in listing.segments:
            path = source.download(info, workdir, listing.epoch)   # checked before returned
            for txn in read_segment(path, listing.epoch, info.seq, after=checkpoint):
                ...

A download goes to ``NAME.part`` and asks for exactly the listed bytes with ``Range``; a
broken connection resumes from the bytes already there, and the whole file's SHA-256 is
compared with the listed one before the file is renamed to ``NAME`` and returned, so no byte
of a corrupt or short copy is ever read. A mismatch discards the copy and starts again; after
``attempts`` failures :class:`SegmentDownloadError` names the segment and the last failure.
Attempts are spaced by :data:`BACKOFF` (drc.core.retry), each retry logged.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from drc.api import pullquery, wire
from drc.client import http
from drc.client.errors import (
    BufferRebuiltError,
    PositionTooOldError,
    ProtocolError,
    SegmentDownloadError,
)
from drc.core.codec import decode_transaction
from drc.core.errors import MalformedScnError
from drc.core.events import Transaction
from drc.core.retry import Backoff, GaveUp, Policy, Retrying, retry
from drc.core.scn import SCN
from drc.eventbuffer.export import file_sha256, read_segment_file

DEFAULT_ATTEMPTS = 5
BACKOFF = Backoff(0.5, 10.0)  # between attempts of one download
READ_TIMEOUT_S = 60.0
log = logging.getLogger("drc.client")
_NAME = re.compile(r"[0-9]{20}\.seg", re.ASCII)  # also keeps a listed name inside the directory


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One listed segment: ``size`` bytes served with SHA-256 ``sha256`` (see drc.api.segments)."""

    name: str
    seq: int
    prev_scn: SCN
    first_scn: SCN | None
    last_scn: SCN | None
    records: int
    size: int
    sha256: str
    sealed: bool


@dataclass(frozen=True, slots=True)
class SegmentList:
    url: str
    epoch: str
    oldest_servable: SCN
    last_scn: SCN | None
    segments: tuple[SegmentInfo, ...]


class _Corrupt(Exception):
    """A complete copy whose SHA-256 is not the listed one: discarded, downloaded again."""


class SegmentSource:
    """The segments of one replicator API. ``sleep`` replaces time.sleep between attempts;
    ``transport``/``verify``/``ca``/``cert``/``key`` as for :class:`drc.client.Subscriber`."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        attempts: int = DEFAULT_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
        verify: Any = True,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {attempts}")
        self.url = url.rstrip("/")
        self._token = token
        self._attempts = attempts
        self._sleep = sleep
        self._client = http.make_client(token, transport, http.tls_verify(verify, ca, cert, key))
        self._timeout = httpx.Timeout(http.CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S)

    def list(self, after: SCN | None = None, to: SCN | None = None) -> SegmentList:
        """The segments holding records after ``after`` (up to ``to``).

        Raises PositionTooOldError when retention deleted records after ``after``, and what
        :func:`drc.client.http.send` raises (Transient: the caller retries or asks elsewhere).
        """
        params = {k: str(v) for k, v in ((pullquery.PARAM_AFTER, after), (wire.PARAM_TO, to)) if v}
        target = self.url + wire.PATH_SEGMENTS
        try:
            response = http.send(
                self._client, target, params, wire.MEDIA_JSON, self._timeout, self._token
            )
        except http.TooOld as exc:
            raise PositionTooOldError(str(exc), exc.oldest, after or SCN.ZERO) from exc
        try:
            return _listing(self.url, response.json())
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"{target} answered with a malformed listing: {exc}") from exc

    def download(self, info: SegmentInfo, directory: Path, epoch: str) -> Path:
        """``directory/NAME``: the listed bytes of the segment, checksum verified."""
        final = directory / info.name
        part = directory / (info.name + ".part")
        policy = Policy(BACKOFF, (http.Transient, _Corrupt), attempts=self._attempts)

        def note(retrying: Retrying) -> None:
            log.warning(
                "segment %s from %s: %s; attempt %d of %d in %.1fs",
                info.name,
                self.url,
                retrying.error,
                retrying.failures + 1,
                self._attempts,
                retrying.delay,
            )

        try:
            copy = partial(self._copy, info, part, epoch)
            retry(copy, policy, sleep=self._sleep, on_retry=note)
        except GaveUp as exc:
            raise SegmentDownloadError(
                f"segment {info.name} from {self.url}: no intact copy after {self._attempts} "
                f"attempts; last failure: {exc.last}. Nothing of it was used; try again or "
                "another replicator of the datacenter",
                info.name,
                self.url,
            ) from exc.last
        os.replace(part, final)
        return final

    def _copy(self, info: SegmentInfo, part: Path, epoch: str) -> None:
        """Complete ``part`` and check it; the bytes received stay after a Transient failure
        (the next attempt resumes), a copy that fails its checksum is deleted (_Corrupt)."""
        self._fetch(info, part, epoch)
        digest = file_sha256(part)
        if digest != info.sha256:
            part.unlink()
            raise _Corrupt(f"SHA-256 {digest} is not the listed {info.sha256}")

    def _fetch(self, info: SegmentInfo, part: Path, epoch: str) -> None:
        """Append the missing bytes of the segment to ``part``; Transient when short."""
        have = part.stat().st_size if part.exists() else 0
        if have > info.size:
            part.unlink()
            have = 0
        if have == info.size:
            return
        target = f"{self.url}{wire.PATH_SEGMENTS}/{info.name}"
        headers = {"Accept": wire.MEDIA_SEGMENT, "Range": f"bytes={have}-{info.size - 1}"}
        try:
            with self._client.stream("GET", target, headers=headers, timeout=self._timeout) as r:
                if not r.is_success:
                    r.read()
                    raise self._refused(r, target, info)
                if r.headers.get(wire.HEADER_EPOCH) != epoch:
                    raise BufferRebuiltError(
                        f"{target}: the buffer's epoch is not {epoch} any more (it was rebuilt); "
                        "list the segments again",
                        self.url,
                        epoch,
                        r.headers.get(wire.HEADER_EPOCH),
                        info.prev_scn,
                    )
                have = _resume_at(r, have)
                _append(r, part, have, info.size)
        except httpx.HTTPError as exc:
            raise http.failure(exc, target, self._token) from exc
        got = part.stat().st_size
        if got < info.size:
            raise http.Transient(f"{target}: the body ended after {got} of {info.size} bytes")

    def _refused(self, response: httpx.Response, target: str, info: SegmentInfo) -> Exception:
        error = http.status_error(response, target, self._token)
        if isinstance(error, http.TooOld):
            return PositionTooOldError(str(error), error.oldest, info.prev_scn)
        return error

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SegmentSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _resume_at(response: httpx.Response, have: int) -> int:
    """Where the body starts: ``have`` for the 206 asked for, 0 when the server sent it all."""
    if response.status_code != 206:
        return 0
    first = response.headers.get("content-range", "").removeprefix("bytes ").split("-")[0]
    if first != str(have):
        raise ProtocolError(f"asked for bytes from {have}, got Content-Range {first!r}")
    return have


def _append(response: httpx.Response, part: Path, start: int, size: int) -> None:
    with open(part, "r+b" if start else "wb") as out:
        out.truncate(start)
        out.seek(start)
        written = start
        for chunk in response.iter_bytes():  # as received: a break keeps all that came
            if written + len(chunk) > size:
                raise http.Transient(f"the server sent more than the {size} bytes listed")
            out.write(chunk)
            written += len(chunk)


def _listing(url: str, body: Any) -> SegmentList:
    try:
        return SegmentList(
            url=url,
            epoch=str(body["epoch"]),
            oldest_servable=SCN.parse(body["oldest_servable"]),
            last_scn=_maybe_scn(body["last_scn"]),
            segments=tuple(_info(item) for item in body["segments"]),
        )
    except MalformedScnError as exc:
        raise ValueError(str(exc)) from exc


def _info(item: dict[str, Any]) -> SegmentInfo:
    name = str(item["name"])
    if not _NAME.fullmatch(name):
        raise ValueError(f"segment name {name!r} is not a segment file name")
    return SegmentInfo(
        name=name,
        seq=int(item["seq"]),
        prev_scn=SCN.parse(item["prev_scn"]),
        first_scn=_maybe_scn(item["first_scn"]),
        last_scn=_maybe_scn(item["last_scn"]),
        records=int(item["records"]),
        size=int(item["size"]),
        sha256=str(item["sha256"]),
        sealed=bool(item["sealed"]),
    )


def _maybe_scn(text: Any) -> SCN | None:
    return None if text is None else SCN.parse(text)


def read_segment(
    path: Path, epoch: str, seq: int, after: SCN | None = None
) -> Iterator[Transaction]:
    """The transactions (fragments, as stored) of a downloaded segment, those after ``after``.

    Checked like the buffer's own segments (drc.eventbuffer.export.read_segment_file):
    CorruptRecordError names the file and offset. Fragments of a transaction that continues in
    the next segment come first from this one, then from that one; ``drc.client.assemble``
    joins them.
    """
    for record in read_segment_file(path, epoch, seq, after):
        txn, _ = decode_transaction(record.payload, 0)
        yield txn
