"""What the handlers depend on: :class:`ApiDeps` (built by the composition root) and the
bearer-token check, both as FastAPI dependencies.

Tokens: ``Authorization: Bearer <token>`` is compared with every configured token using
:func:`hmac.compare_digest` and no early exit, so the time taken tells nothing about which
token or how much of one matched. With no tokens configured the API is open, which the config
and :mod:`drc.api.server` allow only on a loopback address.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

import anyio
from fastapi import Depends, Request

from drc.api.budget import ReaderBudget
from drc.api.errors import ApiError
from drc.api.group_service import GroupService
from drc.api.longpolls import LongPollGate
from drc.api.metrics import ApiMetrics
from drc.api.pagecache import PageCache
from drc.api.pull import BackToSource
from drc.api.pullquery import ServerLimits

# Worker threads for reading the buffer: pulls that do not wait and long polls each have their
# own, so long polls (which hold no thread while they wait, see drc.api.commits) never make a
# wait_ms=-1 pull queue for one.
PULL_THREADS = 16
LONG_POLL_THREADS = 16
REALM = 'Bearer realm="drc"'
OPEN_CALLER = "open"


class ChannelDesk(Protocol):
    """The apply channels of this process, as the control endpoints see them (drc.node). The
    desk knows the actions (drc.apply.actions declares them, above the API): the API asks."""

    def channels(self) -> list[dict[str, Any]]: ...

    def history(self, name: str, limit: int) -> list[dict[str, Any]]: ...

    def actions(self) -> Sequence[str]:
        """The actions an operator may call, as the answer to any other lists them."""
        ...

    def act(
        self, name: str, action: str, actor: str, reason: str, *, scn: Any, until: Any, at: Any
    ) -> dict[str, Any]:
        """Do ``action`` with the body's fields (scn, until, at: its time), or raise
        ControlError with the status to answer: 400 for a body the action will not do with."""
        ...

    def gtids_applied(self, gtids: Sequence[Any], channel: str | None) -> dict[str, Any]:
        """``{"applied": bool, ...}`` for these source GTIDs (drc.apply.gtid_wait); in memory,
        so it runs on the event loop. Raises ControlError 404/400 (which channel)."""
        ...

    def on_applied(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each commit that moved a channel (any thread, quick)."""
        ...


