"""Raw pulls for replicator group members: records exactly as stored, and schema history.

A follower (drc.replicator.follower) copies another member's buffer byte for byte, so it needs
each record's bytes, not decoded transactions: :func:`pull_raw` returns them with the term the
serving member names (``X-DRC-Term``). :func:`pull_history` reads ``/v1/history``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from drc.api import wire
from drc.client import http
from drc.client.errors import ProtocolError
from drc.core.codec import decode_transaction
from drc.core.errors import CorruptRecordError, MalformedScnError
from drc.core.scn import SCN

HISTORY_TIMEOUT = httpx.Timeout(10.0)


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
    max_events: int = 5000,
    max_bytes: int = 16 << 20,
) -> RawPage:
    """Every stored record after ``after`` (no filter), split but not re-encoded.

    Raises what :func:`drc.client.http.send` raises (Transient, TooOld, ...)."""
    params = {
        wire.PARAM_AFTER: str(after),
        wire.PARAM_MAX_EVENTS: str(max_events),
        wire.PARAM_MAX_BYTES: str(max_bytes),
        wire.PARAM_WAIT_MS: str(wait_ms),
        wire.PARAM_DRC_APPLIED: wire.DRC_APPLIED_MARKER,  # a copy keeps records as stored
    }
    timeout = http.read_timeout(wait_ms)
    response = http.send(client, url + wire.PATH_EVENTS, params, wire.MEDIA_RECORDS, timeout, token)
    body = response.content
    records = []
    offset = 0
    try:
        while offset < len(body):
            txn, end = decode_transaction(body, offset)
            more = not txn.last_fragment
            records.append(RawRecord(txn.scn, bytes(body[offset:end]), txn.timestamp * 1000, more))
            offset = end
        newest_text = response.headers.get(wire.HEADER_NEWEST) or None
        newest = SCN.parse(newest_text) if newest_text else None
        term_text = response.headers.get(wire.HEADER_TERM)
        term = int(term_text) if term_text else None
    except (CorruptRecordError, MalformedScnError, ValueError) as exc:
        raise ProtocolError(f"{url} answered with a malformed records page: {exc}") from exc
    return RawPage(tuple(records), term, newest)


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
