"""Consumer groups as the API serves them: the state kept in a :class:`GroupStore` (ZooKeeper
in a replicator group, drc.replicator.group_store; memory for a lone replicator or a test),
changed by compare-and-set of the pure transitions of drc.core.consumer_groups, and the
rebalancer, which runs only where :attr:`GroupService.leads` says (the replicator leader).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from drc.api.group_lag import RangeLag, totals
from drc.core import group_full
from drc.core.consumer_groups import GroupSpec, GroupState, GroupStateError, valid_name
from drc.core.errors import RetriableError
from drc.core.group_full import ChunkRows, FullChunk
from drc.core.scn import SCN

log = logging.getLogger(__name__)
CAS_TRIES = 50
REBALANCE_EVERY_S = 0.5


class GroupStore(Protocol):
    """Where group states are kept: one versioned blob per group name."""

    def names(self) -> list[str]: ...

    def read(self, name: str) -> tuple[bytes, int] | None:
        """The group's data and its version (for :meth:`write`); None if there is none."""
        ...

    def create(self, name: str, data: bytes) -> bool:
        """False if the group exists."""
        ...

    def write(self, name: str, data: bytes, version: int) -> bool:
        """Replace the data if it is still at ``version``; False if it moved (or is gone)."""
        ...

    def delete(self, name: str) -> bool: ...

    def connected(self) -> bool:
        """Whether a request would be answered now (status pages must not wait to connect)."""
        ...

    def close(self) -> None: ...


class FullSource(Protocol):
    """The source database as a full group reads it (drc.replicator.full_source)."""

    def plan(self, spec: GroupSpec) -> list[FullChunk]:
        """The group's tables split into chunks (GroupStateError 400 if there is none)."""
        ...

    def read(self, chunk: FullChunk, start: SCN) -> ChunkRows:
        """The chunk's rows from one consistent read at or after ``start``."""
        ...


Measure = Callable[[GroupState], Sequence[RangeLag]]


def group_summary(state: GroupState, lags: Sequence[RangeLag] | None = None) -> dict[str, Any]:
    """Members, ranges by state, the oldest checkpoint (how far its slowest range is behind);
    with ``lags``, its slowest range's lag and its whole backlog."""
    states = Counter(r.state for r in state.ranges)
    oldest = min(state.position(r.index) for r in state.ranges)
    out: dict[str, Any] = {
        "name": state.spec.name,
        "members": len(state.members),
        "ranges": dict(sorted(states.items())),
        "oldest_checkpoint": str(oldest),
    }
    if state.spec.full:
        out["full"] = group_full.progress(state.chunks)
    if lags is not None:
        out.update(totals(lags))
    return out


class GroupsNotConnected(RetriableError):
    """The store of consumer groups is not connected (yet)."""


