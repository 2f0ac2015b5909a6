"""One HTTP exchange with the pull API, and what its answer means.

The only module of the SDK (with ``status``) that touches httpx. ``get_events`` sends one
``GET /v1/events`` and returns a :class:`Page`, or raises one of:

- :class:`Transient`: the network failed or the server said 5xx/429; another URL or a later
  attempt may succeed (the fetcher decides). :class:`Busy`, a Transient, is the server's
  long-poll limit (429/503 with Retry-After): pulls with ``wait_ms=-1`` are still served.
- :class:`EpochMismatch` (409) and :class:`TooOld` (410): the fetcher decides what they mean
  across URLs.
- ApiRequestError / ApiAuthError / ProtocolError: the same request will fail again anywhere.

The bearer token lives only in the httpx client's default headers (and its event pulls' own
connection pool, drc.client.lean); httpx masks Authorization in its own reprs, and no message
built here includes a header.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from drc import __version__
from drc.api import pullquery, streamwire, wire
from drc.api.lazyrecords import LAZY_BYTES, LazyTransactions
from drc.client.errors import ApiAuthError, ApiRequestError, ApiTlsError, ProtocolError
from drc.client.lean import LeanPool
from drc.core.errors import CorruptRecordError, MalformedScnError
from drc.core.events import Transaction
from drc.core.jsonwire import JsonWireError, transaction_from_json
from drc.core.scn import SCN
from drc.tls import https_context, tls_failure

CONNECT_TIMEOUT_S = 5.0
# A long poll may legitimately take wait_ms (or the server's cap when wait_ms=0) before answering.
FULL_WAIT_CAP_S = 60.0
READ_MARGIN_S = 30.0
# A pull's first margin past its wait: a silent link (blackhole, half-open) is noticed this
# soon. A server that needs longer to build a page gets twice the margin after each read
# timeout in a row, up to READ_MARGIN_S (PullTimeout), so it is still read.
PULL_MARGIN_S = 3.0
STREAM_SILENT_HEARTBEATS = 3
STREAM_MARGIN_S = 1.0
_MAX_SHOWN = 300
_BUSY_CODES = (wire.ERROR_TOO_MANY_LONG_POLLS, wire.ERROR_LONG_POLLS_FULL)
BUSY_DEFAULT_S = 1.0
BUSY_MAX_S = 30.0
_LEAN: weakref.WeakKeyDictionary[httpx.Client, LeanPool] = weakref.WeakKeyDictionary()


class Transient(Exception):
    """A failure another attempt may not see: connection error, timeout, 5xx or 429.
    ``retry_after_s``: the server's Retry-After, if it said one (0 if not)."""

    def __init__(self, message: str, retry_after_s: float = 0.0, timed_out: bool = False):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.timed_out = timed_out  # no answer within the read timeout (a silent server or link)


class Busy(Transient):
    """The server holds the most long polls it allows (for this token or in all); a pull with
    ``wait_ms=-1`` is still served. ``retry_after_s``: when to try a long poll again."""


class EpochMismatch(Exception):
    def __init__(self, current: str | None) -> None:
        super().__init__(f"epoch mismatch, server epoch {current}")
        self.current = current


class TooOld(Exception):
    def __init__(self, oldest: SCN | None, message: str) -> None:
        super().__init__(message)
        self.oldest = oldest


@dataclass(frozen=True, slots=True)
class Page:
    """One successful /v1/events answer."""

    epoch: str
    next: SCN
    newest: SCN | None
    transactions: Sequence[Transaction]  # decoded as read for a large page (drc.api.lazyrecords)
    # > 0: the page ends inside the transaction at ``next``, after its first ``within`` stored
    # records (a split page, drc.api.pullquery's ``split``); 0: after the whole of it.
    within: int = 0