@dataclass
class ApiDeps:
    """The replicator's parts the API reads; nothing here is written by the API.

    ``buffer`` is the writer's EventBuffer (in-process, so commits wake long polls; None in a
    ``drc run --role apply`` process, which serves only health, metrics and status),
    ``metastore`` its MetaStore (None: /v1/schema answers 404). ``capture_stats`` returns the
    Replicator's CaptureStats and ``capture_failure`` the fatal error that stopped capture, if
    any (both None when the API serves a buffer nobody captures into). ``protection`` returns
    the lww protection of the datacenter when this process runs its lww guard, ``channels`` the
    apply channels it runs (ApplyChannel.report), ``failures`` the other components of the
    process that stopped on an error, ``heartbeat`` the heartbeat writer's counters.
    """

    buffer: Any
    metastore: Any = None
    datacenter: str = ""
    source: str = ""  # host:port, never credentials
    role: str = "leader"
    # In a replicator group (drc.replicator.member): the live role and group state.
    group: Callable[[], dict[str, Any]] | None = None
    limits: ServerLimits = field(default_factory=ServerLimits)
    tokens: tuple[str, ...] = ()
    capture_stats: Callable[[], Any] | None = None
    capture_failure: Callable[[], BaseException | None] | None = None
    protection: Callable[[], dict[str, Any] | None] | None = None  # lww triggers (node.py)
    channels: Callable[[], list[dict[str, Any]]] | None = None  # apply channels here (node.py)
    peers: Callable[[], list[dict[str, Any]]] | None = None  # remote replicators (status page)
    desk: Callable[[], ChannelDesk | None] | None = None  # channel control (node.py)
    admin_tokens: dict[str, str] = field(default_factory=dict)  # name -> token, may act
    # Reads older than the buffer, from the source binlog (drc.replicator.backfill); None: 410.
    back_to_source: Callable[[Any, Any, int, int], list[Any]] | None = None
    # [replicator] drc_applied: "marker" refuses pulls that would want DRC-applied rows (409).
    drc_applied: str = "full"
    failures: Callable[[], list[tuple[str, BaseException]]] | None = None  # stopped components
    heartbeat: Callable[[], dict[str, Any] | None] | None = None  # drc.replicator.heartbeat
    # Consumer groups (drc.api.group_service); None: /v1/groups answers 404.
    groups: GroupService | None = None
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    stop: threading.Event = field(default_factory=threading.Event)
    wall_clock: Callable[[], float] = time.time
    long_polls: LongPollGate = field(default_factory=LongPollGate)
    budget: ReaderBudget = field(default_factory=ReaderBudget)  # [api] reader_memory_mb
    pages: PageCache[Any] = field(default_factory=PageCache)  # streams' pages, shared
    limiter: anyio.CapacityLimiter = field(
        default_factory=lambda: anyio.CapacityLimiter(PULL_THREADS)
    )
    long_poll_limiter: anyio.CapacityLimiter = field(
        default_factory=lambda: anyio.CapacityLimiter(LONG_POLL_THREADS)
    )
    _token_bytes: tuple[bytes, ...] = field(init=False, repr=False)
    _admin_bytes: tuple[tuple[str, bytes], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if any(not token for token in self.tokens):
            raise ValueError("an API token must not be empty")
        self._token_bytes = tuple(token.encode() for token in self.tokens)
        self._admin_bytes = tuple((n, t.encode()) for n, t in self.admin_tokens.items())

    def __repr__(self) -> str:  # never show tokens
        return f"ApiDeps(datacenter={self.datacenter!r}, tokens={len(self.tokens)})"

    @property
    def open(self) -> bool:
        """True when no token is required."""
        return not self._token_bytes

    def pull_buffer(self) -> Any:
        """What pulls read: the buffer, falling back to the source binlog when configured."""
        if self.back_to_source is None:
            return self.buffer
        return BackToSource(self.buffer, self.back_to_source)

    def token_ok(self, given: bytes) -> bool:
        return self.token_index(given) is not None

    def token_index(self, given: bytes) -> int | None:
        """Which configured token ``given`` is (its index), None if none."""
        found = -1
        for index, token in enumerate(self._token_bytes):
            # No early exit, no branch on the result: constant time in the set.
            match = hmac.compare_digest(given, token)
            found = max(found, index * match - (not match))
        return None if found < 0 else found


def get_deps(request: Request) -> ApiDeps:
    deps: ApiDeps = request.app.state.deps
    return deps


async def _get_deps(request: Request) -> ApiDeps:
    # async: FastAPI runs a plain function dependency in a worker thread, a hand-off per
    # request that cost more than the pull it served
    return get_deps(request)


Deps = Annotated[ApiDeps, Depends(_get_deps)]


def caller(request: Request) -> str | None:
    """Who sent the request: ``"open"`` on an API without tokens, ``"token-<n>"`` for the
    n-th configured token, None without a valid token. Never the token itself."""
    deps = get_deps(request)
    if deps.open:
        return OPEN_CALLER
    index = deps.token_index(_bearer(request))
    return None if index is None else f"token-{index}"


def admin_caller(request: Request) -> str:
    """The name of the admin token the request carries (``"open"`` on an API without tokens);
    403 for any other token: control actions change what a channel applies."""
    deps = get_deps(request)
    if deps.open:
        return OPEN_CALLER
    token = _bearer(request)
    found = ""
    for name, admin in deps._admin_bytes:  # every one compared: constant time in the set
        if hmac.compare_digest(token, admin):
            found = name
    if not found:
        raise ApiError(403, "this action needs an admin token ([api] admin_tokens)")
    return found


def _bearer(request: Request) -> bytes:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return b""
    # Header text is latin-1 decoded by the server; encoding it back gives the bytes sent.
    return token.strip().encode("latin-1", "replace")


async def require_token(request: Request) -> None:
    """401 with WWW-Authenticate unless the request carries a configured bearer token;
    :func:`caller` is then kept in ``request.state.caller`` (the long-poll limits count by it).
    async, like every dependency here: it runs on the event loop, not in a worker thread."""
    who = caller(request)
    if who is not None:
        request.state.caller = who
        return
    header = request.headers.get("authorization")
    if header is None:
        raise ApiError(
            401,
            "this API requires a bearer token: send 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": REALM},
        )
    raise ApiError(
        401,
        "the bearer token is not accepted",
        headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'},
    )
