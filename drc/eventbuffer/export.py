"""Segments as files for others to copy: what each one serves, its checksum, and reading a copy.

A bulk catch-up executor downloads whole segments instead of pulling batches
(``GET /v1/segments``, drc.api.segments). What is served of a segment is a prefix of its file
that never changes once committed (segments are append-only; recovery only cuts what was never
committed)::

    sealed segment   | hdr | r0 | r1 | ... | rN |            the whole file (seq < view end)
    active segment   | hdr | r0 | ... | rK |.. appended ..|  up to the view's end: the last
                                         ^ end_offset         committed record, never beyond

A served prefix is itself a valid segment file (header and whole frames), whose last record may
be a fragment with MORE when its transaction continues in the next segment.
:func:`read_segment_file` reads such a copy with the buffer's own checks (header, epoch, CRC,
padding, flags, SCN order).

:class:`Checksums` gives the SHA-256 of each served prefix: a sealed segment is hashed once,
the active one only over the bytes committed since it was last asked.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drc.core.errors import CorruptRecordError
from drc.core.scn import SCN
from drc.eventbuffer.format import HEADER_SIZE, KEY_BYTES
from drc.eventbuffer.reader import Record, View, segment_records
from drc.eventbuffer.segment import load_segment

HASH_CHUNK = 1 << 20
_INDEX_EVERY = 1 << 30  # a copy is read front to back once: no index needed


@dataclass(frozen=True, slots=True)
class SegmentExtent:
    """The servable part of one segment: ``size`` bytes from its start.

    ``prev_scn`` is the SCN before its first record; ``first_scn``/``last_scn`` the SCNs of its
    first and last served records (None when it serves none); ``sealed`` says it will not grow.
    """

    seq: int
    path: Path
    prev_scn: SCN
    first_scn: SCN | None
    last_scn: SCN | None
    records: int
    size: int
    sealed: bool

    @property
    def name(self) -> str:
        return self.path.name


def servable_extents(view: View) -> list[SegmentExtent]:
    """The extents of every segment in ``view`` up to its end, oldest first."""
    extents = []
    counted = 0
    for seg in view.segments:
        if seg.seq > view.end_seq:
            break  # appended, not committed yet
        sealed = seg.seq < view.end_seq
        records = seg.count if sealed else view.record_count - counted
        counted += records
        last: SCN | None = None
        if records:
            last = SCN.from_bytes(seg.last_scn) if sealed else view.last_scn
        extents.append(
            SegmentExtent(
                seq=seg.seq,
                path=seg.path,
                prev_scn=seg.header.prev_scn,
                first_scn=SCN.from_bytes(seg.first_scn) if records and seg.first_scn else None,
                last_scn=last,
                records=records,
                size=seg.end if sealed else view.end_offset,
                sealed=sealed,
            )
        )
    return extents


def covering(extents: Iterable[SegmentExtent], after: SCN, to: SCN | None) -> list[SegmentExtent]:
    """The extents holding records with ``after < scn`` (and ``scn <= to``)."""
    return [
        ext
        for ext in extents
        if ext.last_scn is not None
        and ext.last_scn > after
        and (to is None or (ext.first_scn is not None and ext.first_scn <= to))
    ]


class Checksums:
    """SHA-256 of each segment's served prefix, kept between calls (thread-safe).

    Keyed by (epoch, seq), so a rebuilt buffer never reuses another's sums. A prefix shorter
    than what was hashed before (a buffer repaired under the same epoch) is hashed again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[str, int], tuple[int, Any]] = {}

    def digest(self, epoch: str, extent: SegmentExtent) -> str:
        """The hex SHA-256 of ``extent.size`` bytes of its file; FileNotFoundError when
        retention deleted it."""
        key = (epoch, extent.seq)
        with self._lock:
            known = self._known.get(key)
        if known is not None and known[0] <= extent.size:
            done, hasher = known[0], known[1].copy()
        else:
            done, hasher = 0, hashlib.sha256()
        if done < extent.size:
            _hash_file(extent.path, done, extent.size, hasher)
        with self._lock:
            current = self._known.get(key)
            if current is None or current[0] < extent.size:
                self._known[key] = (extent.size, hasher.copy())
        return str(hasher.hexdigest())

    def keep_only(self, epoch: str, seqs: Iterable[int]) -> None:
        """Forget the sums of segments no longer served."""
        wanted = {(epoch, seq) for seq in seqs}
        with self._lock:
            for key in [k for k in self._known if k not in wanted]:
                del self._known[key]


def _hash_file(path: Path, start: int, end: int, hasher: Any) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        offset = start
        while offset < end:
            chunk = os.pread(fd, min(HASH_CHUNK, end - offset), offset)
            if not chunk:
                raise CorruptRecordError(
                    f"segment {path} ends at {offset} bytes, before the {end} bytes served", offset
                )
            hasher.update(chunk)
            offset += len(chunk)
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a whole file (a downloaded segment)."""
    hasher = hashlib.sha256()
    _hash_file(path, 0, path.stat().st_size, hasher)
    return hasher.hexdigest()


def read_segment_file(
    path: Path, epoch: str, seq: int, after: SCN | None = None
) -> Iterator[Record]:
    """The records of a standalone segment file (a downloaded copy), those after ``after``.

    The file is checked as the buffer checks its own segments: a header of another buffer
    (``epoch``) or another number (``seq``) is a ValueError, any damaged frame a
    CorruptRecordError naming the file and offset; nothing after damage is returned.
    """
    segment = load_segment(path, seq, bytes.fromhex(epoch), _INDEX_EVERY, start_more=None)
    try:
        if segment.error is not None:
            raise CorruptRecordError(
                f"segment copy {segment.describe_error()}", segment.error_offset or 0
            )
        key = b"" if after is None else after.to_bytes()[:KEY_BYTES]
        yield from segment_records(segment, HEADER_SIZE, segment.end, key)
    finally:
        segment.close()
