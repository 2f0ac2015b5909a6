"""How far each range of a consumer group is behind the buffer (/metrics, /v1/status):

- ``lag_seconds``: now - source commit time of the first record after the range's position;
  0 when there is none (caught up). Records without a commit time (progress markers carry 0)
  are looked past within one small read; if that read holds only such records, 0.
- ``backlog_bytes``: buffer bytes stored after the range's position: the rest of that
  record's segment from its offset plus the later segments (headers included).

A range whose position retention has already deleted (ScnTooOldError: its next pull is
refused 410) counts from the oldest record the buffer holds, so its lag and backlog are those
of the whole buffer, and ``too_old`` says so. A read that fails otherwise (a corrupt record,
retention racing the read) leaves the range unmeasured (None): the next scrape tries again.
One small read per distinct range position per call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drc.core.consumer_groups import GroupState
from drc.core.errors import CorruptRecordError, RetriableError, ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer.format import HEADER_SIZE

LOOK_PAST_RECORDS = 16  # records read to find one with a commit time
LOOK_PAST_BYTES = 64 << 10


@dataclass(frozen=True)
class RangeLag:
    range: int
    lag_seconds: float | None
    backlog_bytes: int | None
    too_old: bool = False


def range_lag(buffer: Any, index: int, after: SCN, now_s: float) -> RangeLag:
    """Lag and backlog of one range reading after ``after`` (see the module docstring)."""
    too_old = False
    try:
        try:
            records = buffer.read_after(after, LOOK_PAST_RECORDS, LOOK_PAST_BYTES)
        except ScnTooOldError:
            too_old = True
            records = buffer.read_after(buffer.oldest_servable, LOOK_PAST_RECORDS, LOOK_PAST_BYTES)
    except (CorruptRecordError, RetriableError, ScnTooOldError):
        return RangeLag(index, None, None, too_old)
    if not records:
        return RangeLag(index, 0.0, 0, too_old)
    first = records[0]
    stamped = next((r.timestamp_ms for r in records if r.timestamp_ms > 0), None)
    lag = 0.0 if stamped is None else max(0.0, now_s - stamped / 1000)
    return RangeLag(index, lag, backlog(buffer.segments(), first.segment, first.offset), too_old)


def backlog(segments: Sequence[Any], seq: int, offset: int) -> int:
    """Bytes from ``offset`` in segment ``seq`` to the end of the newest segment."""
    total = 0
    for segment in segments:
        if segment.seq == seq:
            total += max(0, segment.end - offset)
        elif segment.seq > seq:
            total += max(0, segment.end - HEADER_SIZE)
    return total


def group_lag(buffer: Any, state: GroupState, now_s: float) -> list[RangeLag]:
    """Each range's lag and backlog; [] where this process holds no buffer."""
    if buffer is None:
        return []
    out = []
    seen: dict[SCN, RangeLag] = {}  # ranges often stand at one position: read it once
    for r in state.ranges:
        position = state.position(r.index)
        found = seen.get(position)
        if found is None:
            found = seen[position] = range_lag(buffer, r.index, position, now_s)
        out.append(dataclasses.replace(found, range=r.index))
    return out


def totals(lags: Sequence[RangeLag]) -> dict[str, Any]:
    """A group's slowest range and its whole backlog (None when no range was measured)."""
    lag = [x.lag_seconds for x in lags if x.lag_seconds is not None]
    size = [x.backlog_bytes for x in lags if x.backlog_bytes is not None]
    return {
        "max_lag_seconds": max(lag, default=None),
        "backlog_bytes": sum(size) if size else None,
    }
