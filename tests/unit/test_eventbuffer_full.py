"""A full filesystem under the EventBuffer: the writer keeps what it could not write pending,
stays usable, and once there is room again nothing is lost and no segment is damaged."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.core.errors import BufferFullError
from drc.eventbuffer import EventBuffer
from drc.eventbuffer import writer as writer_module
from drc.eventbuffer.verify import verify_buffer
from tests.support.eventbuffer import SEG, Item, as_items, fill, read_all, workload


class Disk:
    """os.pwrite with ``room`` bytes left (None: unlimited); a write past it is cut short at
    the last byte that fits, the next one fails with ENOSPC, as a full filesystem does."""

    def __init__(self) -> None:
        self.room: int | None = None
        self.refused = 0
        self._pwrite = os.pwrite

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> int:
        if self.room is None:
            return self._pwrite(fd, data, offset)
        if self.room == 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        written = self._pwrite(fd, bytes(data[: self.room]), offset)
        self.room -= written
        return written


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    fake = Disk()
    monkeypatch.setattr(writer_module.os, "pwrite", fake.pwrite)
    yield fake


@pytest.mark.parametrize("room", [0, 1, 700])  # nothing fits, one byte, part of a commit
def test_a_full_disk_refuses_the_commit_and_loses_nothing_once_freed(
    tmp_path: Path, disk: Disk, room: int
) -> None:
    items = workload(300)
    with EventBuffer.open(tmp_path / "buf", segment_bytes=SEG) as buf:
        fill(buf, items[:100])
        disk.room = room
        appended = _fill_until_full(buf, items, 100)
        assert appended < len(items), "the disk filled up"
        committed = as_items(read_all(buf))
        assert committed == items[: len(committed)] and len(committed) <= appended
        for _ in range(3):  # still full: the same error, the writer still usable
            with pytest.raises(BufferFullError, match="no space left.*capture continues"):
                buf.commit()
        disk.room = None  # space freed
        buf.commit()
        fill(buf, items[appended:])
        assert as_items(read_all(buf)) == items
    assert disk.refused >= 3
    assert verify_buffer(tmp_path / "buf").ok
    with EventBuffer.open(tmp_path / "buf", segment_bytes=SEG) as reopened:
        assert as_items(read_all(reopened)) == items


def _fill_until_full(buf: EventBuffer, items: list[Item], start: int) -> int:
    """Append (committing every 7) from ``start`` until the disk refuses; how many items are
    appended then (a rotation that found no room appended nothing of its record)."""
    for n in range(start, len(items)):
        try:
            buf.append(*items[n])
        except BufferFullError:
            return n
        if (n + 1) % 7 == 0:
            try:
                buf.commit()
            except BufferFullError:
                return n + 1
    return len(items)


def test_other_write_errors_still_stop_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    with EventBuffer.open(tmp_path / "buf", segment_bytes=SEG) as buf:
        fill(buf, workload(10))
        monkeypatch.setattr(writer_module.os, "pwrite", broken)
        buf.append(*workload(11)[-1])
        with pytest.raises(Exception, match="Input/output error") as info:
            buf.commit()
        assert not isinstance(info.value, BufferFullError)
