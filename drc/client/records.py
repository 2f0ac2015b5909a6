"""Raw pulls for replicator group members: records exactly as stored, and schema history.

A follower (drc.replicator.follower) copies another member's buffer byte for byte, so it needs
each record's bytes, not decoded transactions: :func:`pull_raw` returns them with the term the
serving member names (``X-DRC-Term``), and :class:`RawStreams` the same off a stream.
:func:`pull_history` reads ``/v1/history``, :func:`last_scn` how far a member's buffer goes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx

from drc.api import pullquery, wire
from drc.client import http
from drc.client.errors import ProtocolError
from drc.client.stream import StreamSource
from drc.core.codec import decode_transaction
from drc.core.errors import CorruptRecordError, MalformedScnError
from drc.core.events import Transaction
from drc.core.scn import SCN

HISTORY_TIMEOUT = httpx.Timeout(10.0)
MAX_EVENTS = 5000
STATUS_READ_S = 5.0


@dataclass(frozen=True)
class RawRecord:
    scn: SCN
    payload: bytes
    timestamp_ms: int
    more: bool  # another fragment of the same transaction follows


@dataclass(frozen=True)
class RawPage:
    records: tuple[RawRecord, ...]
    term: int | None  # the serving member's buffer term; None without a group
    newest: SCN | None


def pull_raw(
    client: httpx.Client,
    url: str,
    after: SCN,
    wait_ms: int,
    token: str | None,
    max_events: int = MAX_EVENTS,
    max_bytes: int = 16 << 20,
) -> RawPage:
    """Every stored record after ``after`` (no filter), split but not re-encoded.

    Raises what :func:`drc.client.http.send` raises (Transient, TooOld, ...)."""
    params = {
        pullquery.PARAM_AFTER: str(after),
        pullquery.PARAM_MAX_EVENTS: str(max_events),
        pullquery.PARAM_MAX_BYTES: str(max_bytes),
        pullquery.PARAM_WAIT_MS: str(wait_ms),
        pullquery.PARAM_DRC_APPLIED: pullquery.DRC_APPLIED_MARKER,  # a copy keeps records as stored
    }
    timeout = http.read_timeout(wait_ms)
    response = http.send(client, url + wire.PATH_EVENTS, params, wire.MEDIA_RECORDS, timeout, token)
    body = response.content
    records = []
    offset = 0
    try:
        while offset < len(body):
            txn, end = decode_transaction(body, offset)
            records.append(_raw(txn, body[offset:end]))
            offset = end
        newest_text = response.headers.get(wire.HEADER_NEWEST) or None
        newest = SCN.parse(newest_text) if newest_text else None
        term_text = response.headers.get(wire.HEADER_TERM)
        term = int(term_text) if term_text else None
    except (CorruptRecordError, MalformedScnError, ValueError) as exc:
        raise ProtocolError(f"{url} answered with a malformed records page: {exc}") from exc
    return RawPage(tuple(records), term, newest)


def _raw(txn: Transaction, record: bytes) -> RawRecord:
    return RawRecord(txn.scn, bytes(record), txn.timestamp * 1000, not txn.last_fragment)


class RawStreams:
    """:func:`pull_raw`'s pages off ``GET /v1/stream`` (drc.client.stream), one stream open
    at a time: a follower that keeps up then costs its leader no request per batch. Pulls
    without waiting (``wait_ms=-1``), and from a URL without streams (404), are
    :func:`pull_raw`'s. The term is the one the stream opened under: a member whose term or
    role changes ends its streams, and the next page opens a new one."""

    def __init__(self, client: httpx.Client, token: str | None, max_bytes: int = 16 << 20):
        self._client = client
        self._token = token
        self._source = StreamSource(MAX_EVENTS, max_bytes)

    def page(
        self, url: str, after: SCN, wait_ms: int, cancelled: Callable[[], bool] = lambda: False
    ) -> RawPage:
        """The records after ``after``; raises what :func:`pull_raw` raises, and Transient
        once ``cancelled()`` while waiting on the stream."""
        if wait_ms == pullquery.WAIT_NONE or url in self._source.unsupported:
            return pull_raw(self._client, url, after, wait_ms, self._token)
        params = {
            pullquery.PARAM_AFTER: str(after),
            pullquery.PARAM_MAX_EVENTS: str(MAX_EVENTS),
            pullquery.PARAM_MAX_BYTES: str(self._source.max_bytes),
            pullquery.PARAM_WAIT_MS: str(wait_ms),
            pullquery.PARAM_DRC_APPLIED: pullquery.DRC_APPLIED_MARKER,
        }
        timeout = http.stream_timeout(wait_ms)
        opener = partial(http.open_stream, self._client, url, params, timeout, self._token)
        try:
            got = self._source.frames(url, after, opener, cancelled)
        except http.NoStream:
            self._source.unsupported[url] = 0.0  # for good: a follower restarts with its server
            return pull_raw(self._client, url, after, wait_ms, self._token)
        if got is None:
            raise http.Transient(f"stopped reading {url}: cancelled")
        stream, frames = got
        records = [
            _raw(txn, frame.records[start:end])
            for frame in frames
            for txn, start, end in zip(
                frame.transactions, (0, *frame.ends), frame.ends, strict=False
            )
        ]
        return RawPage(tuple(records), stream.term, frames[-1].newest)

    def interrupt(self, why: str) -> None:
        """Hang up the open stream and any request under way, from any thread."""
        self._source.interrupt(why)
        http.abort_requests(self._client)

    def close(self) -> None:
        self._source.close()


def pull_history(
    client: httpx.Client, url: str, after: SCN, upto: SCN, token: str | None
) -> list[dict[str, Any]]:
    """The schema history entries at SCNs in (after, upto], as the member stores them."""
    params = {"after": str(after), "upto": str(upto)}
    response = http.send(
        client, url + wire.PATH_HISTORY, params, wire.MEDIA_JSON, HISTORY_TIMEOUT, token
    )
    try:
        entries = response.json()["entries"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"{url} sent a malformed history answer: {exc}") from exc
    if not isinstance(entries, list):
        raise ProtocolError(f"{url} sent a malformed history answer: entries is not a list")
    return entries


def last_scn(client: httpx.Client, url: str, token: str | None) -> SCN | None:
    """The last SCN the replicator at ``url`` holds (None: its buffer is empty), from its
    status; raises what :func:`drc.client.http.send` raises, or ProtocolError."""
    timeout = httpx.Timeout(http.CONNECT_TIMEOUT_S, read=STATUS_READ_S)
    answer = http.send(client, url + wire.PATH_STATUS, {}, wire.MEDIA_JSON, timeout, token)
    try:
        last = answer.json()["buffer"]["last_scn"]
        return None if last is None else SCN.parse(last)
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"{url} answered a status without its buffer's last SCN") from exc
