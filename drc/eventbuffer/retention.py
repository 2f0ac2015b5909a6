"""Which oldest segments retention deletes: a pure decision over sizes, timestamps and a clock.

A segment goes, oldest first, while the buffer is bigger than ``retain_bytes`` or while the
segment's newest record is older than ``retain_seconds``. Only whole segments are deleted, in
order, so the remaining ones stay contiguous and the oldest one's ``prev_scn`` still says
exactly what can be served. The caller passes only the deletable prefix: segments entirely
committed and not the active one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SegmentAge:
    """What retention needs to know of one segment."""

    size_bytes: int
    newest_ms: int | None  # newest record's timestamp; None for a segment without records


@dataclass(frozen=True, slots=True)
class Retention:
    """What a writer keeps: at most ``retain_bytes`` of segment data, and no segment whose
    newest record is older than ``retain_seconds`` by ``clock`` (None: no such limit)."""

    retain_bytes: int | None = None
    retain_seconds: float | None = None
    clock: Callable[[], float] = time.time

    @property
    def keeps_all(self) -> bool:
        return self.retain_bytes is None and self.retain_seconds is None

    def segments_to_delete(self, deletable: Iterable[SegmentAge], total_bytes: int) -> int:
        """How many of the oldest segments to delete (a prefix of ``deletable``, read lazily).

        ``total_bytes`` is the size of the whole buffer, active segment included. A segment
        without records counts as old: deleting it loses nothing.
        """
        limit = self.retain_bytes
        cutoff_ms = None
        if self.retain_seconds is not None:
            cutoff_ms = (self.clock() - self.retain_seconds) * 1000.0
        count = 0
        for seg in deletable:
            too_big = limit is not None and total_bytes > limit
            too_old = cutoff_ms is not None and (seg.newest_ms is None or seg.newest_ms < cutoff_ms)
            if not (too_big or too_old):
                break
            total_bytes -= seg.size_bytes
            count += 1
        return count


KEEP_ALL = Retention()
