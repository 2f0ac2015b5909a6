"""Fetch one page after a position from any of a replicator group's URLs.

Every replicator of a group (leader and followers) serves the same SCN space, so a page after
SCN s from one URL continues a page from another. Each has its own buffer epoch, though, so the
fetcher remembers the epoch per URL and sends ``epoch=`` only to the URL that gave it.

Failover and backoff (kazoo's KazooRetry shape, with injected sleep; the delays are
drc.core.retry's Backoff, counted per round rather than per request)::

    try the current URL
      ok            -> stay on it, reset the backoff, return the page
      transient     -> next URL (round-robin) at once; after a full round of failures sleep
                       backoff_initial, doubling per round up to backoff_max, or the
                       longest Retry-After a URL of the round sent (503 reader_memory_full:
                       the server's readers hold its reader memory), if longer
      410 too old   -> next URL like a transient; if every URL of a round said 410, raise
                       PositionTooOldError (never skip ahead)
      409 epoch     -> on_rebuild="raise": BufferRebuiltError; "continue": forget that URL's
                       epoch and ask again from the same SCN
      400/401/404.. -> raise at once (the same request fails everywhere)
      429/503 busy  -> the server's long-poll limit: ask the same URL again at once with
                       wait_ms=-1 (never refused), and keep doing so until its Retry-After
                       passes, pausing backoff_initial after each empty answer; so a channel
                       keeps up (lag about backoff_initial) while long polls are refused

Streams (``stream=True``, records form only): a URL that serves ``GET /v1/stream`` is read
through one long-lived response (drc.client.stream) instead of a pull per page; the same
answers and failures apply to opening it, and a stream that ends counts as a transient
failure (reconnect from the last page's ``next``). A URL that answers 404 (an older server)
is pulled from (and asked for a stream again after :data:`NO_STREAM_RETRY_S`); a URL refusing
long polls (429/503) is pulled from with ``wait_ms=-1`` until
its Retry-After passes, then streamed from again.

``zk://`` entries (drc.client.discovery) are resolved to the group's members, leader first,
at the start and again after every round in which no URL answered. Each group is also watched
(discovery.LeaderWatch): when its leader changes, the request or stream under way is hung up
at once and the group resolved again, so a reader never waits on a silent leader (paused,
hung, behind a half-open link) for a timeout once ZooKeeper has given up on it.

Pages are checked against the contract before they are returned: transactions after the
requested SCN, in SCN order, fragments of one SCN in order and complete within the page, and
``next`` not behind them. A page that breaks it raises ProtocolError rather than risking a gap.

Split pages (``split=1`` in the parameters, drc.api.pullquery): a page may end inside a large
transaction, saying so with ``within`` (the records of it taken so far); the next page is asked
for after the same SCN with that ``within`` and starts with the rest of that transaction. So a
transaction of any size crosses in pages of ``max_bytes``, and a reconnect in the middle of one
asks only for what did not arrive.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import httpx

from drc.api import lazyrecords, pullquery
from drc.client import discovery, http
from drc.client.errors import (
    ApiRequestError,
    BufferRebuiltError,
    PositionTooOldError,
    ProtocolError,
)
from drc.client.stream import StreamSource, stream_params
from drc.core.retry import Backoff
from drc.core.scn import SCN

log = logging.getLogger("drc.client")

ON_REBUILD = ("raise", "continue")
NO_STREAM_RETRY_S = 300.0  # a URL without /v1/stream is pulled from this long, then asked again


class Cancelled(Exception):
    """The subscriber no longer wants this fetch (rollback, close)."""


class Fetcher:
    def __init__(
        self,
        urls: Sequence[str],
        client: httpx.Client,
        params: dict[str, str],
        *,
        token: str | None,
        binary: bool,
        wait_ms: int,
        on_rebuild: str,
        backoff_initial: float,
        backoff_max: float,
        sleep: Callable[[float], None] | None,
        clock: Callable[[], float] = time.monotonic,
        stream: bool = False,
        watch: Callable[[str, Callable[[], None]], Any] = discovery.LeaderWatch,
    ) -> None:
        self._specs = tuple(urls)
        self._moved = threading.Event()  # a watched group's leader changed
        self._client = client
        self._params = params
        self._token = token
        self._binary = binary
        self._pull_timeout = http.PullTimeout(wait_ms)
        self._stream_timeout = http.stream_timeout(wait_ms)
        # Records only: a stream carries the records form.
        self._stream = (
            StreamSource(
                int(params.get(pullquery.PARAM_MAX_EVENTS, "1000")),
                int(params.get(pullquery.PARAM_MAX_BYTES, str(16 << 20))),
            )
            if stream and binary
            else None
        )
        self._on_rebuild = on_rebuild
        self._backoff = Backoff(backoff_initial, backoff_max)
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()  # guards the fields below (prefetch runs in a thread)
        self._current = 0
        self._epochs: dict[str, str] = {}
        self._busy_until: dict[str, float] = {}  # URL -> when to long-poll it again
        self._whole_pages: set[str] = set()  # URLs that refused split pages (older servers)
        self.last_errors: dict[str, str] = {}
        self.failing_since: float | None = None
        # When a URL last answered: a request that timed out was silent since then, not
        # since its failure was noted (a long read timeout would hide how long).
        self._answered_at: float | None = None
        groups = [spec for spec in self._specs if discovery.is_group(spec)]
        self._watches = [watch(spec, self._leader_moved) for spec in groups]
        self.urls = discovery.expand(urls, self._resolve) if groups else self._specs

    def fetch(
        self, after: SCN, cancelled: threading.Event, within: int = 0
    ) -> tuple[str, http.Page]:
        """The next page after ``after`` (inside its transaction, after ``within`` records,
        when > 0: a split page's position) and the URL that served it; retries until it has
        one."""
        delays = self._backoff.delays()  # waits after whole rounds of failures
        failed_in_round, too_old, later = 0, {}, 0.0
        while True:
            if cancelled.is_set():
                raise Cancelled()
            if self._moved.is_set():
                self._rediscover()
            url = self.current_url
            try:
                return url, self._try(url, after, cancelled, within)
            except http.Busy as exc:
                if self._note_busy(url, exc):
                    continue  # at once: the next attempt does not wait, so it is not refused
                self._note_failure(url, str(exc))  # refused without waiting: a real failure
            except http.Transient as exc:
                self._note_failure(url, str(exc))
                later = max(later, exc.retry_after_s)  # the server's Retry-After, if any
            except http.TooOld as exc:
                too_old[url] = exc
                self._note_failure(url, f"HTTP 410 scn_too_old: {exc}")
            if self._moved.is_set():  # the leader changed: ask the group, then its leader
                self._rediscover()
                delays.reset()
                failed_in_round, too_old, later = 0, {}, 0.0
                continue
            self._advance(url)
            failed_in_round += 1
            if failed_in_round == len(self.urls):
                if len(too_old) == len(self.urls):
                    raise _too_old_error(after, too_old)
                self._pause(max(delays.next(), later), cancelled)
                failed_in_round, too_old, later = 0, {}, 0.0
                self._rediscover()

    @property
    def _groups(self) -> bool:
        return bool(self._watches)

    def _leader_moved(self) -> None:
        """A watched group's leader changed (ZooKeeper's thread): hang up what waits on the
        old one; :meth:`fetch` then resolves the group again."""
        self._moved.set()
        if self._stream is not None:
            self._stream.interrupt("the replicator group's leader changed")
        http.abort_requests(self._client)

    def _resolve(self, spec: str) -> list[str]:
        """A group's URLs, over its watch's session when that is connected."""
        for watch in self._watches:
            if watch.spec == spec:
                try:
                    return list(watch.urls())
                except discovery.DiscoveryError:
                    break
        return discovery.resolve(spec)

    def _rediscover(self) -> None:
        """Ask the groups' ZooKeeper again who the members are (leader first)."""
        if not self._groups:
            return
        self._moved.clear()
        urls = discovery.expand(self._specs, self._resolve)
        with self._lock:
            if urls != self.urls:
                log.info("replicator group now: %s", ", ".join(urls))
            self.urls, self._current = urls, 0  # the leader first

    def forget_epochs(self) -> None:
        with self._lock:
            self._epochs.clear()

    def epoch(self, url: str) -> str | None:
        with self._lock:
            return self._epochs.get(url)

    def _try(self, url: str, after: SCN, cancelled: threading.Event, within: int = 0) -> http.Page:
        if discovery.is_group(url):
            raise http.Transient(f"no member of the group {url} found in its ZooKeeper yet")
        for _ in range(3):  # again after forgetting a rebuilt buffer's epoch, or split pages
            expected = self.epoch(url)
            params = dict(self._params, **{pullquery.PARAM_AFTER: str(after)})
            if within:
                params[pullquery.PARAM_WITHIN] = str(within)
            if url in self._whole_pages:
                params.pop(pullquery.PARAM_SPLIT, None)
            if expected is not None:
                params[pullquery.PARAM_EPOCH] = expected
            busy = self._busy(url)
            if busy:
                params[pullquery.PARAM_WAIT_MS] = str(pullquery.WAIT_NONE)
            try:
                page = self._get(url, after, params, busy, cancelled, within)
            except http.EpochMismatch as exc:
                self._rebuilt(url, expected or "", exc.current, after)
                continue
            except ApiRequestError as exc:
                if within or not _refuses_split(exc, params):
                    raise
                # A server older than split pages (an upgrade under way): whole pages there.
                log.info("%s does not split large transactions: taking them whole", url)
                self._whole_pages.add(url)
                continue
            if expected is not None and page.epoch != expected:  # server did not check it
                self._rebuilt(url, expected, page.epoch, after)
                continue
            check_page(after, page, url, within)
            self._succeeded(url, page.epoch)
            if busy and not page.transactions:  # polling instead of waiting: not too often
                self._wait(self._backoff.initial_s, cancelled)
            return page
        raise ProtocolError(f"{url} kept reporting an epoch mismatch without an epoch sent")

    def _get(
        self,
        url: str,
        after: SCN,
        params: dict[str, str],
        busy: bool,
        cancelled: threading.Event,
        within: int = 0,
    ) -> http.Page:
        """The page after ``after``: off the stream when the server has one (and is not
        refusing long polls now, which a stream counts as), else pulled."""
        source = self._stream
        if source is not None and not busy and source.may_stream(url, self._clock()):
            opener = partial(
                http.open_stream,
                self._client,
                url,
                stream_params(params),
                self._stream_timeout,
                self._token,
            )
            try:
                page = source.page(url, after, opener, cancelled.is_set, within)
            except http.NoStream as exc:
                source.unsupported[url] = self._clock() + NO_STREAM_RETRY_S
                log.info("%s serves no stream (%s): pulling from it", url, exc)
            else:
                if page is None:
                    raise Cancelled()
                return page
        return self._pull_timeout.get_events(self._client, url, params, self._binary, self._token)

    def stream_ready(
        self, after: SCN, timeout_s: float | None, within: int = 0
    ) -> tuple[str, http.Page] | None:
        """The page after ``after`` (and ``within``) off the open stream, in the calling
        thread (no fetch, no hand-off): see StreamSource.ready; None: fetch it."""
        if self._stream is None:
            return None
        ready = self._stream.ready(after, timeout_s, within)
        if ready is not None:
            check_page(after, ready[1], ready[0], within)
        return ready

    def streaming(self, after: SCN, within: int = 0) -> bool:
        return self._stream is not None and self._stream.streaming(after, within)

    def close(self) -> None:
        """Close the open stream, if any, and the groups' watches."""
        for watch in self._watches:
            watch.close()
        if self._stream is not None:
            self._stream.close()

    def _rebuilt(self, url: str, expected: str, current: str | None, after: SCN) -> None:
        error = _rebuilt_error(url, expected, current, after)
        if self._on_rebuild == "raise":
            raise error
        log.warning("%s; continuing after %s as configured (on_rebuild=continue)",
                    str(error).split(";")[0], after)  # fmt: skip
        with self._lock:
            self._epochs.pop(url, None)

    @property
    def current_url(self) -> str:
        with self._lock:
            return self.urls[self._current]

    def _advance(self, failed: str) -> None:
        with self._lock:
            if self.urls[self._current] == failed:  # another thread may have moved on already
                self._current = (self._current + 1) % len(self.urls)
            if len(self.urls) > 1:
                log.warning(
                    "%s failed (%s); trying %s",
                    failed,
                    self.last_errors[failed],
                    self.urls[self._current],
                )

    def _busy(self, url: str) -> bool:
        with self._lock:
            until = self._busy_until.get(url)
            if until is not None and self._clock() >= until:
                del self._busy_until[url]
                log.info("%s: trying long polls again", url)
                return False
            return until is not None

    def _note_busy(self, url: str, exc: http.Busy) -> bool:
        """Pull ``url`` without waiting for a while; False if that was refused too."""
        if self._busy(url):
            return False
        with self._lock:
            self._busy_until[url] = self._clock() + max(exc.retry_after_s, self._backoff.initial_s)
        log.warning("%s refused a long poll (%s); pulling without waiting meanwhile", url, exc)
        return True

    def _note_failure(self, url: str, text: str) -> None:
        with self._lock:
            self.last_errors[url] = text
            if self.failing_since is None:
                answered = self._answered_at
                self.failing_since = self._clock() if answered is None else answered

    def _succeeded(self, url: str, epoch: str) -> None:
        with self._lock:
            self._epochs.setdefault(url, epoch)
            self.last_errors.clear()
            self.failing_since = None
            self._answered_at = self._clock()

    def _pause(self, delay: float, cancelled: threading.Event) -> None:
        log.warning("no API URL answered (%s); retrying in %.1fs", self._summary(), delay)
        self._wait(delay, cancelled)

    def _wait(self, delay: float, cancelled: threading.Event) -> None:
        if self._sleep is None:
            cancelled.wait(delay)  # wakes at once on rollback/close
        else:
            self._sleep(delay)

    def _summary(self) -> str:
        with self._lock:
            return "; ".join(f"{url}: {text}" for url, text in self.last_errors.items())


