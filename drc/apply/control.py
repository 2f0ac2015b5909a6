"""An operator's hold on a running channel (``drc channel ...``; the actions: drc.apply.actions).

The API thread asks, the channel's thread acts: :class:`ChannelControl` is the only state they
share. Requests that change what the channel applies (a skip, a rewind) are queued and carried
out by the channel between target transactions, which then completes the request with its
result, so the caller learns what happened (or why not) and nothing races a commit.

States a channel reports: ``running``, ``paused`` (by an operator, or because it reached the SCN
given to ``pause --until``), ``stopped`` (a change the target rejected; skip, rewind or resume
continue it), ``disconnected`` (the remote is unreachable: it keeps retrying).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from drc.core.control import ControlError
from drc.core.errors import FatalError
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.core.statements import for_log

RUNNING, PAUSED, STOPPED, DISCONNECTED = "running", "paused", "stopped", "disconnected"
REQUEST_TIMEOUT_S = 60.0
STOPPAGE_KEYS_SHOWN = 10


@dataclass
class Request:
    """What an operator (or the node) asked of a channel: the action (drc.apply.actions) and
    the body fields it takes; a queued one is completed by the channel's thread."""

    action: str
    actor: str
    reason: str
    scn: SCN | None = None  # rewind: the SCN to replay after; skip: the SCN expected stopped
    until: SCN | None = None  # pause: the SCN to pause after
    at: float | None = None  # rewind: the body's time (Unix seconds), before the desk's lookup
    payload: Any = None  # reload: (ChannelConfig, filters, subscribe)
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | None = None
    error: ControlError | None = None

    def finish(self, result: dict[str, Any]) -> None:
        self.result = result
        self.done.set()

    def refuse(self, error: ControlError) -> None:
        self.error = error
        self.done.set()

    def wait(self, timeout: float = REQUEST_TIMEOUT_S) -> dict[str, Any]:
        if not self.done.wait(timeout):
            raise ControlError(
                f"the channel did not take the {self.action} within {timeout:.0f}s (it may be "
                "in a long target transaction or waiting for the target); see drc channel "
                "history before asking again",
                503,
            )
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@dataclass(frozen=True)
class Stoppage:
    """The transaction a channel stopped at, and why (shown before a skip)."""

    scn: SCN | None  # None: the error is not one transaction's (skip refused)
    error: str
    tables: dict[str, int]  # "db.table" -> row changes
    keys: list[str]  # the first few primary keys, for the operator to recognise
    ddl: list[str]

    @classmethod
    def at(cls, scn: SCN | None, exc: BaseException, txns: Sequence[Transaction]) -> Stoppage:
        """Stopped by ``exc`` at ``scn``, whose fragments are ``txns``."""
        tables: dict[str, int] = {}
        keys: list[str] = []
        ddl: list[str] = []
        for txn in txns:
            for change in txn.changes:
                name = f"{change.schema}.{change.table}"
                tables[name] = tables.get(name, 0) + 1
                if len(keys) < STOPPAGE_KEYS_SHOWN:
                    image = change.after if change.after is not None else change.before
                    keys.append(f"{name} {dict(list((image or {}).items())[:3])}")
            ddl.extend(for_log(d.statement) for d in txn.ddl)
        return cls(scn, str(exc), tables, keys, ddl)

    @classmethod
    def of(cls, exc: FatalError) -> Stoppage:
        """Where ``exc`` stopped the channel: the transaction it names, or none."""
        if isinstance(exc.stoppage, Stoppage):
            return exc.stoppage
        return cls(None, str(exc), {}, [], [])

    def as_dict(self) -> dict[str, Any]:
        scn = None if self.scn is None else str(self.scn)
        return {"scn": scn, "error": self.error, "tables": self.tables,
                "keys": self.keys, "ddl": self.ddl}  # fmt: skip


class ChannelControl:
    """Thread-safe: written by the API, read and acted on by the channel."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._paused = False
        self._pause_at: SCN | None = None
        self._requests: list[Request] = []
        self.state = RUNNING  # as the channel last set it
        self.retry = False  # resume of a stopped channel: try the stopped transaction again
        self.stoppage: Stoppage | None = None  # set by the channel while it is stopped
        self.failure: BaseException | None = None  # ... and the error it stopped on
        self.replay_until: SCN | None = None  # after a rewind: changes up to here are replays

    # ------------------------------------------------------------------ asked by the API

    def pause(self, until: SCN | None = None) -> None:
        with self._wake:
            if until is None:
                self._paused, self._pause_at = True, None
            else:
                self._pause_at = until
            self._wake.notify_all()

    def resume(self) -> None:
        with self._wake:
            self._paused, self._pause_at = False, None
            self.retry = self.stoppage is not None
            self._wake.notify_all()

    def submit(self, request: Request) -> Request:
        with self._wake:
            self._requests.append(request)
            self._wake.notify_all()
        return request

    @property
    def pause_at(self) -> SCN | None:
        return self._pause_at

    # ------------------------------------------------------------------ asked by the channel

    def paused(self, applied: SCN) -> bool:
        """Whether the channel should hold now, having applied up to ``applied``."""
        with self._lock:
            if self._pause_at is not None and applied >= self._pause_at:
                self._paused, self._pause_at = True, None
            return self._paused

    def take(self) -> Request | None:
        with self._lock:
            return self._requests.pop(0) if self._requests else None

    def wait(self, stopping: Callable[[], bool], timeout: float) -> None:
        """Sleep until something is asked (or ``timeout``); ``stopping`` is polled by the
        caller."""
        with self._wake:
            if not self._requests and not stopping():
                self._wake.wait(timeout)

    def is_replay(self, scn: SCN) -> bool:
        until = self.replay_until
        return until is not None and scn <= until