def make_client(
    token: str | None,
    transport: httpx.BaseTransport | None = None,
    verify: Any = True,
    compression: str = "none",
) -> httpx.Client:
    """The SDK's client; its event pulls go through kept-alive connections of its own
    (drc.client.lean) where httpx would go straight to the network. ``compression`` "lz4"
    asks servers to compress records on the wire (drc.api.wire): for long, thin links."""
    if compression not in wire.COMPRESSIONS:
        raise ValueError(f"compression must be one of {wire.COMPRESSIONS}, got {compression!r}")
    headers = {"User-Agent": f"drc-client/{__version__}"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if compression != "none":
        headers[wire.HEADER_COMPRESSION] = compression
    client = httpx.Client(headers=headers, transport=transport, verify=verify)
    if LeanPool.usable(transport):
        _LEAN[client] = LeanPool(verify, headers)
    return client


def close_client(client: httpx.Client) -> None:
    pool = _LEAN.pop(client, None)
    if pool is not None:
        pool.close()
    client.close()


def tls_verify(
    verify: Any,
    ca: str | os.PathLike[str] | None,
    cert: str | os.PathLike[str] | None,
    key: str | os.PathLike[str] | None,
) -> Any:
    """httpx's ``verify`` for the SDK's TLS arguments (``verify`` alone passes through)."""
    if ca is None and cert is None and key is None:
        return verify
    if not isinstance(verify, bool):
        raise ValueError("give either verify=<SSLContext or path> or ca/cert/key, not both")
    return https_context(
        None if ca is None else Path(ca),
        None if cert is None else Path(cert),
        None if key is None else Path(key),
        verify,
    )


def read_timeout(wait_ms: int, margin_s: float = READ_MARGIN_S) -> httpx.Timeout:
    """Reads of a long poll: the server answers within its wait (``wait_ms``, or its cap for
    a full wait) plus the time to build the page, which ``margin_s`` allows."""
    wait_s = FULL_WAIT_CAP_S if wait_ms == pullquery.WAIT_FULL else max(wait_ms, 0) / 1000
    return httpx.Timeout(CONNECT_TIMEOUT_S, read=wait_s + margin_s)


class PullTimeout:
    """A reader's long polls' read timeout: ``wait_ms`` plus :data:`PULL_MARGIN_S`, so a silent
    link is noticed within seconds; doubled after each read timeout in a row (up to
    :data:`READ_MARGIN_S`), so a server slow to build a page is still waited for; back to the
    short margin after any answer."""

    def __init__(self, wait_ms: int) -> None:
        self._wait_ms = wait_ms
        self.margin_s = PULL_MARGIN_S

    @property
    def timeout(self) -> httpx.Timeout:
        return read_timeout(self._wait_ms, self.margin_s)

    def get_events(
        self,
        client: httpx.Client,
        url: str,
        params: dict[str, str],
        binary: bool,
        token: str | None,
    ) -> Page:
        """:func:`get_events` with this timeout, which it adjusts to the outcome."""
        try:
            page = get_events(client, url, params, binary, self.timeout, token)
        except Transient as exc:
            if exc.timed_out:
                self.margin_s = min(self.margin_s * 2, READ_MARGIN_S)
            raise
        self.margin_s = PULL_MARGIN_S
        return page


def get_events(
    client: httpx.Client,
    url: str,
    params: dict[str, str],
    binary: bool,
    timeout: httpx.Timeout,
    token: str | None,
) -> Page:
    accept = wire.MEDIA_RECORDS if binary else wire.MEDIA_JSON
    target = url + wire.PATH_EVENTS
    response = send(client, target, params, accept, timeout, token)
    return events_page(response, url)


def events_page(response: httpx.Response, url: str) -> Page:
    """The page an events answer (of /v1/events or a group range's pull) holds."""
    if response.headers.get("content-type", "").startswith(wire.MEDIA_RECORDS):
        return _records_page(response, url)
    return _json_page(_json(response, url), url)


class NoStream(Exception):
    """The server has no ``GET /v1/stream`` (404: an older server), or answered it with
    something else than a stream (a proxy, a fake): pull from it instead."""


@dataclass(frozen=True, slots=True)
class Opened:
    """A stream's 200 answer: its epoch and term headers, and its body as it arrives."""

    epoch: str
    term: int | None
    chunks: Iterator[bytes]
    close: Callable[[], None]


def stream_timeout(wait_ms: int) -> httpx.Timeout:
    """Reads of a stream: a frame or heartbeat comes at least every ``wait_ms`` (1 s by
    default; the server sends one between the batches it reads, filtered out or not), so a
    silent connection (a paused server, a half-open link) is given up after
    :data:`STREAM_SILENT_HEARTBEATS` heartbeats and a scheduling margin."""
    heartbeat_s = wait_ms / 1000 if wait_ms > 0 else 1.0
    read_s = STREAM_SILENT_HEARTBEATS * heartbeat_s + STREAM_MARGIN_S
    return httpx.Timeout(CONNECT_TIMEOUT_S, read=read_s)


def open_stream(
    client: httpx.Client,
    url: str,
    params: dict[str, str],
    timeout: httpx.Timeout,
    token: str | None,
) -> Opened:
    """Send ``GET /v1/stream``; the open answer, or raises like :func:`send`, or NoStream."""
    target = url + streamwire.PATH_STREAM
    response, chunks, close = _open(client, target, params, timeout, token)
    if response.status_code == 404:
        close()
        raise NoStream(f"{target}: 404")
    if not response.is_success:
        close()
        raise status_error(response, target, token)
    media = response.headers.get("content-type", "")
    try:
        if not media.startswith(streamwire.MEDIA_STREAM):
            raise NoStream(f"{target} answered {media!r}, not a stream")
        epoch = response.headers[wire.HEADER_EPOCH]
        term_text = response.headers.get(wire.HEADER_TERM)
        term = int(term_text) if term_text else None
    except (KeyError, ValueError) as exc:
        close()
        raise ProtocolError(f"{target} opened a stream without valid headers: {exc}") from exc
    except NoStream:
        close()
        raise
    return Opened(epoch, term, _failures(chunks, target, token), close)


def _open(
    client: httpx.Client,
    target: str,
    params: dict[str, str],
    timeout: httpx.Timeout,
    token: str | None,
) -> tuple[httpx.Response, Iterator[bytes], Callable[[], None]]:
    """The streamed answer (its body read already unless 2xx), its chunks, its closer: on a
    lean connection (drc.client.lean) where the client goes straight to the network."""
    pool = _LEAN.get(client)
    try:
        if pool is not None:
            return pool.open(target, params, streamwire.MEDIA_STREAM, timeout)
        headers = {"Accept": streamwire.MEDIA_STREAM}
        request = client.build_request("GET", target, params=params, headers=headers,
                                       timeout=timeout)  # fmt: skip
        response = client.send(request, stream=True)
        if not response.is_success:
            try:
                response.read()
            finally:
                response.close()
        return response, response.iter_raw(), response.close
    except httpx.HTTPError as exc:
        raise failure(exc, target, token) from exc


def _failures(chunks: Iterator[bytes], target: str, token: str | None) -> Iterator[bytes]:
    try:
        yield from chunks
    except httpx.HTTPError as exc:
        raise failure(exc, target, token) from exc


def send(
    client: httpx.Client,
    target: str,
    params: dict[str, str],
    accept: str,
    timeout: httpx.Timeout,
    token: str | None,
) -> httpx.Response:
    """GET ``target``; returns a 2xx response or raises by the classification above."""
    pool = _LEAN.get(client)
    if pool is None:
        return request(client, "GET", target, token, timeout, params=params, accept=accept)
    try:
        response = pool.get(target, params, accept, timeout)
    except httpx.HTTPError as exc:
        raise failure(exc, target, token) from exc
    if not response.is_success:
        raise status_error(response, target, token)
    return response


def abort_requests(client: httpx.Client) -> None:
    """Hang up the client's requests and streams under way, from any thread: their callers
    get a Transient at once. For a reader that learned the server it waits on is gone (its
    group elected another leader) before any timeout could tell."""
    pool = _LEAN.get(client)
    if pool is not None:
        pool.abort()


def request(
    client: httpx.Client,
    method: str,
    target: str,
    token: str | None,
    timeout: httpx.Timeout,
    *,
    params: dict[str, str] | None = None,
    accept: str = wire.MEDIA_JSON,
    json_body: Any = None,
) -> httpx.Response:
    """One request; a 2xx response or an error raised by the classification above."""
    try:
        response = client.request(
            method, target, params=params, json=json_body, headers={"Accept": accept},
            timeout=timeout,
        )  # fmt: skip
    except httpx.HTTPError as exc:
        raise failure(exc, target, token) from exc
    if response.is_success:
        return response
    raise status_error(response, target, token)


def failure(exc: httpx.HTTPError, target: str, token: str | None) -> Exception:
    """What an httpx error sending to or reading from ``target`` means (module docstring)."""
    if isinstance(exc, httpx.TransportError):  # connect, read, protocol errors and timeouts
        refused = tls_failure(exc)
        if refused is not None:
            return ApiTlsError(
                f"{target}: HTTPS refused: {refused}; trust the CA that signed the server's "
                "certificate (a channel's tls_ca, --ca, or ca= of the SDK)",
                target,
            )
        timed_out = isinstance(exc, httpx.ReadTimeout)
        return Transient(redact(f"{type(exc).__name__}: {exc}", token), timed_out=timed_out)
    # An undecodable body, a redirect loop: retrying will not help.
    return ProtocolError(redact(f"{target}: {type(exc).__name__}: {exc}", token))


def status_error(response: httpx.Response, target: str, token: str | None) -> Exception:
    status = response.status_code
    body = _error_body(response)
    code = str(body.get("error", "")) or f"http_{status}"
    message = redact(str(body.get("message", "")) or response.reason_phrase, token)
    if code in _BUSY_CODES and status in (429, 503):
        return Busy(f"HTTP {status} {code}: {message}", _retry_after(response, body))
    if status >= 500 or status == 429:
        # e.g. 503 reader_memory_full: the server's readers hold its reader memory budget
        later = _retry_after(response, body) if "retry-after" in response.headers else 0.0
        return Transient(f"HTTP {status} {code}: {message}", later)
    if status == 409 and code == wire.ERROR_EPOCH_MISMATCH:
        return EpochMismatch(str(body["epoch"]) if body.get("epoch") else None)
    if status == 410 and code == wire.ERROR_SCN_TOO_OLD:
        return TooOld(_maybe_scn(body.get("oldest")), message)
    text = f"{target} refused the request: HTTP {status} {code}: {message}"
    if status in (401, 403):
        hint = "pass the bearer token the server's [api] tokens list (--token or DRC_TOKEN)"
        return ApiAuthError(f"{text}; {hint}", target, status, code, message)
    return ApiRequestError(text, target, status, code, message)


def _retry_after(response: httpx.Response, body: dict[str, Any]) -> float:
    """Retry-After in seconds (an HTTP date counts as the default), within 0..BUSY_MAX_S."""
    for value in (response.headers.get("retry-after"), body.get("retry_after_s")):
        try:
            return min(max(float(value), 0.0), BUSY_MAX_S)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
    return BUSY_DEFAULT_S


def _error_body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {"message": response.text[:_MAX_SHOWN]}
    return body if isinstance(body, dict) else {}


def _json(response: httpx.Response, url: str) -> Any:
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{url} answered with a body that is not JSON: {exc}") from exc


def _json_page(data: Any, url: str) -> Page:
    try:
        txns = tuple(transaction_from_json(item) for item in data["transactions"])
        return Page(
            epoch=str(data["epoch"]),
            next=SCN.parse(data["next"]),
            newest=_maybe_scn(data.get("newest")),
            transactions=txns,
            within=_within(data.get("next_within")),
        )
    except (KeyError, TypeError, ValueError, JsonWireError, MalformedScnError) as exc:
        raise ProtocolError(f"{url} answered with a malformed events page: {exc}") from exc


def _records_page(response: httpx.Response, url: str) -> Page:
    headers = response.headers
    try:
        body = response.content
        if headers.get(wire.HEADER_COMPRESSION, "").lower() == wire.COMPRESSION_LZ4:
            body = wire.decompress_body(body)
        cut = _within(headers.get(wire.HEADER_NEXT_WITHIN))
        txns = (  # a large page, or a large transaction's, decoded as read (lazyrecords)
            LazyTransactions.of(bytes(body))[0]
            if cut or len(body) > LAZY_BYTES
            else tuple(wire.split_records(body))
        )
        page = Page(
            epoch=headers[wire.HEADER_EPOCH],
            next=SCN.parse(headers[wire.HEADER_NEXT]),
            newest=_maybe_scn(headers.get(wire.HEADER_NEWEST)),
            transactions=txns,
            within=cut,
        )
        count = int(headers[wire.HEADER_COUNT])
    except (KeyError, ValueError, CorruptRecordError) as exc:
        raise ProtocolError(f"{url} answered with a malformed records page: {exc}") from exc
    if count != len(txns):
        raise ProtocolError(f"{url} sent {len(txns)} records, {wire.HEADER_COUNT} says {count}")
    return page


def _maybe_scn(text: Any) -> SCN | None:
    return SCN.parse(text) if text else None


def _within(value: Any) -> int:
    """A page's ``next_within`` (absent: 0); raises ValueError or TypeError."""
    if value is None or value == "":
        return 0
    within = int(value)
    if within < 0:
        raise ValueError(f"next_within {within} is negative")
    return within


def redact(text: str, token: str | None) -> str:
    """``text`` with the token masked, in case a server or proxy echoes it back."""
    return text.replace(token, "[token]") if token else text
