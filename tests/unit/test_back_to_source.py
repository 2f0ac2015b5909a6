"""The pull API's fallback to the source binlog for reads older than the buffer."""

from __future__ import annotations

import pytest

from drc.api.pull import BackToSource
from drc.core.errors import ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer.reader import Record
from drc.replicator.backfill import BinlogBackfill

OLDEST = SCN(1, 1, 3, 500)


class _Buffer:
    epoch = "e"
    last_scn = SCN(1, 1, 3, 900)

    def read_after(
        self, after: SCN, max_records: int, max_bytes: int, *, within: int = 0, split: bool = False
    ) -> list[Record]:
        if after < OLDEST:
            raise ScnTooOldError("too old", OLDEST)
        return [Record(SCN(1, 1, 3, 900), b"buffer", 0, False, 1, 64)]

    def wait_for_commit(self, after: SCN, timeout_s: float) -> bool:
        return False


def test_a_read_the_buffer_can_serve_never_reaches_the_source() -> None:
    def backfill(*_args: object) -> list[Record]:
        raise AssertionError("the source must not be read")

    records = BackToSource(_Buffer(), backfill).read_after(OLDEST, 10, 100)
    assert [r.payload for r in records] == [b"buffer"]


def test_an_older_read_goes_to_the_source_up_to_the_buffers_start() -> None:
    calls = []

    def backfill(after: SCN, oldest: SCN, count: int, size: int) -> list[Record]:
        calls.append((after, oldest, count, size))
        return [Record(oldest, b"source", 0, False, -1, 0)]

    wrapped = BackToSource(_Buffer(), backfill)
    records = wrapped.read_after(SCN(1, 1, 2, 4), 10, 100)
    assert [r.payload for r in records] == [b"source"]
    assert calls == [(SCN(1, 1, 2, 4), OLDEST, 10, 100)]
    assert (wrapped.epoch, wrapped.last_scn) == ("e", _Buffer.last_scn)


def test_the_source_saying_gone_is_a_410() -> None:
    def backfill(after: SCN, oldest: SCN, *_limits: int) -> list[Record]:
        raise ScnTooOldError("binlog purged", oldest)

    with pytest.raises(ScnTooOldError, match="purged"):
        BackToSource(_Buffer(), backfill).read_after(SCN(1, 1, 2, 4), 10, 100)


def test_a_reader_from_the_beginning_is_told_the_first_records_are_gone() -> None:
    class _Replicator:
        current = None  # never consulted: the beginning is not kept, whatever capture reads

    backfill = BinlogBackfill(_Replicator())  # type: ignore[arg-type]
    with pytest.raises(ScnTooOldError, match="from the stream's beginning") as gone:
        backfill(SCN.ZERO, OLDEST, 10, 100)
    assert gone.value.oldest == OLDEST
