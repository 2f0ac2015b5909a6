"""When a difference seen under live replication is real: the recheck rule. Pure.

A row that differs between the source and the target may only be in flight. Verify rechecks
each differing row in rounds::

    round k:  read the row on the source (image A_k), then the source's binlog end P_k
              wait until the channel has applied the source's changes up to P_k
              read the row on the target (image B_k), then the target's binlog end Q_k
              A_k == B_k                      -> equal after all: dropped
              (A_k, B_k) == (A_k-1, B_k-1)    -> confirmed: a real difference
              otherwise                       -> still moving: another round
              wait until the reverse channel (target -> source), if any, has applied the
              target's changes up to Q_k

Why a repeated pair is real: between the two rounds both channels passed the points where the
images were read (every source change the target had not seen at round k-1 is on the target,
every target change is on the source), so a row that nobody wrote meanwhile is equal on both
sides, unless it differs for a reason replication does not fix (a write outside the binlog,
a lost change). A row written in between shows a new image and gets another round; after
``max_rounds`` it is reported as unsettled (kept changing), never as a difference.

A binlog point is compared with a channel's checkpoint SCN by (log_index, log_pos) when both
name the same server; positions of another server (the origin failed over) are not comparable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drc.core.scn import SCN

_INDEX = re.compile(r"\.([0-9]+)$")


@dataclass(frozen=True, slots=True, order=True)
class BinlogPoint:
    """The end of a server's binlog when it was read (SHOW MASTER STATUS)."""

    server_id: int
    log_index: int
    log_pos: int


def binlog_point(server_id: int, file: str, pos: int) -> BinlogPoint:
    """The point of ``file`` (``mysql-bin.000012``) and ``pos``."""
    found = _INDEX.search(file)
    if found is None:
        raise ValueError(f"binlog file name {file!r} has no numeric suffix")
    return BinlogPoint(server_id, int(found[1]), pos)


def reached(applied: SCN, point: BinlogPoint) -> bool | None:
    """Whether a checkpoint at ``applied`` covers everything the server had logged at
    ``point``; None when they name different servers (not comparable)."""
    if applied.server_id != point.server_id:
        return None
    return (applied.log_index, applied.log_pos) >= (point.log_index, point.log_pos)


def within(scn: SCN, point: BinlogPoint) -> bool | None:
    """Whether the transaction at ``scn`` was logged at or before ``point``; None when they
    name different servers."""
    if scn.server_id != point.server_id:
        return None
    return (scn.log_index, scn.log_pos) <= (point.log_index, point.log_pos)


Images = tuple[Any, Any]  # (source image, target image); None where the row is absent


@dataclass(frozen=True, slots=True)
class Round:
    """One recheck round's verdicts."""

    equal: frozenset[Any]
    confirmed: dict[Any, Images]
    moving: dict[Any, Images]


def judge(previous: Mapping[Any, Images], current: Mapping[Any, Images]) -> Round:
    """Sort each key of ``current`` by the rule in the module docstring; ``previous`` holds
    the images of the round before (a key absent there was not seen yet)."""
    equal, confirmed, moving = set(), {}, {}
    for key, images in current.items():
        if images[0] == images[1]:
            equal.add(key)
        elif key in previous and previous[key] == images:
            confirmed[key] = images
        else:
            moving[key] = images
    return Round(frozenset(equal), confirmed, moving)
