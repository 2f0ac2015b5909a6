"""Consumer groups: members sharing a subscription's partition ranges, and their rebalance.

Pure: a :class:`GroupState` in, a new one out; where it is kept (ZooKeeper) and when the
rebalancer runs (on the replicator leader) are the adapters'. One group's state::

    spec      name, tables, row filters, partitioning ("key" or "table"), number of ranges,
              heartbeat timeout, start SCN (where a range without a checkpoint reads from)
    members   id -> last heartbeat (wall-clock seconds, the API node's clock)
    ranges    per range of drc.core.partitions.split_ranges(count): owner, state, version,
              checkpoint (the SCN its owner committed; every change up to it is done)
    chunks    a full group's full channels (drc.core.group_full): while one is not
              TERMINATED no range is assigned, and a range pull is refused (409
              ``full_phase_running``)

A range's states follow Tablestore Tunnel's channels::

    CLOSED --assign (version + 1)--> OPEN --rebalance--> CLOSING --owner releases--> CLOSED
       ^                               |                    |  (or closing_timeout)
       +--------owner dead/left--------+--------------------+

A range moves to a new owner only through CLOSED, except when its owner is dead (no heartbeat
for ``heartbeat_timeout_s``) or left: then it is reassigned at once. Every assignment raises
the range's version, so a member that still holds an older one is refused (the API's 409) and
reads from the committed checkpoint again: the new owner never competes with a stale one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drc.core import group_full
from drc.core.group_full import TERMINATED, FullChunk
from drc.core.partitions import split_ranges
from drc.core.scn import SCN

OPEN = "open"
CLOSING = "closing"
CLOSED = "closed"
BY_KEY = "key"
BY_TABLE = "table"
DEFAULT_RANGES = 64
DEFAULT_HEARTBEAT_TIMEOUT_S = 10.0
DEFAULT_CHUNK_ROWS = 10_000
FORMAT = 1
FULL_PHASE = "full_phase_running"  # the 409 code of an incremental range asked for too early


class GroupStateError(ValueError):
    """A request the group's state refuses; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True, slots=True)
class GroupSpec:
    name: str
    tables: str = ""  # a TableFilter list, as the pull's ``tables`` ("" = every table)
    rows: Mapping[str, str] | None = None  # {"db.table pattern": predicate}, as the pull's
    partitioning: str = BY_KEY
    ranges: int = DEFAULT_RANGES
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
    start: str = str(SCN.zero())  # where a range without a checkpoint reads after
    skip_drc: bool = False
    full: bool = False  # start with the full phase (drc.core.group_full) at ``start``
    chunk_rows: int = DEFAULT_CHUNK_ROWS  # rows per full channel (chunk), about

    def __post_init__(self) -> None:
        if not valid_name(self.name):
            raise GroupStateError(
                400, f"a group name is 1-64 letters, digits, '_' or '-', got {self.name!r}"
            )
        if self.partitioning not in (BY_KEY, BY_TABLE):
            raise GroupStateError(
                400, f"partitioning is {BY_KEY!r} or {BY_TABLE!r}, got {self.partitioning!r}"
            )
        try:
            split_ranges(self.ranges)
            SCN.parse(self.start)
        except ValueError as exc:
            raise GroupStateError(400, str(exc)) from exc
        if not self.heartbeat_timeout_s > 0:
            raise GroupStateError(400, "heartbeat_timeout_s must be > 0")
        if self.chunk_rows < 1:
            raise GroupStateError(400, "chunk_rows must be at least 1")
        if self.full and self.rows:
            raise GroupStateError(
                400, "a full group copies whole tables: drop rows, or leave full out"
            )


def valid_name(name: str) -> bool:
    """1-64 ASCII letters, digits, '_' or '-': a ZooKeeper node name and a URL segment."""
    return 0 < len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "_-") for c in name)


@dataclass(frozen=True, slots=True)
class RangeState:
    index: int
    owner: str | None = None
    state: str = CLOSED
    version: int = 0
    checkpoint: str | None = None  # SCN text; None: the group's start
    closing_since: float | None = None

    def held_by(self, member: str) -> bool:
        return self.owner == member and self.state in (OPEN, CLOSING)


