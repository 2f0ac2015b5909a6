"""Opening a buffer directory: create it, load and scan its segments, repair a torn tail.

The recovery rule itself is specified in :mod:`drc.eventbuffer.format`. Everything cut is
logged (file, offset, bytes) at WARNING, so an operator can see what a crash cost.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from drc.core.errors import BufferStateError, CorruptRecordError
from drc.core.scn import SCN
from drc.eventbuffer.format import (
    HEADER_SIZE,
    KEY_BYTES,
    SegmentHeader,
    frames_after,
    rebuild_header,
)
from drc.eventbuffer.layout import (
    META_NAME,
    BufferMeta,
    fsync_dir,
    list_segments,
    read_meta,
    segment_path,
    write_meta,
)
from drc.eventbuffer.reader import View
from drc.eventbuffer.segment import (
    Segment,
    close_quietly,
    create_segment_file,
    load_segment,
    map_file,
    read_raw_header,
    write_header,
)

log = logging.getLogger(__name__)


def open_or_create(directory: Path, base_scn: SCN, sync: bool) -> BufferMeta:
    """buffer.json of ``directory``, creating the buffer (new epoch, segment 0) if there is none.

    Segment 0 is written before buffer.json, so a crash during creation leaves at most a
    header-only segment 0 and no buffer.json, which the next open recognises and redoes.
    """
    meta = read_meta(directory)
    if meta is not None:
        return meta
    seqs = list_segments(directory)
    if seqs and not _is_unfinished_creation(directory, seqs):
        raise BufferStateError(
            f"{directory} holds segment files but no {META_NAME}, so their epoch cannot be "
            f"checked; restore {META_NAME} or move the segments away to start a new buffer"
        )
    for seq in seqs:
        os.unlink(segment_path(directory, seq))
    meta = BufferMeta.new(base_scn)
    header = SegmentHeader(meta.epoch_bytes, 0, base_scn)
    create_segment_file(segment_path(directory, 0), header, sync)
    write_meta(directory, meta, sync)
    log.info("created EventBuffer %s with epoch %s", directory, meta.epoch)
    return meta


def _is_unfinished_creation(directory: Path, seqs: list[int]) -> bool:
    return seqs == [0] and segment_path(directory, 0).stat().st_size <= HEADER_SIZE


def load_segments(
    directory: Path, meta: BufferMeta, index_every: int, *, repair: bool, sync: bool
) -> list[Segment]:
    """Load and scan every segment. With ``repair`` (the writer), cut the tail back to its
    valid prefix; without (read-only), stop before a last segment whose header is unreadable.
    """
    seqs = list_segments(directory)
    if not seqs:
        raise BufferStateError(
            f"{directory} has {META_NAME} but no segment files; they were deleted by hand. "
            "Move the directory away to start a new buffer"
        )
    _check_contiguous(directory, seqs)
    segments: list[Segment] = []
    for seq in seqs:
        last = seq == seqs[-1]
        seg = _load_one(directory, meta, seq, segments, index_every, last)
        if seg is None:
            if repair:
                seg = _replace_torn_creation(directory, meta, seq, segments, index_every, sync)
            if seg is None:
                break
        segments.append(seg)
    if repair:
        repair_tail(segments, sync)
        _write_rebuilt_headers(segments, sync)
        if sync:
            fsync_dir(directory)
    return segments


def load_new_segments(
    directory: Path, meta: BufferMeta, segments: list[Segment], index_every: int
) -> list[Segment]:
    """Read-only refresh: drop segments retention deleted, rescan the last one, add new ones."""
    current = read_meta(directory)
    if current is None or current.epoch != meta.epoch:
        raise BufferStateError(
            f"EventBuffer {directory} was wiped or recreated (epoch {meta.epoch} is gone); "
            "positions read from it do not apply to the new buffer: reopen it and resync"
        )
    seqs = list_segments(directory)
    # Retention deletes the oldest; a restarted writer's recovery may delete empty newest ones.
    kept = [seg for seg in segments if seqs and seqs[0] <= seg.seq <= seqs[-1]]
    if kept:
        _rescan(kept[-1])
    for seq in seqs:
        if kept and seq <= kept[-1].seq:
            continue
        seg = _load_one(directory, meta, seq, kept, index_every, last=seq == seqs[-1])
        if seg is None:
            break
        kept.append(seg)
    if not kept:
        raise BufferStateError(f"EventBuffer {directory} has no readable segment")
    return kept


def _load_one(
    directory: Path,
    meta: BufferMeta,
    seq: int,
    before: list[Segment],
    index_every: int,
    last: bool,
) -> Segment | None:
    """Load one segment, rebuilding a damaged header in memory (``rebuilt_from`` says why);
    None for a last segment whose creation was torn (shorter than a header)."""
    path = segment_path(directory, seq)
    # The MORE flag of the record before this segment, when it is known.
    known = bool(before) and before[-1].error is None
    start_more = False if seq == 0 else (before[-1].last_more if known else None)
    try:
        return load_segment(path, seq, meta.epoch_bytes, index_every, start_more)
    except ValueError as exc:
        raise BufferStateError(f"{exc}; move it out of {directory}") from exc
    except CorruptRecordError as exc:
        damage = exc
    if path.stat().st_size < HEADER_SIZE:
        if not last:
            raise CorruptRecordError(
                f"{damage}. This sealed segment cannot be read at all: restore the buffer from "
                "a peer, or move this segment away together with every older one",
                0,
            ) from damage
        log.warning("EventBuffer %s: last segment unreadable: %s", directory, damage)
        return None
    prev = _known_prev(meta, seq, before)
    seg = _rebuilt(path, meta, seq, prev, index_every, start_more, damage)
    seg.rebuilt_from = str(damage)
    return seg


def _write_rebuilt_headers(segments: list[Segment], sync: bool) -> None:
    """Write back headers rebuilt in memory: only once the tail is known to be recoverable,
    so a writer that refuses to open has changed nothing."""
    for seg in segments:
        if seg.rebuilt_from is not None:
            log.warning(
                "EventBuffer recovery: rebuilt the damaged header of %s (%s): prev_scn %s",
                seg.path,
                seg.rebuilt_from,
                seg.header.prev_scn,
            )
            write_header(seg.path, seg.header, sync)
            seg.rebuilt_from = None


def _known_prev(meta: BufferMeta, seq: int, before: list[Segment]) -> SCN | None:
    """The prev_scn a segment's header must hold, when the segments before tell it."""
    if seq == 0:
        return meta.base_scn
    if before and before[-1].seq == seq - 1 and before[-1].error is None:
        return SCN.from_bytes(before[-1].last_scn)
    return None


