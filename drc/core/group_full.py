"""The full phase of a consumer group (``full = true``): Tablestore Tunnel's full-data channels.

Pure. A full group starts with one *full channel* per chunk of its tables (a primary-key range,
as drc.bulk.planner splits a table for ``drc snapshot``), planned when the group is created at
the group's start SCN ``S`` (the replicator's newest SCN then). A full channel's states::

    OPEN (owner None) --assign (version + 1)--> OPEN (owner m) --m commits--> TERMINATED
                  ^                                   |
                  +------- owner dead or left --------+

Each live member holds at most CHUNKS_PER_MEMBER chunks at a time and gets the next one when
it commits (so members that join later share the work, and a slow member holds little);
chunks are handed out again at once when their owner dies or leaves; the version refuses a
stale owner's commit (409). While any chunk is not TERMINATED the group assigns no incremental
range (drc.core.consumer_groups); once every chunk is, the ranges are handed out as usual and
read after ``S``.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drc.core.scn import SCN
from drc.core.value_codec import decode_value, encode_value

OPEN = "open"
TERMINATED = "terminated"
CHUNKS_PER_MEMBER = 2  # held at once: the rest wait, so members that join later get work


@dataclass(frozen=True, slots=True)
class FullChunk:
    """Rows of ``table`` ("schema.table") whose ``columns`` lie in (lower, upper]."""

    index: int
    table: str
    columns: tuple[str, ...]
    lower: str | None  # encode_bound's text; None: unbounded
    upper: str | None
    owner: str | None = None
    state: str = OPEN
    version: int = 0
    read_at: str | None = None  # SCN of the consistent read its last owner was served

    def held_by(self, member: str) -> bool:
        return self.owner == member and self.state == OPEN

    def row(self) -> list[Any]:
        return [self.index, self.table, list(self.columns), self.lower, self.upper,
                self.owner, self.state, self.version, self.read_at]  # fmt: skip

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> FullChunk:
        index, table, columns, lower, upper, owner, state, version, read_at = row
        return cls(index, table, tuple(columns), lower, upper, owner, state, version, read_at)


@dataclass(frozen=True, slots=True)
class ChunkRows:
    """A chunk's rows as served: from one consistent read at ``read_at``."""

    read_at: SCN  # the read's binlog position as an SCN of the captured stream
    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]  # wire JSON values (drc.core.jsonwire.value_to_json)


def encode_bound(values: tuple[Any, ...] | None) -> str | None:
    """A chunk bound (key values) as text for the group's stored JSON."""
    return None if values is None else base64.b64encode(encode_value(list(values))).decode()


def decode_bound(text: str | None) -> tuple[Any, ...] | None:
    return None if text is None else tuple(decode_value(base64.b64decode(text)))


def running(chunks: Sequence[FullChunk]) -> bool:
    """Whether the full phase runs: a chunk is not TERMINATED yet."""
    return any(c.state != TERMINATED for c in chunks)


def released(chunks: Sequence[FullChunk], live: Mapping[str, Any]) -> tuple[FullChunk, ...]:
    """Chunks whose owner is not in ``live`` lose it (OPEN, no owner)."""
    return tuple(
        dataclasses.replace(c, owner=None)
        if c.state == OPEN and c.owner is not None and c.owner not in live
        else c
        for c in chunks
    )


def assigned(
    chunks: Sequence[FullChunk], members: Sequence[str], cap: int = CHUNKS_PER_MEMBER
) -> tuple[FullChunk, ...]:
    """Ownerless OPEN chunks given (version + 1) to the ``members`` holding the fewest, each up
    to ``cap``."""
    if not members:
        return tuple(chunks)
    held = {m: 0 for m in members}
    for c in chunks:
        if c.state == OPEN and c.owner is not None:
            held[c.owner] = held.get(c.owner, 0) + 1
    out = list(chunks)
    for i, c in enumerate(chunks):
        if c.state == OPEN and c.owner is None:
            taker = min(sorted(members), key=lambda m: held[m])
            if held[taker] >= cap:
                break
            held[taker] += 1
            out[i] = dataclasses.replace(c, owner=taker, version=c.version + 1)
    return tuple(out)


def progress(chunks: Sequence[FullChunk]) -> dict[str, int]:
    return {"chunks": len(chunks), "terminated": sum(c.state == TERMINATED for c in chunks)}


def view(chunk: FullChunk) -> dict[str, Any]:
    """What a member is told of a chunk it holds."""
    return {"chunk": chunk.index, "table": chunk.table, "version": chunk.version}