@dataclass(frozen=True, slots=True)
class GroupState:
    spec: GroupSpec
    members: Mapping[str, float]  # id -> last heartbeat
    ranges: tuple[RangeState, ...]
    chunks: tuple[FullChunk, ...] = ()  # the full phase's channels (full groups only)

    @classmethod
    def new(cls, spec: GroupSpec, chunks: Sequence[FullChunk] = ()) -> GroupState:
        ranges = tuple(RangeState(i) for i in range(spec.ranges))
        return cls(spec, {}, ranges, tuple(chunks))

    @property
    def full_running(self) -> bool:
        return group_full.running(self.chunks)

    def full_assignment(self, member: str) -> list[dict[str, Any]]:
        """The full channels (chunks) ``member`` holds."""
        return [group_full.view(c) for c in self.chunks if c.held_by(member)]

    def check_chunk(self, member: str, index: int, version: int) -> FullChunk:
        """The chunk if ``member`` holds it at ``version``, else GroupStateError (409)."""
        self._known(member)
        if not 0 <= index < len(self.chunks):
            raise GroupStateError(404, f"group {self.spec.name} has {len(self.chunks)} chunks")
        c = self.chunks[index]
        if not c.held_by(member) or c.version != version:
            raise GroupStateError(
                409,
                f"chunk {index} of group {self.spec.name} is at version {c.version}, "
                f"{c.state} (you sent version {version}): heartbeat for your current "
                "assignment",
            )
        return c

    def serve_chunk(self, member: str, index: int, version: int, read_at: SCN) -> GroupState:
        """Record where the chunk's rows were read (the newest serving)."""
        c = self.check_chunk(member, index, version)
        return self._with_chunk(dataclasses.replace(c, read_at=str(read_at)))

    def commit_chunk(self, member: str, index: int, version: int) -> GroupState:
        """The owner processed the chunk's rows: TERMINATED, and it gets its next chunk at
        once (not at the next rebalance)."""
        c = self.check_chunk(member, index, version)
        done = self._with_chunk(dataclasses.replace(c, state=TERMINATED))
        return dataclasses.replace(done, chunks=group_full.assigned(done.chunks, [member]))

    def _with_chunk(self, chunk: FullChunk) -> GroupState:
        chunks = list(self.chunks)
        chunks[chunk.index] = chunk
        return dataclasses.replace(self, chunks=tuple(chunks))

    def position(self, index: int) -> SCN:
        """Where range ``index`` reads after: its checkpoint, else the group's start."""
        checkpoint = self.ranges[index].checkpoint
        return SCN.parse(checkpoint if checkpoint is not None else self.spec.start)

    def assignment(self, member: str) -> list[dict[str, Any]]:
        """What ``member`` holds: each range's index, bounds, state, version and position."""
        bounds = split_ranges(self.spec.ranges)
        return [
            {
                "range": r.index,
                "first": bounds[r.index][0],
                "last": bounds[r.index][1],
                "state": r.state,
                "version": r.version,
                "checkpoint": str(self.position(r.index)),
            }
            for r in self.ranges
            if r.held_by(member)
        ]

    # -- members' requests ---------------------------------------------------------------

    def join(self, member: str, now: float) -> GroupState:
        return dataclasses.replace(self, members={**self.members, member: now})

    def heartbeat(self, member: str, now: float, released: Sequence[int] = ()) -> GroupState:
        """A member's heartbeat; the CLOSING ranges it lists in ``released`` become CLOSED."""
        self._known(member)
        ranges = list(self.ranges)
        for index in released:
            if 0 <= index < len(ranges):
                r = ranges[index]
                if r.owner == member and r.state == CLOSING:
                    ranges[index] = dataclasses.replace(
                        r, owner=None, state=CLOSED, closing_since=None
                    )
        return dataclasses.replace(
            self, members={**self.members, member: now}, ranges=tuple(ranges)
        )

    def leave(self, member: str) -> GroupState:
        """The member goes: its ranges are CLOSED at once (their checkpoints stay)."""
        members = {m: t for m, t in self.members.items() if m != member}
        ranges = tuple(_released(r) if r.owner == member else r for r in self.ranges)
        chunks = group_full.released(self.chunks, members)
        return dataclasses.replace(self, members=members, ranges=ranges, chunks=chunks)

    def check_holder(self, member: str, index: int, version: int) -> RangeState:
        """The range if ``member`` holds it at ``version``; else GroupStateError 409 (or 404
        for a range that does not exist, 410 for a member the group no longer knows)."""
        self._known(member)
        if not 0 <= index < len(self.ranges):
            raise GroupStateError(
                404, f"group {self.spec.name} has ranges 0..{len(self.ranges) - 1}"
            )
        r = self.ranges[index]
        if self.full_running:
            raise GroupStateError(
                409,
                f"group {self.spec.name} is in its full phase ({self._full_progress()}): "
                "its incremental ranges open when every chunk is TERMINATED; read your "
                "chunks, and heartbeat for the ranges then",
                FULL_PHASE,
            )
        if not r.held_by(member) or r.version != version:
            raise GroupStateError(
                409,
                f"range {index} of group {self.spec.name} is at version {r.version}, "
                f"{r.state}, held by {'nobody' if r.owner is None else 'another member'}"
                f" (you sent version {version}): heartbeat for your current assignment and "
                "read on from its checkpoint",
            )
        return r

    def commit(self, member: str, index: int, version: int, scn: SCN) -> GroupState:
        """Move range ``index``'s checkpoint to ``scn`` (never back)."""
        r = self.check_holder(member, index, version)
        if scn <= self.position(index):
            return self
        ranges = list(self.ranges)
        ranges[index] = dataclasses.replace(r, checkpoint=str(scn))
        return dataclasses.replace(self, ranges=tuple(ranges))

    def reset(self, scn: SCN) -> GroupState:
        """Every range reads after ``scn``; versions move so that no member reads on from
        an older position."""
        ranges = tuple(
            dataclasses.replace(r, checkpoint=str(scn), version=r.version + 1) for r in self.ranges
        )
        return dataclasses.replace(self, ranges=ranges)

    def _known(self, member: str) -> None:
        if member not in self.members:
            raise GroupStateError(
                410,
                f"member {member} is not in group {self.spec.name} (it left, or missed "
                "heartbeats for longer than the heartbeat timeout): join again",
            )

    # -- the rebalancer ------------------------------------------------------------------

    def rebalance(self, now: float) -> GroupState:
        """Drop dead members, hand their ranges out at once, release ranges CLOSING for too
        long, close what over-quota members hold, and give CLOSED ranges to the members
        below their quota (at most ``count // members + 1`` each)."""
        timeout = self.spec.heartbeat_timeout_s
        live = {m: t for m, t in self.members.items() if now - t <= timeout}
        ranges = [
            _released(r)
            if (r.owner is not None and r.owner not in live)
            or (
                r.state == CLOSING
                and r.closing_since is not None
                and now - r.closing_since > timeout
            )
            else r
            for r in self.ranges
        ]
        chunks = group_full.assigned(group_full.released(self.chunks, live), sorted(live))
        if live and not group_full.running(chunks):  # ranges open after the full phase
            quotas = _quotas(ranges, sorted(live))
            ranges = _close_excess(ranges, quotas, now)
            ranges = _assign_free(ranges, quotas)
        state = dataclasses.replace(self, members=live, ranges=tuple(ranges), chunks=chunks)
        return self if state == self else state

    def _full_progress(self) -> str:
        done = group_full.progress(self.chunks)
        return f"{done['terminated']} of {done['chunks']} chunks done"

    # -- stored form ---------------------------------------------------------------------

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "spec": {**dataclasses.asdict(self.spec), "rows": _rows(self.spec.rows)},
            "members": dict(sorted(self.members.items())),
            "ranges": [
                [r.index, r.owner, r.state, r.version, r.checkpoint, r.closing_since]
                for r in self.ranges
            ],
            "chunks": [c.row() for c in self.chunks],
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> GroupState:
        body = json.loads(data)
        if body.get("format") != FORMAT:
            raise ValueError(f"group state format {body.get('format')!r} is not {FORMAT}")
        spec = GroupSpec(**body["spec"])
        ranges = tuple(RangeState(*row) for row in body["ranges"])
        chunks = tuple(FullChunk.from_row(row) for row in body.get("chunks", ()))
        return cls(spec, dict(body["members"]), ranges, chunks)


