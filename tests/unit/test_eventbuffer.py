"""EventBuffer: append, commit, seek, batches, fragments, retention, readers, locking.

Recovery and corruption are in test_eventbuffer_recovery.py. Every test uses tiny segments so
that a few hundred records cross many segment boundaries.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from drc.core.errors import (
    BufferLockedError,
    BufferStateError,
    OutOfOrderAppendError,
    ScnTooOldError,
)
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer, Record
from drc.eventbuffer.format import HEADER_SIZE
from drc.eventbuffer.layout import list_segments
from tests.support.eventbuffer import SEG, as_items, fill, payload, read_all, scn, workload


@pytest.fixture
def bufdir(tmp_path: Path) -> Path:
    return tmp_path / "buf"


def test_round_trip_across_many_tiny_segments(bufdir: Path) -> None:
    items = workload(400)
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, items)
        assert as_items(read_all(buf)) == items
        assert buf.record_count == len(items)
        assert buf.first_scn == scn(1) and buf.last_scn == scn(400)
        assert buf.oldest_servable == SCN.ZERO
        assert len(list_segments(bufdir)) > 20
        assert buf.size_bytes == sum(p.stat().st_size for p in bufdir.glob("*.seg"))


def test_append_many_equals_appending_one_by_one(bufdir: Path) -> None:
    items = workload(100)
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        assert buf.append_many(items) == len(items)
        buf.commit()
        assert as_items(read_all(buf)) == items


def test_seek_after_every_scn_returns_exactly_the_suffix(bufdir: Path) -> None:
    items = workload(150, max_size=200)
    with EventBuffer.open(bufdir, segment_bytes=SEG, index_every_bytes=256) as buf:
        fill(buf, items)
        for i in range(0, 152):
            for after in (scn(i), SCN(1, 0, 7, 10 * i + 5)):  # on a record, and between two
                expected = [item for item in items if item[0] > after]
                got = buf.read_after(after, max_records=10_000, max_bytes=1 << 30)
                assert as_items(got) == expected, after


def test_seek_ignores_server_id(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, workload(20, fragments=False))
        same_point = SCN(1, 999, 7, 100)  # scn(10) with another server_id
        assert buf.read_after(same_point, 100, 1 << 20)[0].scn == scn(11)


def test_batches_are_bounded_by_count_and_bytes(bufdir: Path) -> None:
    items = [(scn(i), bytes([i]) * 100, i, False) for i in range(1, 41)]
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, items)
        assert as_items(buf.read_after(SCN.ZERO, 7, 1 << 20)) == items[:7]
        assert as_items(buf.read_after(SCN.ZERO, 100, 250)) == items[:2]
        assert as_items(buf.read_after(SCN.ZERO, 100, 300)) == items[:3]
        # At least one record, even bigger than max_bytes.
        assert as_items(buf.read_after(scn(5), 100, 10)) == items[5:6]
        assert buf.read_after(scn(40), 100, 1 << 20) == []
        with pytest.raises(ValueError):
            buf.read_after(SCN.ZERO, 0, 100)


def test_fragments_of_one_transaction_are_served_whole(bufdir: Path) -> None:
    big = [(scn(2), payload(k, 900), 2, k < 5) for k in range(6)]  # 6 fragments, ~3 segments
    items = [(scn(1), b"one", 1, False), *big, (scn(3), b"three", 3, False)]
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, items, commit_every=100)
        assert as_items(buf.read_after(SCN.ZERO, 2, 1 << 20)) == items[:1]
        assert as_items(buf.read_after(scn(1), 2, 100)) == big  # whole, beyond both limits
        assert as_items(buf.read_after(scn(2), 2, 100)) == items[-1:]
        first = buf.read_after(scn(1), 2, 100)
        assert len({r.segment for r in first}) >= 2  # the fragments span segments


def test_commit_hides_an_unfinished_transaction(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        buf.append(scn(1), b"a", 1)
        buf.append(scn(2), b"b1", 2, more=True)
        buf.commit()
        assert as_items(read_all(buf)) == [(scn(1), b"a", 1, False)]
        assert buf.last_scn == scn(1) and buf.record_count == 1
        buf.append(scn(2), b"b2", 2)
        buf.commit()
        assert [r.payload for r in read_all(buf)] == [b"a", b"b1", b"b2"]
        assert buf.last_scn == scn(2) and buf.record_count == 3


def test_out_of_order_append_is_refused_and_changes_nothing(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        buf.append(scn(5), b"five", 5)
        with pytest.raises(OutOfOrderAppendError, match="does not follow"):
            buf.append(scn(4), b"four", 4)
        with pytest.raises(OutOfOrderAppendError, match="does not follow"):
            buf.append(scn(5), b"again", 5)
        with pytest.raises(OutOfOrderAppendError):
            buf.append(SCN(1, 55, 7, 50), b"same point, other server", 5)
        buf.append(scn(6), b"six-a", 6, more=True)
        with pytest.raises(OutOfOrderAppendError, match="not finished"):
            buf.append(scn(7), b"seven", 7)
        buf.append(scn(6), b"six-b", 6)
        buf.commit()
        assert [r.payload for r in read_all(buf)] == [b"five", b"six-a", b"six-b"]


def test_append_checks_its_arguments(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        with pytest.raises(TypeError):
            buf.append("1:1:1:1", b"x", 1)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            buf.append(scn(1), "text", 1)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            buf.append(scn(1), b"x", -1)
    with pytest.raises(ValueError, match="fsync"):
        EventBuffer.open(bufdir, fsync="sometimes")


def test_uncommitted_records_are_invisible(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        buf.append(scn(1), b"a", 1)
        buf.commit()
        buf.append(scn(2), b"b", 2)
        assert [r.payload for r in read_all(buf)] == [b"a"]
        assert buf.last_scn == scn(1)
        assert not buf.wait_for_commit(scn(1), 0.05)
        buf.commit()
        assert buf.wait_for_commit(scn(1), 0.05)
        assert [r.payload for r in read_all(buf)] == [b"a", b"b"]


def test_close_drops_uncommitted_appends(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        buf.append(scn(1), b"a", 1)
        buf.commit()
        buf.append(scn(2), b"b", 2)
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        assert [r.payload for r in read_all(buf)] == [b"a"]
        buf.append(scn(2), b"b again", 2)


def test_reopen_continues_the_same_epoch_and_data(bufdir: Path) -> None:
    items = workload(120)
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, items)
        epoch = buf.epoch
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        assert buf.epoch == epoch
        assert as_items(read_all(buf)) == items
        assert buf.record_count == len(items) and buf.last_scn == scn(120)
        with pytest.raises(OutOfOrderAppendError):
            buf.append(scn(120), b"dup", 1)
        more = [item for item in workload(130, seed=2) if item[0] > scn(120)]
        fill(buf, more)
        assert as_items(read_all(buf, after=scn(120))) == more


def test_wiping_the_directory_creates_a_new_epoch(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, workload(10))
        epoch = buf.epoch
    for path in bufdir.iterdir():
        path.unlink()
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        assert buf.epoch != epoch and len(buf.epoch) == 32
        assert buf.record_count == 0 and read_all(buf) == [] and buf.last_scn is None


def test_base_scn_refuses_reads_from_before_it(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG, base_scn=scn(50)) as buf:
        with pytest.raises(OutOfOrderAppendError):
            buf.append(scn(50), b"x", 1)
        buf.append(scn(51), b"y", 1)
        buf.commit()
        assert buf.oldest_servable == scn(50)
        with pytest.raises(ScnTooOldError):
            buf.read_after(scn(49), 10, 100)
        assert [r.payload for r in buf.read_after(scn(50), 10, 100)] == [b"y"]


def test_lz4_round_trips_and_shrinks_compressible_payloads(tmp_path: Path) -> None:
    row = b"row %d of a very compressible table "
    text = [(scn(i), (row % i) * 20, i, False) for i in range(1, 200)]
    noise = [(scn(i), payload(i, 500), i, False) for i in range(200, 260)]
    items = text + noise
    sizes = {}
    for compress in (False, True):
        with EventBuffer.open(tmp_path / str(compress), segment_bytes=SEG, compress=compress) as b:
            fill(b, items)
            assert as_items(read_all(b)) == items
            sizes[compress] = b.size_bytes
    assert sizes[True] < sizes[False] * 0.4


@pytest.mark.parametrize("fsync", ["always", "batch", "never"])
def test_every_fsync_policy_round_trips_and_reopens(bufdir: Path, fsync: str) -> None:
    items = workload(60)
    with EventBuffer.open(bufdir, segment_bytes=SEG, fsync=fsync) as buf:
        fill(buf, items)
        assert as_items(read_all(buf)) == items
    with EventBuffer.open(bufdir, segment_bytes=SEG, fsync=fsync) as buf:
        assert as_items(read_all(buf)) == items


def test_a_record_bigger_than_a_segment_gets_its_own_segment(bufdir: Path) -> None:
    items = [(scn(1), b"small", 1, False), (scn(2), payload(2, 3 * SEG), 2, False)]
    items.append((scn(3), b"after", 3, False))
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, items)
        records = read_all(buf)
        assert as_items(records) == items
        assert [r.segment for r in records] == [0, 1, 2]
        assert records[1].offset == HEADER_SIZE


def test_retention_by_size_and_scn_too_old_names_the_oldest(bufdir: Path) -> None:
    items = workload(600, fragments=False, max_size=300)
    with EventBuffer.open(bufdir, segment_bytes=SEG, retain_bytes=5 * SEG) as buf:
        fill(buf, items)
        assert buf.size_bytes <= 5 * SEG
        seqs = list_segments(bufdir)
        assert seqs[0] > 0 and len(seqs) <= 5
        oldest = buf.oldest_servable
        assert oldest > SCN.ZERO
        with pytest.raises(ScnTooOldError) as err:
            buf.read_after(SCN.ZERO, 10, 1000)
        assert err.value.oldest == oldest and str(oldest) in str(err.value)
        kept = as_items(read_all(buf, after=oldest))
        assert kept == [item for item in items if item[0] > oldest]
        assert buf.first_scn == kept[0][0] and buf.record_count == len(kept)
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:  # survives reopening
        assert buf.oldest_servable == oldest
        assert as_items(read_all(buf, after=oldest)) == kept


def test_retention_by_age_uses_the_injected_clock(bufdir: Path) -> None:
    now = [1_000.0]
    old = [(scn(i), payload(i, 300), 1_000_000, False) for i in range(1, 60)]
    new = [(scn(i), payload(i, 300), 1_100_000, False) for i in range(60, 70)]
    with EventBuffer.open(
        bufdir, segment_bytes=SEG, retain_seconds=60, clock=lambda: now[0]
    ) as buf:
        fill(buf, old)
        assert list_segments(bufdir)[0] == 0  # nothing is old yet
        fill(buf, new)
        now[0] = 1_090.0  # old records are 90 s old, new ones 10 s in the future
        deleted = buf.enforce_retention()
        assert deleted and deleted[0] == 0
        remaining = read_all(buf, after=buf.oldest_servable)
        assert as_items(remaining[-len(new) :]) == new
        # Old records survive only in the segment that also holds new ones.
        first_new_segment = remaining[-len(new)].segment
        assert {r.segment for r in remaining[: -len(new)]} <= {first_new_segment}
        now[0] = 1_200.0
        buf.enforce_retention()
        assert len(list_segments(bufdir)) == 1  # never the active segment
        assert as_items(read_all(buf, after=buf.oldest_servable))[-1] == new[-1]


def test_wait_for_commit_is_woken_by_commit(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        result: list[tuple[bool, float]] = []

        def waiter() -> None:
            start = time.monotonic()
            result.append((buf.wait_for_commit(SCN.ZERO, 10.0), time.monotonic() - start))

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.1)
        buf.append(scn(1), b"x", 1)
        buf.commit()
        thread.join(5)
        assert result and result[0][0] and result[0][1] < 5
        assert not buf.wait_for_commit(scn(1), 0.01)


def test_concurrent_readers_see_an_increasing_gap_free_sequence(bufdir: Path) -> None:
    items = workload(1500, seed=7, max_size=300)
    errors: list[BaseException] = []
    seen: dict[int, list[Record]] = {}

    with EventBuffer.open(bufdir, segment_bytes=SEG, fsync="never") as buf:

        def writer() -> None:
            rnd = random.Random(3)
            pos = 0
            while pos < len(items):
                step = rnd.randint(1, 40)
                buf.append_many(items[pos : pos + step])
                pos += step
                buf.commit()
                time.sleep(rnd.random() * 0.002)

        def reader(n: int) -> None:
            got: list[Record] = []
            after = SCN.ZERO
            try:
                while len(got) < len(items):
                    batch = buf.read_after(after, 1 + n * 13, 2000 * (n + 1))
                    if not batch:
                        buf.wait_for_commit(after, 2.0)
                        continue
                    assert not batch[-1].more  # batches end on a whole transaction
                    got.extend(batch)
                    after = batch[-1].scn
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
            seen[n] = got

        threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
        threads.append(threading.Thread(target=writer))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    for n in range(4):
        assert as_items(seen[n]) == items


def test_readers_racing_retention_resume_gap_free_from_the_oldest(bufdir: Path) -> None:
    total = 4000
    errors: list[BaseException] = []
    with EventBuffer.open(bufdir, segment_bytes=SEG, retain_bytes=6 * SEG, fsync="never") as buf:

        def writer() -> None:
            rnd = random.Random(5)
            i = 1
            while i <= total:
                for _ in range(rnd.randint(1, 30)):
                    if i <= total:
                        buf.append(scn(i), payload(i, rnd.randint(0, 400)), i)
                        i += 1
                buf.commit()

        def reader(slow: bool) -> None:
            after, last = SCN.ZERO, 0
            try:
                while last < total:
                    try:
                        batch = buf.read_after(after, 50, 10_000)
                    except ScnTooOldError as exc:  # fell behind retention: skip to the oldest
                        assert exc.oldest > after
                        after, last = exc.oldest, exc.oldest.log_pos // 10
                        continue
                    if not batch:
                        buf.wait_for_commit(after, 2.0)
                        continue
                    for record in batch:
                        assert record.scn == scn(last + 1)
                        assert record.payload == payload(last + 1, len(record.payload))
                        last += 1
                    after = batch[-1].scn
                    if slow:
                        time.sleep(0.001)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(n % 2 == 1,)) for n in range(4)]
        threads.append(threading.Thread(target=writer))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
    assert errors == []


def test_a_second_writer_fails_clearly(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG):
        with pytest.raises(BufferLockedError, match=str(bufdir)):
            EventBuffer.open(bufdir, segment_bytes=SEG)
        code = (
            "import sys; from drc.eventbuffer import EventBuffer\n"
            "try:\n    EventBuffer.open(sys.argv[1])\n"
            "except Exception as e:\n    print(type(e).__name__, e); sys.exit(3)\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, str(bufdir)], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 3
        assert "BufferLockedError" in proc.stdout and str(bufdir) in proc.stdout
    with EventBuffer.open(bufdir, segment_bytes=SEG):  # released on close
        pass


def test_read_only_open_of_a_live_buffer(bufdir: Path) -> None:
    items = workload(200)
    with EventBuffer.open(bufdir, segment_bytes=SEG, retain_bytes=8 * SEG) as buf:
        fill(buf, items[:40])
        ro = EventBuffer.open_read_only(bufdir)
        assert ro.read_only and ro.epoch == buf.epoch
        assert as_items(read_all(ro)) == items[:40]
        buf.append(items[40][0], items[40][1], items[40][2], items[40][3])  # not committed
        fill(buf, items[41:])
        ro.refresh()  # properties of a read-only buffer are as of its last refresh or read
        assert as_items(read_all(ro, after=ro.oldest_servable)) == [
            item for item in items if item[0] > ro.oldest_servable
        ]
        assert ro.oldest_servable == buf.oldest_servable > SCN.ZERO  # retention was seen
        assert ro.last_scn == buf.last_scn
        assert ro.wait_for_commit(SCN.ZERO, 0.01)
        with pytest.raises(BufferStateError, match="read-only"):
            ro.append(scn(999), b"x", 1)
        ro.close()
        with pytest.raises(BufferStateError, match="closed"):
            ro.read_after(SCN.ZERO, 1, 1)


def test_a_read_only_reader_notices_the_buffer_was_recreated(bufdir: Path) -> None:
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, workload(5))
    ro = EventBuffer.open_read_only(bufdir)
    assert len(read_all(ro)) >= 5
    for path in bufdir.iterdir():
        path.unlink()
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, workload(5))
        with pytest.raises(BufferStateError, match="recreated"):
            ro.read_after(SCN.ZERO, 10, 1000)


def test_read_only_open_of_a_missing_buffer_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(BufferStateError, match="not an EventBuffer"):
        EventBuffer.open_read_only(tmp_path)


def test_a_reader_keeping_up_with_a_growing_segment_sees_every_record_once(
    bufdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ranges past the mapping are read (small) or remapped (large): both give the same records
    # at the same offsets as a reader that maps the finished file.
    monkeypatch.setattr("drc.eventbuffer.segment.TAIL_READ_BYTES", 2048)
    items = workload(300, max_size=1500)
    with EventBuffer.open(bufdir, segment_bytes=1 << 22) as buf:
        seen: list[Record] = []
        after = SCN.ZERO
        for n, (s, p, ts, more) in enumerate(items, 1):
            buf.append(s, p, ts, more)
            if n % random.Random(n).choice((1, 2, 9)) == 0:  # small and larger steps
                buf.commit()
                new = read_all(buf, after)
                seen.extend(new)
                after = new[-1].scn if new else after
        buf.commit()
        seen.extend(read_all(buf, after))
        assert as_items(seen) == items
    with EventBuffer.open(bufdir, segment_bytes=1 << 22) as again:
        assert [(r.segment, r.offset) for r in read_all(again)] == [
            (r.segment, r.offset) for r in seen
        ]


class _Refused(Exception):
    pass


def _refuse() -> None:
    raise _Refused("the lease ran out while the records were written")


@pytest.mark.parametrize("later", [3, 40], ids=["same-segment", "across-rotations"])
def test_a_commit_whose_check_fails_after_the_write_leaves_the_files_as_they_were(
    bufdir: Path, later: int
) -> None:
    """A fence that says no once the records are written (a leader paused mid-commit past
    its lease): the records never become visible and the files hold exactly what they held
    at the last commit, so a deposed leader's buffer is unchanged; a reopen sees that."""
    items = workload(60 + later, fragments=False)
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, items[:60])
        before = {p.name: p.read_bytes() for p in bufdir.glob("*.seg")}
        buf.append_many(items[60:])
        with pytest.raises(_Refused):
            buf.commit(_refuse)
        assert as_items(read_all(buf)) == items[:60], "nothing refused becomes visible"
        assert buf.uncommitted
    assert {p.name: p.read_bytes() for p in bufdir.glob("*.seg")} == before
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        assert as_items(read_all(buf)) == items[:60]
        fill(buf, items[60:])  # the same records append again, once allowed
        assert as_items(read_all(buf)) == items


def test_a_failed_write_stops_the_writer_until_it_is_reopened(
    bufdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError mid-write (an I/O error; a full disk only waits: test_eventbuffer_full.py)
    may leave the writer's state half-applied: every later write is refused, and a reopen
    keeps every committed record (and maybe more)."""
    items = workload(30, fragments=False)
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:
        fill(buf, items[:20])
        buf.append_many(items[20:])

        def broken(*_args: object) -> int:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr("drc.eventbuffer.writer.os.pwrite", broken)
        with pytest.raises(BufferStateError, match="Input/output error"):
            buf.commit()
        monkeypatch.undo()
        with pytest.raises(BufferStateError, match="stopped after a write failed"):
            buf.append(scn(99), b"x", 1)
        with pytest.raises(BufferStateError, match="stopped after a write failed"):
            buf.commit()
        assert as_items(read_all(buf)) == items[:20]
    with EventBuffer.open(bufdir, segment_bytes=SEG) as buf:  # rotations wrote some of the rest
        kept = as_items(read_all(buf))
        assert kept[:20] == items[:20] and kept == items[: len(kept)]
