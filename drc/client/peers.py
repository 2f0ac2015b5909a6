"""The status of the other datacenters' replicators, as the channels of this one reach them.

For the status page: each remote URL of each channel is asked for its ``/v1/status`` with the
channel's token and TLS settings, concurrently and briefly, and the answers are kept for a
moment so a page polling every second or two costs the remotes one request per URL. A
``zk://`` group is asked for each of its members, found through its ZooKeeper (briefly, and
again only every :data:`RESOLVE_EVERY_S`: a page left open must not hold ZooKeeper busy).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from drc.client import discovery
from drc.client.status import fetch_status
from drc.core.errors import DrcError

PEER_TIMEOUT_S = 1.5
CACHE_S = 1.0
RESOLVE_EVERY_S = 10.0


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
        resolver: Callable[[str], list[str]] | None = None,
    ) -> None:
        self._peers = peers
        self._resolver = resolver or (lambda spec: discovery.resolve(spec, PEER_TIMEOUT_S))
        self._groups: dict[str, tuple[float, tuple[str, ...]]] = {}  # spec -> (when, URLs)
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
        peers = [member for peer in self._peers for member in self._members(peer)]
        if not peers:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(peers))) as pool:
            return list(pool.map(self._ask, peers))

    def _members(self, peer: Peer) -> list[Peer]:
        """The peer itself, or the members of its group (the group's URL while none is
        known, shown unreachable)."""
        if not discovery.is_group(peer.url):
            return [peer]
        taken_at, urls = self._groups.get(peer.url, (None, ()))
        if taken_at is None or self._clock() - taken_at >= RESOLVE_EVERY_S:
            urls = discovery.expand([peer.url], self._resolver)
            self._groups[peer.url] = (self._clock(), urls)
        return [dataclasses.replace(peer, url=url) for url in urls]

    def _ask(self, peer: Peer) -> dict[str, Any]:
        entry: dict[str, Any] = {"datacenter": peer.datacenter, "url": peer.url}
        if discovery.is_group(peer.url):  # its ZooKeeper did not answer or names no member
            return {**entry, "status": None, "error": discovery.DiscoveryError.__name__}
        try:
            entry["status"] = self._fetch(
                peer.url, peer.token, timeout=PEER_TIMEOUT_S, verify=peer.verify
            )
            entry["error"] = None
        except (DrcError, ValueError, OSError) as exc:
            entry["status"] = None
            entry["error"] = type(exc).__name__
        return entry
