"""The status of the other datacenters' replicators, as the channels of this one reach them.

For the status page: each remote URL of each channel is asked for its ``/v1/status`` with the
channel's token and TLS settings, concurrently and briefly, and the answers are kept for a
moment so a page polling every second or two costs the remotes one request per URL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from drc.client.status import fetch_status
from drc.core.errors import DrcError

PEER_TIMEOUT_S = 1.5
CACHE_S = 1.0


@dataclass(frozen=True)
class Peer:
    datacenter: str  # the channel's origin
    url: str
    token: str | None
    verify: Any = True


class PeerStatus:
    """``snapshot()`` -> one entry per remote replicator: its status, or why it is unreachable
    (the error type and the URL only: a message could carry what the caller may not see)."""

    def __init__(
        self,
        peers: list[Peer],
        fetch: Callable[..., dict[str, Any]] = fetch_status,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._peers = peers
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._taken_at = -CACHE_S
        self._last: list[dict[str, Any]] = []

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            if self._clock() - self._taken_at >= CACHE_S:
                self._last = self._ask_all()
                self._taken_at = self._clock()
            return self._last

    def _ask_all(self) -> list[dict[str, Any]]:
        if not self._peers:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(self._peers))) as pool:
            return list(pool.map(self._ask, self._peers))

    def _ask(self, peer: Peer) -> dict[str, Any]:
        entry: dict[str, Any] = {"datacenter": peer.datacenter, "url": peer.url}
        try:
            entry["status"] = self._fetch(
                peer.url, peer.token, timeout=PEER_TIMEOUT_S, verify=peer.verify
            )
            entry["error"] = None
        except (DrcError, ValueError, OSError) as exc:
            entry["status"] = None
            entry["error"] = type(exc).__name__
        return entry