def _rebuilt(
    path: Path,
    meta: BufferMeta,
    seq: int,
    prev: SCN | None,
    index_every: int,
    start_more: bool | None,
    damage: CorruptRecordError,
) -> Segment:
    """The segment read with its header rebuilt (see the recovery rule in the format)."""
    header = rebuild_header(read_raw_header(path), meta.epoch_bytes, seq, prev)
    if header is not None:
        return load_segment(path, seq, meta.epoch_bytes, index_every, start_more, header)
    # The oldest segment, prev_scn unknown: serve only after its first record, never older.
    probe = SegmentHeader(meta.epoch_bytes, seq, SCN.ZERO)
    seg = load_segment(path, seq, meta.epoch_bytes, index_every, None, probe)
    if seg.first_scn is None:
        raise CorruptRecordError(
            f"{damage}, and this oldest segment holds no record, so the oldest servable SCN of "
            f"{path.parent} is unknown: restore the buffer from a peer, or move the directory "
            "away and rebuild the buffer",
            0,
        ) from damage
    header = SegmentHeader(meta.epoch_bytes, seq, SCN.from_bytes(seg.first_scn))
    log.warning(
        "EventBuffer %s: prev_scn of the oldest segment is unknown; it now serves only after "
        "SCN %s, its first record (older positions get scn_too_old)",
        path,
        header.prev_scn,
    )
    return load_segment(path, seq, meta.epoch_bytes, index_every, None, header)


def _replace_torn_creation(
    directory: Path, meta: BufferMeta, seq: int, before: list[Segment], index_every: int, sync: bool
) -> Segment | None:
    """Deal with a last segment shorter than a header: its creation was torn, it held nothing."""
    path = segment_path(directory, seq)
    size = path.stat().st_size
    if before:
        log.warning("EventBuffer recovery: deleted %s (%d bytes): creation torn", path, size)
        os.unlink(path)
        return None
    if seq != 0:
        raise CorruptRecordError(
            f"segment {path} offset 0: the only segment is {size} bytes, shorter than its "
            f"header, so the oldest servable SCN of {directory} is unknown; restore the buffer "
            "from a peer, or move the directory away and rebuild the buffer",
            0,
        )
    log.warning("EventBuffer recovery: rewrote %s (%d bytes): creation torn", path, size)
    tmp = path.with_suffix(".seg.tmp")
    tmp.unlink(missing_ok=True)
    create_segment_file(tmp, SegmentHeader(meta.epoch_bytes, 0, meta.base_scn), sync)
    os.replace(tmp, path)
    return load_segment(path, 0, meta.epoch_bytes, index_every, False)