def _rows(rows: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if rows is None else dict(rows)


def _closing_for(r: RangeState, now: float) -> float:
    """How long ``r`` has been CLOSING (0 if it is not): an owner that does not release it
    within the heartbeat timeout loses it."""
    return now - r.closing_since if r.state == CLOSING and r.closing_since is not None else 0.0


def _released(r: RangeState) -> RangeState:
    return dataclasses.replace(r, owner=None, state=CLOSED, closing_since=None)


def _quotas(ranges: Sequence[RangeState], members: Sequence[str]) -> dict[str, int]:
    """How many OPEN ranges each live member should hold: ``count // n``, one more for the
    ``count % n`` members that hold most now (so fewer ranges move)."""
    held = {m: 0 for m in members}
    for r in ranges:
        if r.state == OPEN and r.owner in held:
            held[r.owner] += 1
    base, extra = divmod(len(ranges), len(members))
    by_load = sorted(members, key=lambda m: (-held[m], m))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(by_load)}


def _close_excess(
    ranges: list[RangeState], quotas: Mapping[str, int], now: float
) -> list[RangeState]:
    held = {m: 0 for m in quotas}
    out = list(ranges)
    for i, r in enumerate(ranges):
        if r.state != OPEN or r.owner not in held:
            continue
        held[r.owner] += 1
        if held[r.owner] > quotas[r.owner]:
            out[i] = dataclasses.replace(r, state=CLOSING, closing_since=now)
    return out


def _assign_free(ranges: list[RangeState], quotas: Mapping[str, int]) -> list[RangeState]:
    held = {m: 0 for m in quotas}
    for r in ranges:
        if r.state == OPEN and r.owner in held:
            held[r.owner] += 1
    out = list(ranges)
    for i, r in enumerate(ranges):
        if r.state != CLOSED:
            continue
        taker = min(sorted(quotas), key=lambda m: held[m] - quotas[m])  # the most room
        if held[taker] >= quotas[taker]:
            break
        held[taker] += 1
        out[i] = dataclasses.replace(r, owner=taker, state=OPEN, version=r.version + 1)
    return out
