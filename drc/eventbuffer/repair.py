"""``drc buffer repair``: discard damaged committed records for good, visibly.

A writer refuses to open a buffer whose committed records are damaged (see the recovery rule in
:mod:`drc.eventbuffer.format`). Repair is the operator's explicit choice to lose them instead of
restoring the buffer from a peer: the segments up to the last damaged one are moved to
``DIR/discarded-<time>/`` (kept for inspection, deleted by hand), and the oldest servable SCN
moves past every lost record, so subscribers at older positions get ScnTooOldError (410) and
resync instead of a 200 over a gap. Capture then resumes after that SCN.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from drc.core.errors import BufferStateError
from drc.core.scn import SCN
from drc.eventbuffer.buffer import DEFAULT_INDEX_EVERY
from drc.eventbuffer.format import KEY_BYTES, SegmentHeader
from drc.eventbuffer.layout import (
    DirectoryLock,
    fsync_dir,
    make_private_dir,
    read_meta,
    segment_path,
)
from drc.eventbuffer.recovery import load_segments, scns_after_damage
from drc.eventbuffer.segment import Segment, create_segment_file

log = logging.getLogger(__name__)


@dataclass
class RepairReport:
    directory: Path
    damage: list[str] = field(default_factory=list)  # "segment FILE offset N: reason"
    moved_to: Path | None = None
    moved: list[str] = field(default_factory=list)
    oldest_servable: SCN | None = None

    def summary(self) -> str:
        if self.moved_to is None:
            return (
                f"nothing to repair in {self.directory}: no committed record is damaged (a torn "
                "tail is cut by the writer's own recovery when it opens)"
            )
        return (
            f"repaired {self.directory}: moved {len(self.moved)} segment(s) to {self.moved_to}; "
            f"it now serves reads after SCN {self.oldest_servable} (older positions get 410 "
            "scn_too_old and must resync); capture resumes after that SCN"
        )


def repair_buffer(directory: str | os.PathLike[str]) -> RepairReport:
    """Discard the damaged committed records of the (stopped) buffer in ``directory``.

    Raises BufferLockedError while a writer has it open. Running it again after a crash part
    way through finishes the job.
    """
    path = Path(directory)
    lock = DirectoryLock(path)
    try:
        meta = read_meta(path)
        if meta is None:
            raise BufferStateError(f"{path} is not an EventBuffer directory (no buffer.json)")
        segments = load_segments(path, meta, DEFAULT_INDEX_EVERY, repair=False, sync=False)
        report = RepairReport(path)
        k, newest = _last_damaged(segments, report)
        if k is None:
            return report
        if k == len(segments) - 1:
            # The new oldest segment: its prev_scn is the floor of what may be served.
            seq = segments[k].seq + 1
            header = SegmentHeader(meta.epoch_bytes, seq, newest)
            segment_path(path, seq).unlink(missing_ok=True)  # a torn one of an earlier try
            create_segment_file(segment_path(path, seq), header, sync=True)
            report.oldest_servable = newest
        else:
            report.oldest_servable = segments[k + 1].header.prev_scn
        _move_away(path, segments[: k + 1], report)
        for seg in segments:
            seg.close()
        return report
    finally:
        lock.release()


def _last_damaged(segments: list[Segment], report: RepairReport) -> tuple[int | None, SCN]:
    """Index of the last segment damaged in committed records, and the newest SCN seen in it."""
    found: int | None = None
    newest = b""
    for i, seg in enumerate(segments):
        if seg.error is None:
            continue
        later = scns_after_damage(seg)
        if i == len(segments) - 1 and not later:
            continue  # a torn tail: the writer's recovery cuts it
        report.damage.append(seg.describe_error())
        found = i
        newest = max([seg.last_scn, *later], key=lambda scn: scn[:KEY_BYTES])
    return found, SCN.from_bytes(newest) if newest else SCN.ZERO


def _move_away(directory: Path, gone: list[Segment], report: RepairReport) -> None:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    target = directory / f"discarded-{stamp}"
    make_private_dir(target)
    for seg in gone:
        os.rename(seg.path, target / seg.path.name)
        report.moved.append(seg.path.name)
        log.warning("EventBuffer repair: moved damaged or older segment %s to %s", seg.path, target)
    fsync_dir(target)
    fsync_dir(directory)
    report.moved_to = target
