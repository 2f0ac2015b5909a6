"""EventBuffer reads at a position inside a transaction ``(after, within)`` and split batches
(drc.eventbuffer.reader): a transaction of many records spanning several tiny segments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drc.core.errors import ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer, reader
from drc.eventbuffer.reader import PositionError
from tests.support.eventbuffer import SEG, Item, as_items, fill, payload, scn

BIG = 12  # records of the transaction at scn(2)
RECORD = 700  # bytes each: three segments of SEG bytes


def items() -> list[Item]:
    big = [(scn(2), payload(20 + n, RECORD), 2, n < BIG - 1) for n in range(BIG)]
    return [(scn(1), b"one", 1, False), *big, (scn(3), b"three", 3, False)]


@pytest.fixture
def buf(tmp_path: Path) -> EventBuffer:
    opened = EventBuffer.open(tmp_path / "buf", segment_bytes=SEG, index_every_bytes=256)
    fill(opened, items(), commit_every=3)
    return opened


def test_the_transaction_spans_segments(buf: EventBuffer) -> None:
    with buf:
        records = buf.read_after(scn(1), 100, 1 << 20)
        assert len({r.segment for r in records}) >= 3


def test_every_position_inside_the_transaction_reads_on_from_its_record(buf: EventBuffer) -> None:
    with buf:
        for within in range(1, BIG):
            got = buf.read_after(scn(2), 100, 1 << 20, within=within)
            assert as_items(got) == items()[1 + within :], within


def test_within_ignores_the_server_id_like_after(buf: EventBuffer) -> None:
    with buf:
        other = SCN(1, 999, 7, 20)  # scn(2) with another server_id
        assert as_items(buf.read_after(other, 100, 1 << 20, within=5)) == items()[6:]


def test_a_position_the_buffer_does_not_hold_is_a_position_error(buf: EventBuffer) -> None:
    with buf:
        for after, within in (
            (scn(2), BIG),  # as many as it has: record BIG is scn(3)'s
            (scn(2), BIG + 5),
            (scn(3), 1),  # the last transaction, one record
            (scn(1), 1),
            (SCN(1, 0, 7, 15), 1),  # between two transactions
            (scn(9), 1),  # past the end
            (SCN.ZERO, 1),
        ):
            with pytest.raises(PositionError, match="did not come from this buffer"):
                buf.read_after(after, 100, 1 << 20, within=within)


def test_without_split_the_first_transaction_is_whole(buf: EventBuffer) -> None:
    with buf:
        assert as_items(buf.read_after(scn(1), 100, 2000)) == items()[1 : 1 + BIG]
        # and a continued one is its whole rest
        assert as_items(buf.read_after(scn(2), 100, 10, within=3)) == items()[4 : 1 + BIG]


def test_split_cuts_the_first_transaction_after_the_records_that_fit(buf: EventBuffer) -> None:
    with buf:
        got = buf.read_after(scn(1), 100, 2000, split=True)
        assert as_items(got) == items()[1:3]  # 2 x 700 fit in 2000, 3 do not
        assert got[-1].more
        # at least one record, however small max_bytes
        assert as_items(buf.read_after(scn(1), 100, 1, split=True)) == items()[1:2]
        # max_records does not cut it: a cut transaction counts as one
        assert len(buf.read_after(scn(1), 1, 1 << 20, split=True)) == BIG


def test_split_leaves_later_transactions_whole(buf: EventBuffer) -> None:
    with buf:
        assert as_items(buf.read_after(SCN.ZERO, 100, 2000, split=True)) == items()[:1]
        # one that fits is whole, and the next one that does not waits
        rest = buf.read_after(scn(2), 100, 2000, within=BIG - 1, split=True)
        assert as_items(rest) == items()[BIG:]


def test_split_reads_resume_to_exactly_the_stream(buf: EventBuffer) -> None:
    with buf:
        for max_bytes in (1, 700, 1500, 2800, 1 << 20):
            after, within, out = SCN.ZERO, 0, []
            while page := buf.read_after(after, 100, max_bytes, within=within, split=True):
                out.extend(page)
                last = page[-1]
                within = within + len(page) if last.more and last.scn == after else 0
                if last.more and last.scn != after:
                    within = sum(1 for r in page if r.scn == last.scn)
                after = last.scn
            assert as_items(out) == items(), max_bytes


def test_inside_a_transaction_retention_deleted_the_start_of_is_too_old(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "buf", segment_bytes=SEG, retain_bytes=2 * SEG) as buf:
        fill(buf, items(), commit_every=100)
        buf.enforce_retention()
        assert buf.oldest_servable == scn(2)  # its first segments are gone
        with pytest.raises(ScnTooOldError):
            buf.read_after(scn(2), 100, 1 << 20, within=BIG - 1)
        assert as_items(buf.read_after(scn(2), 100, 1 << 20)) == items()[-1:]


def test_a_read_only_buffer_reads_inside_a_transaction_too(buf: EventBuffer) -> None:
    with buf, EventBuffer.open_read_only(buf.directory, index_every_bytes=256) as reader:
        got = reader.read_after(scn(2), 100, 2000, within=4, split=True)
        assert as_items(got) == items()[5:7]
        with pytest.raises(PositionError):
            reader.read_after(scn(2), 100, 2000, within=BIG, split=True)


def test_a_position_past_its_transaction_is_refused_without_reading_on(
    buf: EventBuffer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The skip stops at the first record of another SCN: a huge ``within`` costs no scan of
    the buffer behind the transaction."""
    frames = []
    decode = reader.decode_frame

    def counting(*args: Any) -> Any:
        frames.append(args[1])
        return decode(*args)

    monkeypatch.setattr(reader, "decode_frame", counting)
    with buf, pytest.raises(PositionError):
        buf.read_after(scn(1), 100, 1 << 20, within=10**6)
    assert len(frames) <= 3  # scn(1)'s record and scn(2)'s first