def _rebuilt_error(url: str, expected: str, current: str | None, after: SCN) -> BufferRebuiltError:
    return BufferRebuiltError(
        f"the EventBuffer behind {url} was rebuilt (epoch {expected} -> {current}) since this "
        f"subscriber read it; decide how to continue: accept_rebuilt_buffer() resumes after "
        f"{after} (SCNs are shared, so normally safe), or resynchronise from a snapshot",
        url,
        expected,
        current,
        after,
    )


def _too_old_error(after: SCN, answers: dict[str, http.TooOld]) -> PositionTooOldError:
    oldest = [a.oldest for a in answers.values() if a.oldest is not None]
    best = max(oldest) if oldest else None
    detail = "; ".join(f"{url}: oldest {a.oldest}" for url, a in answers.items())
    return PositionTooOldError(
        f"no URL still holds the changes after {after} ({detail}); retention deleted them. "
        f"The subscriber does not skip ahead: resynchronise from a snapshot and resume after "
        f"its SCN (at the earliest after {best})",
        best,
        after,
    )


def check_page(after: SCN, page: http.Page, url: str, within: int = 0) -> None:
    """Raise ProtocolError unless the page continues ``after`` (inside its transaction when
    ``within`` > 0) without reorder, and ends after a whole transaction unless it says where
    inside one (``page.within``, a split page)."""
    prev = None
    for txn in lazyrecords.heads(page.transactions):
        # the rest of ``after``'s transaction, first on the page
        continued = within and txn.scn == after and (prev is None or prev.scn == after)
        if txn.scn <= after and not continued:
            _broken(url, after, f"transaction {txn.scn} is not after the requested position")
        if prev is not None and txn.scn == prev.scn:
            if prev.last_fragment or txn.fragment <= prev.fragment:
                _broken(url, after, f"fragment {txn.fragment} of {txn.scn} is out of order")
        elif prev is not None and (txn.scn < prev.scn or not prev.last_fragment):
            _broken(url, after, f"{txn.scn} follows {prev.scn} fragment {prev.fragment}")
        prev = txn
    if prev is not None and not prev.last_fragment and not (page.within and page.next == prev.scn):
        _broken(url, after, f"the page ends inside transaction {prev.scn}")
    if prev is not None and prev.last_fragment and page.within and page.next == prev.scn:
        _broken(url, after, f"next_within {page.within} is past the end of {prev.scn}")
    if _order(page.next, page.within) < _order(after, within) or (
        prev is not None and page.next < prev.scn
    ):
        _broken(url, after, f"next {page.next} is behind the page")


def _order(scn: SCN, within: int) -> tuple[SCN, float]:
    """Positions in stream order: inside a transaction (``within`` records taken) comes
    before the position after all of it (``within`` 0)."""
    return scn, within if within else float("inf")


def _refuses_split(exc: ApiRequestError, params: dict[str, str]) -> bool:
    """Whether ``exc`` is an older server's 400 for the ``split`` parameter it does not know."""
    return (
        pullquery.PARAM_SPLIT in params
        and exc.status == 400
        and exc.server_message.startswith("unknown parameter")
        and pullquery.PARAM_SPLIT in exc.server_message.split(";")[0]
    )


def _broken(url: str, after: SCN, problem: str) -> None:
    raise ProtocolError(f"{url} answered a page after {after} that breaks the contract: {problem}")
