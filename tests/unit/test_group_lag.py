"""drc.api.group_lag on a real EventBuffer: a range's lag (now - commit time of the first
record after its position) and backlog (buffer bytes after it), caught up, across segments,
and a position retention already deleted."""

from __future__ import annotations

from pathlib import Path

from drc.api.group_lag import RangeLag, backlog, range_lag, totals
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.format import HEADER_SIZE
from drc.eventbuffer.writer import MIN_SEGMENT_BYTES
from tests.support.api import ins, scn, store, txn

NOW = 1_700_000_100.0  # tests.support.api.txn(n) commits at 1_700_000_000 + n


def filled(path: Path, count: int, **options: object) -> EventBuffer:
    buffer = EventBuffer.open(path, segment_bytes=MIN_SEGMENT_BYTES, **options)  # type: ignore[arg-type]
    for n in range(1, count + 1):
        store(buffer, txn(n, *[ins("orders", n * 100 + i) for i in range(20)]))
    return buffer


def test_lag_is_the_first_unread_commit_and_backlog_the_bytes_after(tmp_path: Path) -> None:
    buffer = filled(tmp_path / "buf", 40)
    assert len(buffer.segments()) > 2  # the backlog spans several segments
    whole = range_lag(buffer, 0, SCN.zero(), NOW)
    assert whole == RangeLag(0, 99.0, buffer.size_bytes - HEADER_SIZE * len(buffer.segments()))
    middle = range_lag(buffer, 1, scn(20), NOW)
    assert middle.lag_seconds == 79.0  # txn(21) is the first it has not read
    first = buffer.read_after(scn(20), 1, 1)[0]
    later = [s for s in buffer.segments() if s.seq > first.segment]
    at = next(s for s in buffer.segments() if s.seq == first.segment)
    assert middle.backlog_bytes == at.end - first.offset + sum(s.end - HEADER_SIZE for s in later)
    assert 0 < middle.backlog_bytes < whole.backlog_bytes  # type: ignore[operator]
    assert range_lag(buffer, 2, scn(40), NOW) == RangeLag(2, 0.0, 0)  # caught up
    buffer.close()


def test_a_position_retention_deleted_counts_from_the_oldest_record(tmp_path: Path) -> None:
    buffer = filled(tmp_path / "buf", 40, retain_bytes=0)
    assert buffer.oldest_servable > scn(1)  # retention deleted the sealed segments at commit
    oldest = buffer.read_after(buffer.oldest_servable, 1, 1)[0]
    measured = range_lag(buffer, 0, scn(1), NOW)
    assert measured.too_old
    assert measured.lag_seconds == NOW - oldest.timestamp_ms / 1000
    assert measured.backlog_bytes == backlog(buffer.segments(), oldest.segment, oldest.offset)
    buffer.close()


def test_totals_sum_the_backlog_and_take_the_slowest_range() -> None:
    lags = [RangeLag(0, 3.0, 10), RangeLag(1, 7.5, 5), RangeLag(2, None, None)]
    assert totals(lags) == {"max_lag_seconds": 7.5, "backlog_bytes": 15}
    assert totals([RangeLag(0, None, None)]) == {"max_lag_seconds": None, "backlog_bytes": None}