class MemoryGroupStore:
    """A GroupStore in this process (a replicator without [group]; unit tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, tuple[bytes, int]] = {}

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._data)

    def read(self, name: str) -> tuple[bytes, int] | None:
        with self._lock:
            return self._data.get(name)

    def create(self, name: str, data: bytes) -> bool:
        with self._lock:
            if name in self._data:
                return False
            self._data[name] = (data, 0)
            return True

    def write(self, name: str, data: bytes, version: int) -> bool:
        with self._lock:
            found = self._data.get(name)
            if found is None or found[1] != version:
                return False
            self._data[name] = (data, version + 1)
            return True

    def delete(self, name: str) -> bool:
        with self._lock:
            return self._data.pop(name, None) is not None

    def connected(self) -> bool:
        return True

    def close(self) -> None:
        pass


def _known_name(name: str) -> str:
    if not valid_name(name):
        raise GroupStateError(404, f"no consumer group {name[:80]!r}: create it first")
    return name


class GroupService:
    """Read and change groups; every change is a compare-and-set retried on a race."""

    def __init__(
        self,
        store: GroupStore,
        leads: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        configured: Sequence[Callable[[], GroupSpec]] = (),
        full: FullSource | None = None,
    ) -> None:
        """``configured``: the groups of the config file ([[consumer_groups]]), each made when
        the leader first creates it (its start SCN may be the buffer's newest then)."""
        self.store = store
        self.leads = leads
        self._clock = clock
        self._configured = configured
        self._ensured = not configured
        self.full = full

    def names(self) -> list[str]:
        return self.store.names()

    def close(self) -> None:
        self.store.close()

    def get(self, name: str) -> GroupState:
        found = self.store.read(_known_name(name))
        if found is None:
            raise GroupStateError(404, f"no consumer group {name!r}: create it first")
        return GroupState.from_json(found[0])

    def _new(self, spec: GroupSpec) -> GroupState:
        if not spec.full:
            return GroupState.new(spec)
        if self.full is None:
            raise GroupStateError(400, "this process cannot read the source's tables: create "
                                  "full groups on a replicator")  # fmt: skip
        return GroupState.new(spec, self.full.plan(spec))

    def create(self, spec: GroupSpec) -> GroupState:
        if self.store.read(_known_name(spec.name)) is not None:  # before planning the chunks
            raise GroupStateError(409, f"consumer group {spec.name!r} exists already")
        state = self._new(spec)
        if not self.store.create(spec.name, state.to_json()):
            raise GroupStateError(409, f"consumer group {spec.name!r} exists already")
        return state

    def ensure(self, spec: GroupSpec) -> None:
        """Create the group unless it exists (a group from the config file)."""
        if self.store.read(spec.name) is None:
            self.store.create(spec.name, self._new(spec).to_json())

    def delete(self, name: str) -> None:
        if not self.store.delete(_known_name(name)):
            raise GroupStateError(404, f"no consumer group {name!r}")

    def update(self, name: str, change: Callable[[GroupState], GroupState]) -> GroupState:
        for _ in range(CAS_TRIES):
            found = self.store.read(_known_name(name))
            if found is None:
                raise GroupStateError(404, f"no consumer group {name!r}: create it first")
            state = GroupState.from_json(found[0])
            changed = change(state)
            if changed is state or self.store.write(name, changed.to_json(), found[1]):
                return changed
        raise GroupStateError(503, f"consumer group {name!r} is changing too fast: retry")

    def join(self, name: str) -> tuple[str, GroupState]:
        member = uuid.uuid4().hex[:16]
        now = self._clock()
        state = self.update(name, lambda s: s.join(member, now))
        if self.leads():  # assign at once rather than at the next rebalance
            state = self.update(name, lambda s: s.rebalance(self._clock()))
        return member, state

    def heartbeat(self, name: str, member: str, released: list[int]) -> GroupState:
        now = self._clock()
        return self.update(name, lambda s: s.heartbeat(member, now, released))

    def rebalance_all(self) -> None:
        if not self._ensured:
            for make in self._configured:
                self.ensure(make())
            self._ensured = True
        for name in self.store.names():
            try:
                self.update(name, lambda s: s.rebalance(self._clock()))
            except GroupStateError:
                pass  # deleted meanwhile

    def states(self) -> list[GroupState]:
        """Every group's state. GroupsNotConnected while the store is not connected: a status
        page never waits for ZooKeeper."""
        if not self.store.connected():
            raise GroupsNotConnected("the consumer groups' store (ZooKeeper) is not connected")
        out = []
        for name in self.names():
            try:
                out.append(self.get(name))
            except GroupStateError:
                continue  # deleted meanwhile
        return out

    def summary(self, measure: Measure | None = None) -> list[dict[str, Any]]:
        """What /v1/status shows of each group (:func:`group_summary`); ``measure`` gives its
        ranges' lag and backlog (drc.api.group_lag) where this process holds the buffer."""
        return [group_summary(s, None if measure is None else measure(s)) for s in self.states()]

    def run_rebalancer(self, stop: threading.Event, every_s: float = REBALANCE_EVERY_S) -> None:
        """Rebalance every group while this process leads, until ``stop``."""
        failing = False
        while not stop.wait(every_s):
            try:
                if self.leads():
                    self.rebalance_all()
                elif not self.store.connected():
                    self.store.names()  # connect here, not in a request
            except Exception as exc:  # the store is unreachable: the next round tries again
                if not failing:  # once per outage, not every round
                    log.warning("consumer group rebalance failed (%s); retrying", exc)
                failing = True
            else:
                if failing:
                    log.info("consumer group rebalance works again")
                failing = False
