"""A pull after an SCN older than a buffer that began later (a replicator started again on an
empty buffer, after its source purged the binlog it needed) is the source's to serve, or 410:
never answered from the buffer's start, which would skip what came between (issue #27)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from drc.api.pull import BackToSource
from drc.core.errors import ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer.reader import Record


def scn(pos: int) -> SCN:
    return SCN(1, 1, 2, pos)


@dataclass
class Buffer:
    first_scn: SCN | None
    oldest_servable: SCN = SCN.ZERO
    epoch: str = "e"
    last_scn: SCN | None = None
    reads: list[SCN] = field(default_factory=list)

    def read_after(
        self, after: SCN, max_records: int, max_bytes: int, *, within: int = 0, split: bool = False
    ) -> list[Record]:
        self.reads.append(after)
        return [Record(scn(500), b"x", 0, False, 0, 0)]

    def wait_for_commit(self, after: SCN, timeout_s: float) -> bool:
        return False


def gone(after: SCN, oldest: SCN, max_records: int, max_bytes: int) -> list[Record]:
    raise ScnTooOldError(f"binlog of {after} purged", oldest)


def test_a_position_before_the_buffers_beginning_goes_to_the_source() -> None:
    asked: list[tuple[SCN, SCN]] = []

    def backfill(after: SCN, oldest: SCN, max_records: int, max_bytes: int) -> list[Record]:
        asked.append((after, oldest))
        return []

    buffer = Buffer(first_scn=scn(400))
    BackToSource(buffer, backfill).read_after(SCN(1, 1, 1, 77), 10, 1000)
    assert asked == [(SCN(1, 1, 1, 77), scn(400))] and buffer.reads == []


def test_with_the_binlog_purged_it_is_410_not_the_buffers_start() -> None:
    buffer = Buffer(first_scn=scn(400))
    with pytest.raises(ScnTooOldError):
        BackToSource(buffer, gone).read_after(SCN(1, 1, 1, 77), 10, 1000)
    assert buffer.reads == []


@pytest.mark.parametrize(
    "after, buffer",
    [
        (SCN.ZERO, Buffer(first_scn=scn(400))),  # a new reader: from the start
        (scn(400), Buffer(first_scn=scn(400))),  # at or past the beginning
        (scn(450), Buffer(first_scn=scn(400))),
        (scn(100), Buffer(first_scn=None)),  # an empty buffer
        (scn(100), Buffer(first_scn=scn(400), oldest_servable=scn(300))),  # retention's rule
    ],
)
def test_other_positions_read_the_buffer(after: SCN, buffer: Buffer) -> None:
    assert BackToSource(buffer, gone).read_after(after, 10, 1000)
    assert buffer.reads == [after]
