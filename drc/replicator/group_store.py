"""Consumer groups' state in ZooKeeper (drc.api.group_service.GroupStore), so that every
member of a replicator group serves them and a leader failover keeps them.

One persistent node per group, ``<group path>/consumer_groups/<name>``, holding
drc.core.consumer_groups.GroupState's JSON; writes are compare-and-set on the node's version.
The store has a ZooKeeper session of its own (a member's session is remade on every loss).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from drc.core.errors import RetriableError

CONSUMER_GROUPS = "consumer_groups"
T = TypeVar("T")


class GroupStoreUnavailable(RetriableError):
    """ZooKeeper did not answer a consumer-group request."""


class ZkGroupStore:
    def __init__(self, hosts: str, path: str, timeout_s: float = 6.0) -> None:
        self.root = f"{path.rstrip('/')}/{CONSUMER_GROUPS}"
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._client = KazooClient(
            hosts=hosts,
            timeout=timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=1.5, max_delay=1.0),
            command_retry=KazooRetry(max_tries=3, delay=0.1, backoff=1.5, max_delay=1.0),
        )
        self._started = False

    def _zk(self) -> KazooClient:
        with self._lock:
            if not self._started:
                try:
                    self._client.start(timeout=self._timeout_s)
                    self._client.ensure_path(self.root)
                except (KazooException, KazooTimeoutError, OSError) as exc:
                    raise GroupStoreUnavailable(
                        f"ZooKeeper does not answer for consumer groups ({type(exc).__name__}): "
                        "check [group] zookeeper and retry"
                    ) from exc
                self._started = True
        return self._client

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def names(self) -> list[str]:
        return sorted(self._call(lambda zk: zk.get_children(self.root)))

    def read(self, name: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self._call(lambda zk: zk.get(self._path(name)))
        except NoNodeError:
            return None
        return bytes(data), int(stat.version)

    def create(self, name: str, data: bytes) -> bool:
        try:
            self._call(lambda zk: zk.create(self._path(name), data))
        except NodeExistsError:
            return False
        return True

    def write(self, name: str, data: bytes, version: int) -> bool:
        try:
            self._call(lambda zk: zk.set(self._path(name), data, version=version))
        except (BadVersionError, NoNodeError):
            return False
        return True

    def delete(self, name: str) -> bool:
        try:
            self._call(lambda zk: zk.delete(self._path(name)))
        except NoNodeError:
            return False
        return True

    def _call(self, request: Callable[[KazooClient], T]) -> T:
        zk = self._zk()
        try:
            return request(zk)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except (KazooException, KazooTimeoutError, OSError) as exc:
            raise GroupStoreUnavailable(
                f"ZooKeeper did not answer a consumer-group request ({type(exc).__name__}): "
                "retry shortly"
            ) from exc

    def connected(self) -> bool:
        return self._started and bool(self._client.connected)

    def close(self) -> None:
        with self._lock:
            if self._started:
                self._client.stop()
                self._client.close()
                self._started = False
