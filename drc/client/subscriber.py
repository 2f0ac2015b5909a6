"""The subscriber: pull the change stream from a replicator group with get / ack / rollback.

Positions (Otter's get/ack/rollback, Debezium's "move the restart position only at commit")::

      acked position ----> [ batch awaiting ack ] ----> [ prefetched batch ]
      (checkpointed)          returned by get()           fetched in the background

- ``get()`` returns the batch after the acked position. Until it is acked, every ``get()``
  returns that same batch again (same ``id``): nothing is skipped because a caller forgot an ack.
- ``ack(batch)`` moves the acked position to ``batch.next`` and saves it in the checkpoint store
  before returning. Only the batch awaiting ack can be acked, once.
- ``rollback()`` drops the batch awaiting ack and any prefetched batch; the next ``get()`` asks
  the server again from the acked position, so the same changes are delivered again.

A batch may be empty (nothing matched the table filter within ``wait_ms``) while its ``next``
still moves forward past filtered-out changes: ack it too, so the checkpoint keeps up.

Prefetch: right after ``get()`` hands out a batch, a background thread fetches the batch after
its ``next``. It is used only if the caller acks and asks for exactly that position; rollback
and close discard it. Order is never changed and nothing is skipped. On a stream
(drc.client.stream) the stream's reader reads ahead instead, and ``get()`` takes what it read
in the caller's thread.

Iteration (``for txn in subscriber``) yields transactions in SCN order and acks a batch when the
caller asks for the transaction after its last one, so a crash mid-batch redelivers the whole
batch. Large transactions arrive as fragments sharing one SCN (``fragment`` 0, 1, ...;
``last_fragment`` on the final one, always in the same batch): apply the transaction when its
last fragment arrives, or wrap the iterator in :func:`drc.client.assemble`.

``split=True`` takes a large transaction in batches of ``max_bytes`` instead (so neither side
holds all of it): a batch may then end inside one, its ``within`` saying after how many of its
stored records, and the next batch continues it. The acked position is then inside that
transaction (``position`` and ``within``); the checkpoint store is only written at positions
after whole transactions, so a restart from it takes such a transaction again from its start.
A transaction continued from an earlier batch always ends with its last fragment, possibly
empty (the server cannot know whether the filter kept any of it before).

The subscriber is meant for one consuming thread; only the prefetch runs beside it.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from drc.api import pullquery
from drc.client import discovery, http
from drc.client.checkpoint import CheckpointStore
from drc.client.errors import AckError, ApiUnavailableError
from drc.client.fetcher import ON_REBUILD, Cancelled, Fetcher
from drc.core import rowfilter
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter

log = logging.getLogger("drc.client")

DEFAULT_MAX_BYTES = 8 << 20
# Longest pause between rounds of failed pulls: a replicator that comes back is pulled from
# again within this (the backoff once grew to 10 s, so a channel took ~20 s to reconnect).
RECONNECT_MAX_S = 2.0
_JOIN_ON_CLOSE_S = 1.0


@dataclass(frozen=True, slots=True)
class Batch:
    """One page of the stream: the transactions (fragments) after ``after`` up to ``next``.

    ``id`` grows by one per batch a subscriber hands out; ``epoch`` and ``url`` say which
    replicator buffer served it; ``newest`` is the newest SCN that buffer held (lag hint).
    """

    id: int
    after: SCN
    next: SCN
    transactions: Sequence[Transaction]  # decoded as read for a large page (drc.api.lazyrecords)
    epoch: str
    url: str
    newest: SCN | None
    within: int = 0  # > 0: the batch ends inside the transaction at ``next`` (split)

    def __len__(self) -> int:
        return len(self.transactions)


class _Fetch:
    """One background fetch of the page after ``after`` (and ``within``)."""

    def __init__(self, after: SCN, within: int = 0) -> None:
        self.after = after
        self.within = within
        self.done = threading.Event()
        self.cancelled = threading.Event()
        self.result: tuple[str, http.Page] | None = None
        self.error: BaseException | None = None


class _Worker:
    """A daemon thread that runs fetches one after another: a subscriber keeping up fetches
    once per transaction or two, and starting a thread per fetch cost more than the fetch.
    It takes a fetch only when idle; one offered while it is busy (still finishing a fetch
    that rollback cancelled) gets a thread of its own, as before."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._busy = False
        self._thread = threading.Thread(target=self._loop, name="drc-fetch", daemon=True)
        self._thread.start()

    def offer(self, job: Callable[[], None]) -> bool:
        with self._lock:
            if self._busy:
                return False
            self._busy = True
        self._jobs.put(job)
        return True

    def stop(self) -> None:
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            finally:
                with self._lock:
                    self._busy = False


