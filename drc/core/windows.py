"""Snapshot windows: how a channel treats the changes of a table a snapshot copied. Pure.

``drc snapshot`` copies a table from the origin's database while writes go on, then the channel
joins it. Each copied table gets a window, two SCNs of the origin's stream::

    stream  ........ copied_at ................ converge_until ..................>
    change  dropped: every     | applied converging: the     | applied as usual
            chunk holds it     | row may already be at a     | (the target equals the
            already            | later state (no conflict    | source as of here)
                               | detection, nothing logged)  |

- ``copied_at`` is at or before the point every chunk was read at, so a change up to it is in
  every chunk and applying it again could only go backwards (or, for a table without a key,
  duplicate a row): it is dropped.
- Between the two, a chunk may have been read after the change: the target row can be at a
  later state than the change's before-image. Keyed changes are written as idempotent upserts
  and deletes by key without conflict detection (``converging``), so each row ends with its
  last change's effect, which is the source's state; no false conflict is logged. (On an lww
  table they are decided by their versions, unlogged: drc.conflicts.engine.)
- ``converge_until`` is at or after the point the last chunk was read at. Past it the target
  holds exactly what the source held, and changes apply with conflict detection again.

A table without a key is copied in one consistent read at a known binlog position, so its
window is empty (``copied_at == converge_until``): its changes are dropped up to that point and
applied exactly once after it, never both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drc.core.scn import SCN


@dataclass(frozen=True, slots=True)
class Window:
    """One copied table of a channel: source and target names, and its two SCNs."""

    source: tuple[str, str]  # (db, table) on the origin
    target: tuple[str, str]  # (db, table) on this datacenter (after map_tables)
    copied_at: SCN
    converge_until: SCN

    def __post_init__(self) -> None:
        if self.converge_until < self.copied_at:
            raise ValueError(
                f"window of {'.'.join(self.target)}: converge_until {self.converge_until} is "
                f"before copied_at {self.copied_at}"
            )


class Windows:
    """A channel's windows by target table (what its filter stage and engine ask)."""

    def __init__(self, windows: Iterable[Window] = ()) -> None:
        self.by_target = {w.target: w for w in windows}

    def __bool__(self) -> bool:
        return bool(self.by_target)

    def drops(self, scn: SCN, schema: str, table: str) -> bool:
        """A change at ``scn`` to the target table is already in its copy."""
        window = self.by_target.get((schema, table))
        return window is not None and scn <= window.copied_at

    def converging(self, scn: SCN, schema: str, table: str) -> bool:
        """A change at ``scn`` to the target table is applied without conflict detection."""
        window = self.by_target.get((schema, table))
        return window is not None and window.copied_at < scn <= window.converge_until

    def open_after(self, scn: SCN) -> list[Window]:
        """The windows a channel at ``scn`` has not passed yet."""
        return [w for w in self.by_target.values() if w.converge_until > scn]

    def source_names(self) -> list[str]:
        """``db.table`` of every joined source table (the channel's selection includes them)."""
        return sorted(f"{db}.{table}" for db, table in (w.source for w in self.by_target.values()))
