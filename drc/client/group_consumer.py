"""A member of a consumer group (drc.api.groups): join, heartbeat, pull the ranges assigned,
hand each batch to a callback, commit checkpoints, leave.

::

    consumer = GroupConsumer(url, "orders", handle, token=token)
    consumer.run(stop)          # until stop is set: then commits and leaves

``handle(batch)`` gets a :class:`RangeBatch` (the range, its transactions, whole, in SCN
order) and returns once it has processed them; its position then moves past them and is
committed every ``commit_interval_s`` (and when the range is taken away or the consumer stops;
a range another of this member's ranges waits for at a per-key barrier is committed at once).

Delivery is at least once: after a crash (or a range that moved before its owner committed)
the next owner reads again from the last committed checkpoint, so a change after it may arrive
twice, never one before it. Every change carries its transaction's SCN, strictly increasing
within a range: a consumer that keeps the last SCN it processed per key (or per range) drops a
repeat by comparing SCNs. A member that the group dropped (missed heartbeats) joins again and
continues from the checkpoints; a range whose version moved is given up at once (409).

A full group (``full = true``, docs/subscribers.md "The full phase") first hands its members
chunks of its tables: ``on_chunk(batch)`` gets each chunk's rows (a :class:`ChunkBatch`, read at
``read_at``), and the chunk is committed (TERMINATED) when it returns. The ranges come once
every chunk is done, reading after the group's start SCN; :attr:`GroupConsumer.full` is the
phase's progress (chunks, terminated, running). Apply both by key (a row as an upsert, a
change's after image as an upsert, a delete as a delete): a change between the start SCN and
a chunk's ``read_at`` is already in the chunk and arrives again, harmlessly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from drc.api import wire
from drc.client import http
from drc.client.errors import ApiRequestError
from drc.client.fragments import assemble
from drc.core.events import Transaction
from drc.core.jsonwire import value_from_json
from drc.core.scn import SCN

log = logging.getLogger(__name__)
IDLE_S = 0.2  # between passes over the ranges when none had anything
RETRY_S = 1.0
TIMEOUT = httpx.Timeout(10.0, read=30.0)


@dataclass(frozen=True)
class RangeBatch:
    range: int
    version: int
    transactions: tuple[Transaction, ...]
    next: SCN  # the position after this batch (what a commit moves the range's checkpoint to)


@dataclass(frozen=True)
class ChunkBatch:
    chunk: int
    table: str  # "schema.table"
    read_at: SCN  # the rows are as of this SCN (at or after the group's start)
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]  # Python values, as a change's row images hold
    done: int  # chunks of the group TERMINATED before this one
    total: int


@dataclass
class _Held:
    version: int
    position: SCN
    committed: SCN
    closing: bool = False


class GroupConsumer:
    def __init__(
        self,
        url: str,
        group: str,
        handler: Callable[[RangeBatch], None],
        *,
        token: str | None = None,
        commit_interval_s: float = 1.0,
        heartbeat_interval_s: float | None = None,
        max_events: int = 500,
        verify: Any = True,
        transport: httpx.BaseTransport | None = None,
        on_chunk: Callable[[ChunkBatch], None] | None = None,
    ) -> None:
        self._url = url.rstrip("/")
        self._group = group
        self._handler = handler
        self._token = token
        self._commit_every = commit_interval_s
        self._beat_every = heartbeat_interval_s
        self._max_events = max_events
        self._client = http.make_client(token, transport=transport, verify=verify)
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._released: list[int] = []
        self._rejoin = threading.Event()
        self._beating = threading.Event()  # cleared: the heartbeat thread stops (a crash)
        self.member: str | None = None
        self.joins = 0
        self._on_chunk = on_chunk
        self._chunks: dict[int, int] = {}  # full-phase chunks held: index -> version
        self._finished: set[tuple[int, int]] = set()  # (chunk, version) handed over already
        self.full: dict[str, Any] | None = None  # the full phase's progress; None: no phase

    # -- public --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop``; then commit and leave the group."""
        try:
            self._join()
        except ValueError:  # a full phase and no on_chunk: hold none of its chunks
            self._leave()
            http.close_client(self._client)
            raise
        self._beating.set()
        beater = threading.Thread(target=self._beat_loop, args=(stop,), daemon=True)
        beater.start()
        try:
            self._consume(stop)
        finally:
            if self._beating.is_set():  # a clean stop, not abandon()
                self._beating.clear()
                beater.join()
                self._commit_all()
                self._leave()
            http.close_client(self._client)

    def abandon(self) -> None:
        """Stop heartbeating and leave nothing behind, as a crashed process would (for tests
        and drills): the group gives this member's ranges away after its heartbeat timeout."""
        self._beating.clear()

    def assignment(self) -> dict[int, int]:
        """The ranges held now and their versions."""
        with self._lock:
            return {index: held.version for index, held in self._held.items()}

    # -- membership ----------------------------------------------------------------------

    def _path(self, *parts: object) -> str:
        return "/".join([self._url + wire.PATH_GROUPS, self._group, *map(str, parts)])

    def _post(self, target: str, body: Any = None) -> dict[str, Any]:
        response = http.request(
            self._client, "POST", target, self._token, TIMEOUT, json_body=body or {}
        )
        answer: dict[str, Any] = response.json()
        return answer

    def _join(self) -> None:
        while True:
            try:
                answer = self._post(self._path("members"))
                break
            except http.Transient as exc:
                log.warning("joining group %s: %s; retrying", self._group, exc)
                time.sleep(RETRY_S)
        self.member = str(answer["member"])
        self.joins += 1
        if self._beat_every is None:
            self._beat_every = float(answer["heartbeat_timeout_s"]) / 4
        with self._lock:
            self._held.clear()
            self._released.clear()
        self._take(answer["assignment"])
        self._take_chunks(answer)

    def _take_chunks(self, answer: dict[str, Any]) -> None:
        full = answer.get("full")
        if full is not None and full["running"] and self._on_chunk is None:
            raise ValueError(f"group {self._group} starts with a full phase: give the "
                             "consumer on_chunk to take its rows")  # fmt: skip
        with self._lock:
            self.full = full
            held = ((int(c["chunk"]), int(c["version"])) for c in answer.get("chunks", ()))
            # a heartbeat answered before a commit may still list the chunk committed
            self._chunks = {i: v for i, v in held if (i, v) not in self._finished}

    def _take(self, assignment: list[dict[str, Any]]) -> None:
        """The server's view of what this member holds: new ranges start at their
        checkpoint, a moved version drops what was read meanwhile, missing ones go."""
        with self._lock:
            seen = set()
            for item in assignment:
                index, version = int(item["range"]), int(item["version"])
                seen.add(index)
                held = self._held.get(index)
                if held is None or held.version != version:
                    start = SCN.parse(item["checkpoint"])
                    held = self._held[index] = _Held(version, start, start)
                held.closing = item["state"] == "closing"
            for index in set(self._held) - seen:
                del self._held[index]

    def _beat_loop(self, stop: threading.Event) -> None:
        while self._beating.is_set() and not stop.wait(self._beat_every or 1.0):
            if not self._beating.is_set() or self._rejoin.is_set():
                continue
            with self._lock:
                released, self._released = self._released, []
            try:
                answer = self._post(self._path("members", self.member, "heartbeat"),
                                    {"released": released})  # fmt: skip
            except http.Transient as exc:
                log.warning("heartbeat of group %s: %s", self._group, exc)
                with self._lock:
                    self._released.extend(released)  # said with the next one
                continue
            except ApiRequestError as exc:
                if exc.status == 410:
                    self._rejoin.set()
                    continue
                raise
            self._take(answer["assignment"])
            self._take_chunks(answer)

    def _leave(self) -> None:
        try:
            http.request(self._client, "DELETE", self._path("members", self.member),
                         self._token, TIMEOUT)  # fmt: skip
        except (http.Transient, ApiRequestError) as exc:
            log.warning(
                "leaving group %s: %s (its ranges move after the timeout)", self._group, exc
            )

    # -- consuming -----------------------------------------------------------------------

    def _consume(self, stop: threading.Event) -> None:
        last_commit = time.monotonic()
        while not stop.is_set() and self._beating.is_set():
            if self._rejoin.is_set():
                self._join()
                self._rejoin.clear()
            busy, awaited = self._full_phase(stop), set()
            for index, held in sorted(self.snapshot().items()):
                if stop.is_set() or not self._beating.is_set():
                    return
                if held.closing:
                    self._release(index, held)
                    continue
                got, waits_for = self._pull(index, held)
                busy |= got
                awaited |= waits_for
            if time.monotonic() - last_commit >= self._commit_every:
                self._commit_all()
                last_commit = time.monotonic()
            elif awaited:  # a range of ours waits at a barrier for these: commit them now
                held_now = self.snapshot()
                for index in sorted(awaited & set(held_now)):
                    self._commit(index, held_now[index])
            if not busy:
                stop.wait(IDLE_S)

    def _full_phase(self, stop: threading.Event) -> bool:
        """Read, hand over and commit each chunk held; whether there was any."""
        with self._lock:
            held = dict(self._chunks)
        for index, version in sorted(held.items()):
            if stop.is_set() or not self._beating.is_set():
                break
            self._chunk(index, version)
        return bool(held)

    def _chunk(self, index: int, version: int) -> None:
        params = {"member": str(self.member), "version": str(version)}
        try:
            response = http.request(self._client, "GET", self._path("chunks", index, "rows"),
                                    self._token, TIMEOUT, params=params)  # fmt: skip
            body = response.json()
            assert self._on_chunk is not None
            self._on_chunk(self._batch(index, body))
            answer = self._post(self._path("chunks", index, "commit"),
                                {"member": self.member, "version": version})  # fmt: skip
        except http.Transient as exc:
            log.warning("chunk %d of group %s: %s", index, self._group, exc)
            return
        except ApiRequestError as exc:
            if exc.status == 410:
                self._rejoin.set()
            elif exc.status != 409:
                raise
            answer = None  # 409: the chunk moved on; the heartbeat brings what we hold
        with self._lock:
            self._finished.add((index, version))
            if self._chunks.get(index) == version:
                del self._chunks[index]
        if answer is not None:
            self._take_chunks(answer)  # with the next chunk the commit gave

    def _batch(self, index: int, body: dict[str, Any]) -> ChunkBatch:
        with self._lock:
            full = self.full or {}
        rows = tuple(tuple(value_from_json(v) for v in row) for row in body["rows"])
        return ChunkBatch(
            index, str(body["table"]), SCN.parse(body["read_at"]), tuple(body["columns"]), rows,
            int(full.get("terminated", 0)), int(full.get("chunks", 0)),
        )  # fmt: skip

    def snapshot(self) -> dict[int, _Held]:
        with self._lock:
            return dict(self._held)

    def _pull(self, index: int, held: _Held) -> tuple[bool, set[int]]:
        """Pull one range and hand its batch over: whether it had any, and the ranges its
        pull waits for at a per-key barrier (drc.core.range_filter)."""
        params = {
            "member": str(self.member),
            "version": str(held.version),
            "after": str(held.position),
            "max_events": str(self._max_events),
            "wait_ms": "-1",
        }
        target = self._path("ranges", index, "events")
        try:
            response = http.send(self._client, target, params, wire.MEDIA_RECORDS, TIMEOUT,
                                 self._token)  # fmt: skip
        except http.Transient as exc:
            log.warning("pull of range %d: %s", index, exc)
            return False, set()
        except ApiRequestError as exc:
            self._refused(index, held, exc)
            return False, set()
        page = http.events_page(response, self._url)
        if page.transactions:
            self._handler(RangeBatch(index, held.version, tuple(assemble(page.transactions)),
                                     page.next))  # fmt: skip
        if page.next > held.position:
            held.position = page.next
        waiting = response.headers.get(wire.HEADER_WAITING, "")
        return bool(page.transactions), {int(i) for i in waiting.split(",") if i.isdigit()}

    def _refused(self, index: int, held: _Held, exc: ApiRequestError) -> None:
        if exc.status == 410:
            self._rejoin.set()
        elif exc.status == 409:  # the range moved on: the heartbeat brings what we hold
            with self._lock:
                if self._held.get(index) is held:  # not a newer assignment of it
                    del self._held[index]
        else:
            raise exc

    def _commit(self, index: int, held: _Held) -> None:
        if held.position <= held.committed:
            return
        body = {"member": self.member, "version": held.version, "scn": str(held.position)}
        try:
            self._post(self._path("ranges", index, "commit"), body)
        except http.Transient as exc:
            log.warning("commit of range %d: %s", index, exc)
            return
        except ApiRequestError as exc:
            self._refused(index, held, exc)
            return
        held.committed = held.position

    def _commit_all(self) -> None:
        for index, held in sorted(self.snapshot().items()):
            self._commit(index, held)

    def _release(self, index: int, held: _Held) -> None:
        """A range being moved to another member: commit what was done, give it back."""
        self._commit(index, held)
        with self._lock:
            self._held.pop(index, None)
            self._released.append(index)