class Subscriber:
    """Pull transactions after a position from one or more replicator API URLs.

    Start position: the checkpoint store's saved SCN if it has one, else ``after``, else the
    beginning. ``tables`` is a comma-separated filter (``db.t,db2.*``); ``skip_drc`` leaves out
    transactions DRC itself applied. ``drc_applied="marker"`` takes, instead of a 409
    (ApiRequestError, code ``rows_omitted``), the DRC-applied transactions a replicator with
    ``[replicator] drc_applied = "marker"`` stores without their rows: they come with
    ``rows_omitted`` set and no changes. ``rows`` gives tables row filters (``{"db.t":
    "region = 'eu'"}``, drc.core.rowfilter): only the rows a predicate passes arrive, an update
    that moves a row in or out of it as an insert or a delete. ``on_rebuild`` is "raise"
    (BufferRebuiltError) or "continue". HTTPS: ``ca`` is the PEM file of the CA(s) to trust
    instead of the system's, ``cert``/``key`` a client certificate, ``verify=False`` turns
    checking off (or pass an ``ssl.SSLContext`` as ``verify``). ``transport`` replaces httpx's
    network transport (tests);
    ``sleep`` and ``clock`` replace time.sleep and time.monotonic for the retry backoff, which
    doubles from ``backoff_initial`` up to ``backoff_max`` (default :data:`RECONNECT_MAX_S`).
    ``stream`` (with ``binary``) reads the changes off one long-lived response per server
    (``GET /v1/stream``, a heartbeat every ``wait_ms``) where it is served, instead of a pull
    per batch: the same batches, positions and acks (drc.client.stream); False, or a
    ``wait_ms`` of 0 or -1 (caught up means an empty batch at once), always pulls.
    ``compression`` "lz4" asks servers to compress the records they send (drc.api.wire; a
    server that does not answers plain): for long, thin links. ``split`` takes large
    transactions in batches of ``max_bytes`` (module docstring).
    """

    def __init__(
        self,
        urls: Sequence[str] | str,
        after: SCN | None = None,
        tables: str | None = None,
        *,
        checkpoint: CheckpointStore | None = None,
        token: str | None = None,
        max_events: int = 1000,
        max_bytes: int = DEFAULT_MAX_BYTES,
        wait_ms: int = 1000,
        binary: bool = True,
        skip_drc: bool = False,
        drc_applied: str = pullquery.DRC_APPLIED_FULL,
        rows: Mapping[str, str] | None = None,
        prefetch: bool = True,
        on_rebuild: str = "raise",
        backoff_initial: float = 0.2,
        backoff_max: float = RECONNECT_MAX_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        verify: Any = True,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
        stream: bool = True,
        compression: str = "none",
        split: bool = False,
    ) -> None:
        self.urls = _check_args(urls, tables, max_events, max_bytes, wait_ms, on_rebuild)
        if drc_applied not in (pullquery.DRC_APPLIED_FULL, pullquery.DRC_APPLIED_MARKER):
            raise ValueError(f"drc_applied must be 'full' or 'marker', got {drc_applied!r}")
        verify = http.tls_verify(verify, ca, cert, key)
        self.tables = tables
        self._checkpoint = checkpoint
        saved = checkpoint.load() if checkpoint is not None else None
        self._position = saved or after or SCN.zero()
        self._within = 0  # > 0: the acked position is inside the transaction at _position
        self._prefetch = prefetch
        self._clock = clock
        self._client = http.make_client(token, transport, verify, compression)
        self._fetcher = Fetcher(
            self.urls,
            self._client,
            _params(tables, max_events, max_bytes, wait_ms, skip_drc, drc_applied, rows, split),
            token=token,
            binary=binary,
            wait_ms=wait_ms,
            on_rebuild=on_rebuild,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            sleep=sleep,
            clock=clock,
            # A reader that asks not to wait (wait_ms <= 0) wants an empty batch as soon as
            # it is caught up; a stream tells that only at its next heartbeat.
            stream=stream and wait_ms > 0,
        )
        self._worker: _Worker | None = None
        self._ids = itertools.count(1)
        self._pending: Batch | None = None
        self._inflight: _Fetch | None = None
        self._closed = False

    # ------------------------------------------------------------------ get / ack / rollback

    @property
    def position(self) -> SCN:
        """The acked position: everything up to it is processed; the checkpoint holds it
        (unless :attr:`within` says it is inside that transaction)."""
        return self._position

    @property
    def within(self) -> int:
        """> 0 when the acked position is inside the transaction at :attr:`position`, after
        that many of its stored records (``split``); 0 after all of it."""
        return self._within

    @property
    def pending(self) -> Batch | None:
        """The batch get() returned that is not acked yet, if any."""
        return self._pending

    def get(self, timeout: float | None = None) -> Batch:
        """The batch after the acked position (the same one again until it is acked).

        Waits for the server's answer, retrying and failing over as needed, for up to
        ``timeout`` seconds (None: as long as it takes). On timeout raises ApiUnavailableError
        naming each URL's last failure; the fetch goes on, and the next get() picks it up.
        """
        self._check_open()
        if self._pending is not None:
            return self._pending
        if self._inflight is None:  # a stream open here has read ahead: take from it
            try:
                ready = self._fetcher.stream_ready(self._position, timeout, self._within)
            except TimeoutError:
                raise self._unavailable(timeout) from None
            if ready is not None:
                return self._hand_out(self._position, *ready)
        fetch = self._inflight
        if fetch is None or (fetch.after, fetch.within) != (self._position, self._within):
            self._discard_inflight()
            fetch = self._inflight = self._start(self._position, self._within)
        if not fetch.done.wait(timeout):
            raise self._unavailable(timeout)
        self._inflight = None
        if fetch.error is not None:
            raise fetch.error
        assert fetch.result is not None
        batch = self._hand_out(fetch.after, *fetch.result)
        if self._prefetch and not self._fetcher.streaming(batch.next, batch.within):
            self._inflight = self._start(batch.next, batch.within)
        return batch

    def _hand_out(self, after: SCN, url: str, page: http.Page) -> Batch:
        batch = Batch(
            next(self._ids),
            after,
            page.next,
            page.transactions,
            page.epoch,
            url,
            page.newest,
            page.within,
        )
        self._pending = batch
        return batch

    def ack(self, batch: Batch) -> None:
        """Mark ``batch`` processed: save ``batch.next`` as the checkpoint (unless the batch
        ends inside a transaction), then move there."""
        if self._pending is None or batch.id != self._pending.id:
            awaiting = f"batch {self._pending.id}" if self._pending else "no batch"
            raise AckError(
                f"batch {batch.id} is not awaiting an ack ({awaiting} is): it was acked already, "
                "dropped by rollback(), or came from another subscriber"
            )
        moved = (batch.next, batch.within) != (self._position, self._within)
        if moved and not batch.within and self._checkpoint is not None:
            self._checkpoint.save(batch.next)  # before moving: a failed save keeps it pending
        self._position, self._within = batch.next, batch.within
        self._pending = None

    def rollback(self) -> None:
        """Drop the unacked batch and any prefetched one; the next get() redelivers them."""
        self._pending = None
        self._discard_inflight()

    def accept_rebuilt_buffer(self) -> None:
        """After BufferRebuiltError: forget every URL's epoch and go on after the same SCN."""
        self._fetcher.forget_epochs()
        self._discard_inflight()

    # ------------------------------------------------------------------ iteration

    def transactions(self, timeout: float | None = None) -> Iterator[Transaction]:
        """Every transaction (fragment) in SCN order; a batch is acked when the caller asks for
        the transaction after its last one. ``timeout`` is passed to each get()."""
        while not self._closed:
            batch = self.get(timeout)
            yield from batch.transactions
            if self._pending is batch:  # the caller may have rolled back meanwhile
                self.ack(batch)

    def __iter__(self) -> Iterator[Transaction]:
        return self.transactions()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Stop the prefetch and close the connections; the acked position stays saved."""
        if self._closed:
            return
        self._closed = True
        fetch = self._inflight
        self._discard_inflight()
        if fetch is not None:
            fetch.done.wait(_JOIN_ON_CLOSE_S)  # a long poll may outlive this; it is a daemon
        if self._worker is not None:
            self._worker.stop()
        self._fetcher.close()
        http.close_client(self._client)

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:  # no token: it lives only in the httpx client's headers
        return (
            f"Subscriber(urls={list(self.urls)!r}, tables={self.tables!r}, "
            f"position={self._position}, within={self._within}, "
            f"pending={self._pending.id if self._pending else None})"
        )

    # ------------------------------------------------------------------ internals

    def _start(self, after: SCN, within: int = 0) -> _Fetch:
        fetch = _Fetch(after, within)

        def run() -> None:
            try:
                fetch.result = self._fetcher.fetch(after, fetch.cancelled, within)
            except Cancelled:
                pass
            except BaseException as exc:  # handed to the caller's get()
                fetch.error = exc
            finally:
                fetch.done.set()

        if self._worker is None:
            self._worker = _Worker()
        if not self._worker.offer(run):
            threading.Thread(target=run, name=f"drc-fetch-{after}", daemon=True).start()
        return fetch

    def _discard_inflight(self) -> None:
        if self._inflight is not None:
            self._inflight.cancelled.set()
            self._inflight = None

    def _unavailable(self, timeout: float | None) -> ApiUnavailableError:
        errors = dict(self._fetcher.last_errors)
        since = self._fetcher.failing_since
        if not errors:
            url = self._fetcher.current_url
            return ApiUnavailableError(f"no answer within {timeout}s from {url} (server slow?)", {})
        failing = f" for {self._clock() - since:.1f}s" if since is not None else ""
        detail = "; ".join(f"{url}: {text}" for url, text in errors.items())
        return ApiUnavailableError(
            f"no API URL answered{failing} ({detail}). Check the URLs, that the replicators "
            "are running with their API enabled, and the network between here and them",
            errors,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the subscriber is closed")


def _check_args(
    urls: Sequence[str] | str,
    tables: str | None,
    max_events: int,
    max_bytes: int,
    wait_ms: int,
    on_rebuild: str,
) -> tuple[str, ...]:
    listed = (urls,) if isinstance(urls, str) else tuple(urls)
    if not listed or not all(
        isinstance(u, str) and u.startswith(("http://", "https://", discovery.SCHEME))
        for u in listed
    ):
        raise ValueError(
            f"urls must be one or more http(s):// URLs or zk://HOSTS/PATH group URLs, "
            f"got {listed!r}"
        )
    for url in listed:
        if discovery.is_group(url):
            discovery.split(url)  # a malformed group URL fails here
    if tables is not None:
        TableFilter.parse_list(tables)  # a bad pattern fails here, not at the first request
    if max_events < 1 or max_bytes < 1 or wait_ms < pullquery.WAIT_NONE:
        raise ValueError("max_events and max_bytes must be >= 1 and wait_ms >= -1")
    if on_rebuild not in ON_REBUILD:
        raise ValueError(f"on_rebuild must be one of {ON_REBUILD}, got {on_rebuild!r}")
    return tuple(u.rstrip("/") for u in listed)


def _params(
    tables: str | None,
    max_events: int,
    max_bytes: int,
    wait_ms: int,
    skip_drc: bool,
    drc_applied: str = pullquery.DRC_APPLIED_FULL,
    rows: Mapping[str, str] | None = None,
    split: bool = False,
) -> dict[str, str]:
    params = {
        pullquery.PARAM_MAX_EVENTS: str(max_events),
        pullquery.PARAM_MAX_BYTES: str(max_bytes),
        pullquery.PARAM_WAIT_MS: str(wait_ms),
    }
    if tables:
        params[pullquery.PARAM_TABLES] = tables
    if skip_drc:
        params[pullquery.PARAM_SKIP_DRC] = "1"
    elif drc_applied != pullquery.DRC_APPLIED_FULL:
        params[pullquery.PARAM_DRC_APPLIED] = drc_applied
    if rows:
        for pattern, predicate in rows.items():  # a mistake fails here, not at the first pull
            TableFilter.build([pattern])
            rowfilter.parse(predicate)
        params[pullquery.PARAM_ROWS] = json.dumps(dict(rows))
    if split:
        params[pullquery.PARAM_SPLIT] = "1"
    return params