def repair_tail(segments: list[Segment], sync: bool) -> None:
    """Cut the tail to its valid prefix, drop an unfinished transaction, delete empty tails.

    Damage is cut only in the last segment: a torn write can only be there (a segment is
    synced before the next one is created), so damage in an earlier one is corruption, left
    for readers to refuse and for an operator to see. An unfinished run of MORE fragments is
    followed back into earlier segments, but never into a damaged one, and a damaged segment
    never becomes the active one. ``segments`` is updated in place.
    """
    last = segments[-1]
    if last.error is not None:
        refuse_committed_damage(last)
        _truncate(last, last.error_offset or HEADER_SIZE, last.error, sync)
    t = len(segments) - 1
    while True:
        t = _last_used(segments, t)
        seg = segments[t]
        if seg.error is not None or not (seg.count and seg.last_more):
            break
        cut = seg.run_start if seg.run_start is not None else HEADER_SIZE
        _truncate(seg, cut, "transaction whose last fragment is missing", sync)
        if cut != HEADER_SIZE:
            break
    if segments[t].error is None:
        for extra in segments[t + 1 :]:
            log.warning("EventBuffer recovery: deleted %s: no records after recovery", extra.path)
            os.unlink(extra.path)
        del segments[t + 1 :]
    tail = segments[-1]
    if tail.error is None and tail.path.stat().st_size != tail.end:
        _truncate(tail, tail.end, "bytes after the end of data", sync)


def scns_after_damage(seg: Segment) -> list[bytes]:
    """SCNs of the valid records after the first damage in ``seg``: none for a torn tail."""
    assert seg.error_offset is not None
    mm = map_file(seg.path)
    try:
        with memoryview(mm) as buf:
            return [frame.scn for frame in frames_after(buf, seg.error_offset, len(buf))]
    finally:
        close_quietly(mm)


def refuse_committed_damage(seg: Segment) -> None:
    """CorruptRecordError when valid records follow the damage in ``seg``: not a torn write."""
    later = scns_after_damage(seg)
    if not later:
        return
    directory = seg.path.parent
    newest = SCN.from_bytes(max(later, key=lambda scn: scn[:KEY_BYTES]))
    raise CorruptRecordError(
        f"segment {seg.path} offset {seg.error_offset}: {seg.error}, and {len(later)} valid "
        f"record(s) follow it (up to SCN {newest}): this is damage to committed records, not a "
        "torn write, so nothing was cut and capture is stopped. Run "
        f"`drc buffer verify {directory}` to see it, then restore the buffer from a peer, or run "
        f"`drc buffer repair {directory}` to discard the damaged records (subscribers at "
        f"positions before SCN {newest} then get 410 scn_too_old and must resync)",
        seg.error_offset or 0,
    )


def _last_used(segments: list[Segment], hi: int) -> int:
    """Index of the last segment at or before ``hi`` holding records or damage, else 0."""
    while hi > 0 and not segments[hi].count and segments[hi].error is None:
        hi -= 1
    return hi


def _truncate(seg: Segment, offset: int, reason: str, sync: bool) -> None:
    size = seg.path.stat().st_size
    log.warning(
        "EventBuffer recovery: truncated %s at offset %d, dropping %d bytes (%s)",
        seg.path,
        offset,
        size - offset,
        reason,
    )
    with open(seg.path, "r+b") as f:
        f.truncate(offset)
        if sync:
            os.fsync(f.fileno())
    seg.reset()
    _rescan(seg)


def _rescan(seg: Segment) -> None:
    """Scan ``seg`` again from its current end (after a cut, or to see newly written records)."""
    if seg.count:
        seg.rewind_to_complete()
    else:
        seg.reset()
    mm = map_file(seg.path)
    try:
        with memoryview(mm) as buf:
            seg.scan(buf, len(buf))
    finally:
        close_quietly(mm)


def _check_contiguous(directory: Path, seqs: list[int]) -> None:
    expected = list(range(seqs[0], seqs[0] + len(seqs)))
    if seqs != expected:
        missing = sorted(set(expected) - set(seqs))
        raise BufferStateError(
            f"EventBuffer {directory} is missing segment(s) {missing[:5]} between "
            f"{seqs[0]} and {seqs[-1]}: records were lost; restore them or rebuild the buffer"
        )


def scanned_view(directory: Path, meta: BufferMeta, segments: list[Segment]) -> View:
    """The view of freshly scanned segments: up to the last complete transaction."""
    end_seg, end_offset, count, last_scn = segments[0], HEADER_SIZE, 0, None
    for i in range(len(segments) - 1, -1, -1):
        seg = segments[i]
        if seg.complete_end is not None:
            end_seg, end_offset = seg, seg.complete_end
            count = sum(s.count for s in segments[:i]) + seg.complete_count
            last_scn = SCN.from_bytes(seg.complete_scn) if seg.complete_scn else None
            break
    return View(
        directory=directory,
        epoch=meta.epoch,
        segments=tuple(segments),
        end_seq=end_seg.seq,
        end_offset=end_offset,
        record_count=count,
        size_bytes=sum(s.end for s in segments),
        last_scn=last_scn,
        oldest_servable=segments[0].header.prev_scn,
    )
