"""The buffer directory: segment file names, buffer.json, and the writer's lock.

See :mod:`drc.eventbuffer.format` for the layout these functions implement.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from drc.core.errors import BufferLockedError, BufferStateError, MalformedScnError
from drc.core.scn import SCN
from drc.eventbuffer.format import FORMAT_VERSION

META_NAME = "buffer.json"
LOCK_NAME = "LOCK"
SEGMENT_SUFFIX = ".seg"
FILE_MODE = 0o600  # every file of a buffer holds row data or describes it: owner only
DIR_MODE = 0o700
_SEGMENT_NAME = re.compile(r"([0-9]{20})\.seg")


@dataclass(frozen=True, slots=True)
class BufferMeta:
    """The contents of buffer.json."""

    epoch: str  # uuid4 hex, 32 characters
    created_at: str
    base_scn: SCN
    format_version: int = FORMAT_VERSION

    @property
    def epoch_bytes(self) -> bytes:
        return bytes.fromhex(self.epoch)

    @classmethod
    def new(cls, base_scn: SCN) -> BufferMeta:
        created = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(epoch=uuid.uuid4().hex, created_at=created, base_scn=base_scn)


def make_private_dir(directory: Path) -> None:
    """Create ``directory`` (and parents) if needed and make it owner-only, whatever the umask."""
    directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(directory, DIR_MODE)


def open_private(path: Path, flags: int) -> int:
    """os.open with O_CREAT and owner-only permissions, also for a file that already existed."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def segment_path(directory: Path, seq: int) -> Path:
    return directory / f"{seq:020d}{SEGMENT_SUFFIX}"


def list_segments(directory: Path) -> list[int]:
    """Sequence numbers of the segment files in ``directory``, ascending."""
    seqs = []
    for name in os.listdir(directory):
        match = _SEGMENT_NAME.fullmatch(name)
        if match:
            seqs.append(int(match.group(1)))
    return sorted(seqs)


def read_meta(directory: Path) -> BufferMeta | None:
    """buffer.json of ``directory``; None when there is none."""
    path = directory / META_NAME
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
        meta = BufferMeta(
            epoch=data["epoch"],
            created_at=data["created_at"],
            base_scn=SCN.parse(data.get("base_scn", "0:0:0:0")),
            format_version=data["format_version"],
        )
        if len(bytes.fromhex(meta.epoch)) != 16:
            raise ValueError(f"epoch {meta.epoch!r} is not 32 hex digits")
    except (ValueError, KeyError, TypeError, MalformedScnError) as exc:
        raise BufferStateError(
            f"{path} is not a valid buffer.json ({exc}); restore it from a backup or move the "
            "directory away to start a new buffer"
        ) from exc
    if meta.format_version != FORMAT_VERSION:
        raise BufferStateError(
            f"{path}: buffer format version {meta.format_version} is not supported (this DRC "
            f"reads version {FORMAT_VERSION})"
        )
    return meta


def write_meta(directory: Path, meta: BufferMeta, sync: bool) -> None:
    """Write buffer.json atomically: temporary file, fsync, rename, directory fsync."""
    data = {
        "format_version": meta.format_version,
        "epoch": meta.epoch,
        "created_at": meta.created_at,
        "base_scn": str(meta.base_scn),
    }
    tmp = directory / (META_NAME + ".tmp")
    with open(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
        f.flush()
        if sync:
            os.fsync(f.fileno())
    os.replace(tmp, directory / META_NAME)
    if sync:
        fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    """Make file creations, renames and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryLock:
    """An exclusive, non-blocking ``flock`` on DIR/LOCK, held while a writer is open.

    flock locks belong to the open file, so a second writer fails whether it is another
    process or another EventBuffer in the same process. The kernel drops the lock when the
    holder dies, so a crashed writer never leaves a stale lock behind.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK_NAME
        fd = open_private(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise BufferLockedError(
                f"EventBuffer directory {directory} is already open for writing (lock "
                f"{self.path} held by pid {holder}); stop that writer first, or use "
                "EventBuffer.open_read_only to inspect it"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None
