"""Offline checks and descriptions of a buffer directory, for ``drc buffer verify/inspect``.

:func:`verify_buffer` reads every byte of every segment and checks it against the format
(:mod:`drc.eventbuffer.format`): header fields and CRC, the epoch, the file name, the
``prev_scn`` chain between segments, every record's framing, CRC, padding, flags, SCN order and
LZ4 payload. It changes nothing and needs no lock, so it runs on a live buffer too (where a
record being written at that instant may show up as a torn tail of the last segment).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drc.core.errors import BufferStateError, CorruptRecordError
from drc.core.scn import SCN
from drc.eventbuffer.buffer import EventBuffer
from drc.eventbuffer.format import (
    FLAG_MORE,
    HEADER_SIZE,
    decode_frame,
    decode_header,
    decode_payload,
    frames_after,
    is_zero,
    order_error,
)
from drc.eventbuffer.layout import BufferMeta, list_segments, read_meta, segment_path
from drc.eventbuffer.segment import close_quietly, map_file


@dataclass(frozen=True, slots=True)
class Problem:
    """The first thing wrong in one file."""

    path: Path
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: offset {self.offset}: {self.reason}"


@dataclass(slots=True)
class SegmentCheck:
    """What verification found in one segment."""

    path: Path
    seq: int
    records: int = 0
    size_bytes: int = 0
    first_scn: bytes | None = None
    last_scn: bytes | None = None
    last_more: bool | None = None
    problem: Problem | None = None


@dataclass(slots=True)
class VerifyReport:
    directory: Path
    epoch: str | None = None
    segments: list[SegmentCheck] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        records = sum(s.records for s in self.segments)
        size = sum(s.size_bytes for s in self.segments)
        used = [s for s in self.segments if s.records]
        span = (
            f"SCN {_text(used[0].first_scn)} .. {_text(used[-1].last_scn)}"
            if used
            else "no records"
        )
        state = "OK" if self.ok else f"{len(self.problems)} problem(s)"
        return (
            f"{state}: {self.directory}: epoch {self.epoch}, {len(self.segments)} segment(s), "
            f"{records} record(s), {size} bytes, {span}"
        )


def verify_buffer(directory: str | os.PathLike[str]) -> VerifyReport:
    """Check every segment; the report lists the first problem of each bad file."""
    path = Path(directory)
    report = VerifyReport(path)
    try:
        meta = read_meta(path) if path.is_dir() else None
    except BufferStateError as exc:
        report.problems.append(Problem(path / "buffer.json", 0, str(exc)))
        return report
    if meta is None:
        report.problems.append(Problem(path, 0, "not an EventBuffer directory (no buffer.json)"))
        return report
    report.epoch = meta.epoch
    seqs = list_segments(path)
    if not seqs:
        report.problems.append(Problem(path, 0, "no segment files"))
    previous: SegmentCheck | None = None
    for seq in seqs:
        if previous is not None and seq != previous.seq + 1:
            reason = f"segments {previous.seq + 1}..{seq - 1} are missing"
            report.problems.append(Problem(segment_path(path, seq), 0, reason))
            previous = None
        check = _check_segment(segment_path(path, seq), seq, meta, previous)
        report.segments.append(check)
        if check.problem is not None:
            report.problems.append(check.problem)
        previous = check
    return report


def _check_segment(
    path: Path, seq: int, meta: BufferMeta, previous: SegmentCheck | None
) -> SegmentCheck:
    check = SegmentCheck(path, seq, size_bytes=path.stat().st_size)
    try:
        mm = map_file(path)
    except CorruptRecordError as exc:
        check.problem = Problem(path, 0, f"segment header is short ({exc})")
        return check
    try:
        with memoryview(mm) as buf:
            problem = _check_header(buf, path, seq, meta, previous, check)
            if problem is None:
                problem = _check_records(buf, path, check)
                if problem is not None:
                    problem = _explain(buf, problem)
            check.problem = problem
    finally:
        close_quietly(mm)
    return check


def _check_header(
    buf: memoryview,
    path: Path,
    seq: int,
    meta: BufferMeta,
    previous: SegmentCheck | None,
    check: SegmentCheck,
) -> Problem | None:
    try:
        header = decode_header(buf[:HEADER_SIZE])
    except CorruptRecordError as exc:
        return Problem(path, 0, str(exc))
    if header.epoch != meta.epoch_bytes:
        return Problem(path, 16, f"epoch {header.epoch.hex()} is not the buffer's {meta.epoch}")
    if header.seq != seq:
        return Problem(path, 32, f"header says segment {header.seq}, file name says {seq}")
    prev = header.prev_scn.to_bytes()
    check.last_scn, check.last_more = prev, (False if seq == 0 else None)
    if seq == 0 and header.prev_scn != meta.base_scn:
        return Problem(path, 40, f"prev_scn {header.prev_scn} is not base_scn {meta.base_scn}")
    if previous is not None and previous.problem is None:
        if previous.last_scn != prev:
            expected = _text(previous.last_scn)
            reason = f"prev_scn {header.prev_scn} is not {expected}, the last SCN before it"
            return Problem(path, 40, reason)
        check.last_more = previous.last_more
    return None


def _check_records(buf: memoryview, path: Path, check: SegmentCheck) -> Problem | None:
    offset, limit = HEADER_SIZE, len(buf)
    while True:
        try:
            frame = decode_frame(buf, offset, limit)
            if frame is None:
                if not is_zero(buf, offset, limit):
                    return Problem(path, offset, "end-of-data marker followed by non-zero bytes")
                return None
            decode_payload(frame.flags, buf[frame.payload_start : frame.payload_end])
        except CorruptRecordError as exc:
            return Problem(path, offset, str(exc))
        assert check.last_scn is not None
        why = order_error(check.last_scn, check.last_more, frame.scn)
        if why is not None:
            return Problem(path, offset, why)
        if check.first_scn is None:
            check.first_scn = frame.scn
        check.records += 1
        check.last_scn, check.last_more = frame.scn, bool(frame.flags & FLAG_MORE)
        offset = frame.next_offset


def _explain(buf: memoryview, problem: Problem) -> Problem:
    """Say whether records damage is a torn tail or damage to records that follow it."""
    later = sum(1 for _ in frames_after(buf, problem.offset, len(buf)))
    if not later:
        hint = "no valid record follows: a torn tail, which the writer cuts when it opens"
    else:
        hint = (
            f"{later} valid record(s) follow it: damage to committed records, not a torn write; "
            f"restore the buffer from a peer or run `drc buffer repair {problem.path.parent}`"
        )
    return Problem(problem.path, problem.offset, f"{problem.reason} ({hint})")


def describe_buffer(buffer: EventBuffer) -> dict[str, Any]:
    """A JSON-ready description of a buffer and each of its segments (``drc buffer inspect``)."""
    segments = []
    for seg in buffer.segments():
        segments.append(
            {
                "file": seg.path.name,
                "seq": seg.seq,
                "prev_scn": str(seg.header.prev_scn),
                "first_scn": _text(seg.first_scn),
                "last_scn": _text(seg.last_scn) if seg.count else None,
                "records": seg.count,
                "bytes": seg.end,
                "damage": seg.describe_error() if seg.error is not None else None,
            }
        )
    return {
        "directory": str(buffer.directory),
        "epoch": buffer.epoch,
        "oldest_servable": str(buffer.oldest_servable),
        "first_scn": _text_scn(buffer.first_scn),
        "last_scn": _text_scn(buffer.last_scn),
        "records": buffer.record_count,
        "bytes": buffer.size_bytes,
        "segments": segments,
    }


def _text(scn: bytes | None) -> str | None:
    return None if scn is None else str(SCN.from_bytes(scn))


def _text_scn(scn: SCN | None) -> str | None:
    return None if scn is None else str(scn)
