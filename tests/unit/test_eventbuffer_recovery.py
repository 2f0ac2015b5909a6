"""EventBuffer recovery and corruption: torn tails, flipped bytes, damaged sealed segments,
and ``drc buffer verify|inspect``.

The expected result of a recovery is computed from where the records lie in the intact
files, not by the code under test: every record whose bytes lie wholly before the first
damaged byte of the last segment, minus a trailing transaction whose last fragment is lost.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.core.errors import BufferStateError, CorruptRecordError, ScnTooOldError
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer, Record
from drc.eventbuffer.format import HEADER_SIZE, SegmentHeader, decode_header, encode_header
from drc.eventbuffer.layout import list_segments, segment_path
from drc.metastore.store import MetaStore
from tests.support.eventbuffer import SEG, Item, as_items, fill, read_all, scn, workload

CASES = 80


class Template:
    """An intact, closed buffer whose last segment starts with the tail of a transaction that
    began in the segment before, and the records it holds (with their positions)."""

    def __init__(self, directory: Path) -> None:
        for seed in range(100):
            shutil.rmtree(directory, ignore_errors=True)
            with EventBuffer.open(directory, segment_bytes=SEG) as buf:
                fill(buf, workload(40, seed=seed, max_size=300))
                records = read_all(buf)
            last = records[-1].segment
            in_last = [r for r in records if r.segment == last]
            if len(in_last) >= 6 and records[records.index(in_last[0]) - 1].more:
                break
        else:
            raise AssertionError("no seed gives a transaction spanning into the last segment")
        self.directory = directory
        self.records = records
        self.last_seq = last
        self.last_path = segment_path(directory, last)
        self.last_size = self.last_path.stat().st_size

    def record_end(self, record: Record) -> int:
        later = [r.offset for r in self.records if r.segment == record.segment]
        later = [offset for offset in later if offset > record.offset]
        if later:
            return min(later)
        return segment_path(self.directory, record.segment).stat().st_size

    def expected_after_damage(self, first_bad: int) -> list[Record]:
        """The records recovery must keep when byte ``first_bad`` of the last segment (and
        maybe more after it) is damaged or missing."""
        keep = [
            r
            for r in self.records
            if r.segment < self.last_seq
            or (first_bad >= HEADER_SIZE and self.record_end(r) <= first_bad)
        ]
        while keep and keep[-1].more:
            keep.pop()
        return keep

    def damaged_record(self, position: int) -> Record:
        """The record of the last segment whose frame (padding included) holds ``position``."""
        in_last = [r for r in self.records if r.segment == self.last_seq]
        return next(r for r in in_last if r.offset <= position < self.record_end(r))

    def expected_after_flips(self, positions: list[int]) -> list[Record] | None:
        """What recovery keeps after bytes at ``positions`` of the last segment are flipped;
        None when an intact record follows the first damaged one, so the writer must refuse.

        A damaged header alone loses nothing: recovery rebuilds it (the segment before it is
        intact, so its prev_scn is known).
        """
        in_records = [p for p in positions if p >= HEADER_SIZE]
        if not in_records:
            return self.records
        first = in_records[0]
        intact_after = [
            r
            for r in self.records
            if r.segment == self.last_seq
            and r.offset > first
            and not any(r.offset <= p < self.record_end(r) for p in positions)
        ]
        return None if intact_after else self.expected_after_damage(first)

    def copy(self, to: Path) -> Path:
        shutil.copytree(self.directory, to)
        return to


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return Template(tmp_path_factory.mktemp("template") / "buf")


def flip(path: Path, offset: int, xor: int = 0x40) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ xor]))


def check_recovered(directory: Path, template: Template, expected: list[Record]) -> None:
    """Reopen, compare with ``expected``, check the files were cut, then append and read."""
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        assert as_items(read_all(buf)) == as_items(expected)
        assert buf.record_count == len(expected)
        last_seq = expected[-1].segment if expected else 0
        assert list_segments(directory)[-1] == last_seq
        if expected:
            end = template.record_end(expected[-1])
            assert segment_path(directory, last_seq).stat().st_size == end
        new: Item = (scn(1000), b"after recovery", 5, False)
        buf.append(*new)
        buf.commit()
        assert as_items(read_all(buf))[-1] == new
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:  # recovery was complete
        assert as_items(read_all(buf)) == [*as_items(expected), new]


@pytest.mark.parametrize("seed", range(CASES))
def test_random_truncation_of_the_last_segment_keeps_the_valid_prefix(
    template: Template, tmp_path: Path, seed: int
) -> None:
    rnd = random.Random(seed)
    cut = rnd.choice([rnd.randrange(template.last_size), rnd.randrange(HEADER_SIZE)])
    if seed % 10 == 0:  # exactly at a record boundary, too
        cut = rnd.choice([r.offset for r in template.records if r.segment == template.last_seq])
    directory = template.copy(tmp_path / "buf")
    with open(segment_path(directory, template.last_seq), "r+b") as f:
        f.truncate(cut)
    check_recovered(directory, template, template.expected_after_damage(cut))


@pytest.mark.parametrize("seed", range(CASES))
def test_random_byte_flips_in_the_last_segment_cut_a_torn_tail_or_stop_the_writer(
    template: Template, tmp_path: Path, seed: int
) -> None:
    rnd = random.Random(1000 + seed)
    directory = template.copy(tmp_path / "buf")
    positions = sorted(rnd.sample(range(template.last_size), rnd.randint(1, 3)))
    for position in positions:
        flip(segment_path(directory, template.last_seq), position, rnd.randint(1, 255))
    expected = template.expected_after_flips(positions)
    if expected is not None:
        check_recovered(directory, template, expected)
        return
    damaged = template.damaged_record([p for p in positions if p >= HEADER_SIZE][0])
    before = _contents(directory)
    where = f"{segment_path(directory, template.last_seq)} offset {damaged.offset}: "
    with pytest.raises(CorruptRecordError, match=re.escape(where) + ".*drc buffer repair"):
        EventBuffer.open(directory, segment_bytes=SEG)
    assert _contents(directory) == before  # nothing cut


def _contents(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.seg"))}


_CHILD = """
import sys
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer

buf = EventBuffer.open(sys.argv[1], segment_bytes=4096, fsync="batch")
i = (buf.last_scn.log_pos if buf.last_scn else 0) + 1
while True:
    for part in range(i % 3 + 1):  # transactions of 1-3 fragments
        buf.append(SCN(1, 1, 1, i), bytes([i % 256]) * (i % 500), i, more=part < i % 3)
    if i % 5 == 0:
        buf.commit()
        print(i, flush=True)
    i += 1
"""


def test_a_writer_killed_at_random_keeps_every_committed_transaction(tmp_path: Path) -> None:
    directory = tmp_path / "buf"
    committed = 0
    for round_ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(directory)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        for _ in range(random.Random(round_).randint(50, 400)):
            committed = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        with EventBuffer.open(directory, segment_bytes=SEG) as buf:
            records = read_all(buf)
        txns = [r for r in records if not r.more]
        assert [r.scn.log_pos for r in txns] == list(range(1, len(txns) + 1))
        assert len(txns) >= committed
        for record in records:
            i = record.scn.log_pos
            assert record.payload == bytes([i % 256]) * (i % 500)


def test_a_zeroed_tail_is_cut_like_a_torn_one(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    in_last = [r for r in template.records if r.segment == template.last_seq]
    victim = in_last[len(in_last) // 2]
    with open(segment_path(directory, template.last_seq), "r+b") as f:
        f.seek(victim.offset)
        f.write(bytes(template.last_size - victim.offset))
    check_recovered(directory, template, template.expected_after_damage(victim.offset))


def test_an_unfinished_transaction_is_dropped_across_segments(tmp_path: Path) -> None:
    directory = tmp_path / "buf"
    head: list[Item] = [(scn(1), b"one", 1, False)]
    fragments: list[Item] = [(scn(2), bytes([k]) * 1500, 2, True) for k in range(6)]
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        fill(buf, head + fragments)  # committed, but the transaction has no last fragment
        assert len(list_segments(directory)) >= 3
        assert as_items(read_all(buf)) == head
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        assert list_segments(directory) == [0]
        assert as_items(read_all(buf)) == head and buf.last_scn == scn(1)
        whole = [*fragments, (scn(2), b"last", 2, False)]
        fill(buf, whole)  # the transaction can be appended again
        assert as_items(read_all(buf)) == head + whole


@pytest.mark.parametrize("offset", [0, 5, 9, 11, 14, 20, 35, 45, 59, 62])
def test_a_damaged_header_of_the_only_segment_is_rebuilt_keeping_its_records(
    tmp_path: Path, offset: int
) -> None:
    directory = tmp_path / "buf"
    with EventBuffer.open(directory, segment_bytes=1 << 20) as buf:
        fill(buf, workload(14))
        epoch, records = buf.epoch, read_all(buf)
    path = segment_path(directory, 0)
    intact = path.read_bytes()
    flip(path, offset)
    assert CliRunner().invoke(cli, ["buffer", "verify", str(directory)]).exit_code == 1
    with EventBuffer.open_read_only(directory) as reader:  # rebuilt in memory, not written
        assert as_items(read_all(reader)) == as_items(records)
    assert path.read_bytes() != intact
    with EventBuffer.open(directory, segment_bytes=1 << 20) as buf:
        assert buf.epoch == epoch and buf.oldest_servable == SCN.ZERO
        assert as_items(read_all(buf)) == as_items(records)
        assert buf.resume_scn == records[-1].scn
    assert path.read_bytes() == intact  # the header written back is the original one
    assert CliRunner().invoke(cli, ["buffer", "verify", str(directory)]).exit_code == 0


def test_an_unfinished_creation_is_redone(tmp_path: Path) -> None:
    directory = tmp_path / "buf"
    directory.mkdir()
    segment_path(directory, 0).write_bytes(b"\x89DRC")  # crashed while writing segment 0
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        fill(buf, workload(2))
        assert len(read_all(buf)) >= 2


def test_segments_without_buffer_json_are_refused(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    (directory / "buffer.json").unlink()
    with pytest.raises(BufferStateError, match="no buffer.json"):
        EventBuffer.open(directory, segment_bytes=SEG)


def test_a_segment_of_another_buffer_is_refused(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    other = tmp_path / "other"
    with EventBuffer.open(other, segment_bytes=SEG) as buf:
        fill(buf, workload(1))
    shutil.copy(segment_path(other, 0), segment_path(directory, 0))
    with pytest.raises(BufferStateError, match="epoch"):
        EventBuffer.open(directory, segment_bytes=SEG)


def test_a_missing_segment_in_the_middle_is_refused(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    segment_path(directory, 1).unlink()
    with pytest.raises(BufferStateError, match=r"missing segment\(s\) \[1\]"):
        EventBuffer.open(directory, segment_bytes=SEG)


def test_a_damaged_header_of_a_sealed_segment_is_rebuilt_from_the_one_before(
    template: Template, tmp_path: Path
) -> None:
    directory = template.copy(tmp_path / "buf")
    flip(segment_path(directory, 1), 40)  # prev_scn: known from segment 0's last record
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        assert as_items(read_all(buf)) == as_items(template.records)
    assert CliRunner().invoke(cli, ["buffer", "verify", str(directory)]).exit_code == 0


def _trimmed(tmp_path: Path) -> tuple[Path, list[Record]]:
    """A buffer of whole one-record transactions as retention leaves it (segments 0 and 1
    deleted), and the records it still holds."""
    directory = tmp_path / "buf"
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        fill(buf, workload(60, fragments=False))
        records = read_all(buf)
    assert len(list_segments(directory)) > 3
    for seq in (0, 1):
        segment_path(directory, seq).unlink()
    return directory, [r for r in records if r.segment > 1]


def test_a_damaged_header_of_the_oldest_segment_keeps_a_prev_scn_its_crc_proves(
    tmp_path: Path,
) -> None:
    directory, kept = _trimmed(tmp_path)
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        oldest = buf.oldest_servable
    flip(
        segment_path(directory, kept[0].segment), 20
    )  # the epoch: known, so the CRC checks prev_scn
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        assert buf.oldest_servable == oldest
        served = as_items(read_all(buf, after=oldest))
        assert served == [item for item in as_items(kept) if item[0] > oldest]


def test_an_unknown_prev_scn_of_the_oldest_segment_moves_the_servable_start_forward(
    tmp_path: Path,
) -> None:
    directory, kept = _trimmed(tmp_path)
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        oldest = buf.oldest_servable
    flip(
        segment_path(directory, kept[0].segment), 45
    )  # prev_scn itself: it cannot be trusted any more
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        first = kept[0].scn
        assert oldest < first and buf.oldest_servable == first
        with pytest.raises(ScnTooOldError):
            buf.read_after(oldest)  # older positions get 410, never a gap
        assert as_items(read_all(buf, after=first)) == [
            item for item in as_items(kept) if item[0] > first
        ]


def test_an_empty_oldest_segment_with_a_damaged_header_stops_the_writer(tmp_path: Path) -> None:
    directory = tmp_path / "buf"
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        fill(buf, workload(40))
    seqs = list_segments(directory)
    for seq in seqs[:-1]:
        segment_path(directory, seq).unlink()
    last = segment_path(directory, seqs[-1])
    with open(last, "r+b") as f:
        f.truncate(HEADER_SIZE)
    flip(last, 45)
    with pytest.raises(CorruptRecordError, match="oldest servable SCN .* is unknown"):
        EventBuffer.open(directory, segment_bytes=SEG)


def _victim(template: Template, seq: int) -> Record:
    in_seg = [r for r in template.records if r.segment == seq and len(r.payload) > 10]
    return in_seg[len(in_seg) // 2]


def test_a_flip_in_a_sealed_segment_is_never_served(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    victim = _victim(template, 1)
    path = segment_path(directory, 1)
    where = f"{path} at offset {victim.offset}"
    before = [r for r in template.records if r.scn < victim.scn]
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        flip(path, victim.offset + 40)  # damaged while the buffer is open
        with pytest.raises(CorruptRecordError, match=where):
            read_all(buf)
        served = buf.read_after(SCN.ZERO, len(before), 1 << 20)
        assert as_items(served) == as_items(before)[: len(served)]
        last_segment = template.last_seq
        tail = [r for r in template.records if r.segment == last_segment and not r.more]
        after_damage = buf.read_after(tail[0].scn, 1000, 1 << 20)
        rest = template.records[template.records.index(tail[0]) + 1 :]
        assert as_items(after_damage) == as_items(rest)
    sizes = {p.name: p.stat().st_size for p in directory.glob("*.seg")}
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:  # found by the scan on open
        with pytest.raises(CorruptRecordError, match=where):
            read_all(buf)
        assert {
            p.name: p.stat().st_size for p in directory.glob("*.seg")
        } == sizes  # not "repaired"
        buf.append(scn(1000), b"new", 1)
        buf.commit()
        assert as_items(buf.read_after(template.records[-1].scn, 10, 100))[0][1] == b"new"
        with pytest.raises(CorruptRecordError, match=where):
            read_all(buf)


def test_verify_names_segment_and_offset_of_each_damage(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    runner = CliRunner()
    clean = runner.invoke(cli, ["buffer", "verify", str(directory)])
    assert clean.exit_code == 0, clean.output
    assert clean.output.startswith("OK: ") and f"{len(template.records)} record(s)" in clean.output
    victims = [_victim(template, 0), _victim(template, 1)]
    flip(segment_path(directory, 0), victims[0].offset + 45)
    flip(segment_path(directory, 1), victims[1].offset + 2)  # in the CRC word
    result = runner.invoke(cli, ["buffer", "verify", str(directory)])
    assert result.exit_code == 1
    for seq, victim in enumerate(victims):
        assert f"{segment_path(directory, seq)}: offset {victim.offset}: " in result.output
    assert "2 problem(s)" in result.output


def test_verify_checks_the_prev_scn_chain(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    path = segment_path(directory, 1)
    with open(path, "r+b") as f:
        header = decode_header(f.read(HEADER_SIZE))
        f.seek(0)
        f.write(encode_header(SegmentHeader(header.epoch, header.seq, scn(999))))  # valid CRC
    result = CliRunner().invoke(cli, ["buffer", "verify", str(directory)])
    assert result.exit_code == 1
    assert f"{path}: offset 40: prev_scn {scn(999)} is not" in result.output


def test_verify_of_a_directory_without_a_buffer_fails(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["buffer", "verify", str(tmp_path)])
    assert result.exit_code == 1 and "no buffer.json" in result.output


def test_inspect_describes_a_live_buffer(template: Template, tmp_path: Path) -> None:
    directory = template.copy(tmp_path / "buf")
    runner = CliRunner()
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        buf.append(scn(1000), b"committed", 1)
        buf.commit()
        result = runner.invoke(cli, ["buffer", "inspect", "--format", "json", str(directory)])
        assert result.exit_code == 0, result.output
        info = json.loads(result.output)
        assert info["epoch"] == buf.epoch
        assert info["records"] == len(template.records) + 1
        assert info["last_scn"] == str(scn(1000))
        assert [s["seq"] for s in info["segments"]] == list_segments(directory)
        assert sum(s["records"] for s in info["segments"]) == info["records"]
        table = runner.invoke(cli, ["buffer", "inspect", str(directory)])
        assert table.exit_code == 0 and buf.epoch in table.output
        assert segment_path(directory, 0).name in table.output


def test_a_torn_tail_is_cut_but_a_flip_with_records_after_it_stops_the_writer(
    template: Template, tmp_path: Path
) -> None:
    in_last = [r for r in template.records if r.segment == template.last_seq]
    victim = in_last[len(in_last) // 2]
    torn = template.copy(tmp_path / "torn")  # the damage reaches the end of the file
    with open(segment_path(torn, template.last_seq), "r+b") as f:
        f.truncate(victim.offset + 20)
    check_recovered(torn, template, template.expected_after_damage(victim.offset))

    flipped = template.copy(tmp_path / "flipped")  # the same record damaged, records after it
    flip(segment_path(flipped, template.last_seq), victim.offset + 20)
    before = _contents(flipped)
    where = f"{segment_path(flipped, template.last_seq)} offset {victim.offset}: "
    with pytest.raises(CorruptRecordError, match=re.escape(where)) as failure:
        EventBuffer.open(flipped, segment_bytes=SEG)
    assert f"drc buffer verify {flipped}" in str(failure.value)
    assert f"drc buffer repair {flipped}" in str(failure.value)
    assert _contents(flipped) == before  # nothing cut
    verify = CliRunner().invoke(cli, ["buffer", "verify", str(flipped)])
    assert verify.exit_code == 1 and "valid record(s) follow it" in verify.output


def test_repair_discards_the_damage_and_moves_the_servable_start_past_it(
    template: Template, tmp_path: Path
) -> None:
    directory = template.copy(tmp_path / "buf")
    in_last = [r for r in template.records if r.segment == template.last_seq]
    victim = in_last[len(in_last) // 2]
    flip(segment_path(directory, template.last_seq), victim.offset + 20)
    runner = CliRunner()
    result = runner.invoke(cli, ["buffer", "repair", str(directory)])
    assert result.exit_code == 0, result.output
    newest = template.records[-1].scn  # seen after the damage: lost, so not servable
    assert f"serves reads after SCN {newest}" in result.output
    [moved] = list(directory.glob("discarded-*"))
    assert sorted(p.name for p in moved.iterdir()) == [
        segment_path(directory, seq).name for seq in range(template.last_seq + 1)
    ]
    assert runner.invoke(cli, ["buffer", "verify", str(directory)]).exit_code == 0
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        assert buf.oldest_servable == newest and buf.resume_scn == newest
        for record in (template.records[0], victim, in_last[-2]):
            with pytest.raises(ScnTooOldError):
                buf.read_after(record.scn)
        buf.append(scn(1000), b"captured again", 5)
        buf.commit()
        assert as_items(read_all(buf, after=newest)) == [(scn(1000), b"captured again", 5, False)]
    again = runner.invoke(cli, ["buffer", "repair", str(directory)])
    assert again.exit_code == 0 and "nothing to repair" in again.output


def test_repair_of_a_damaged_sealed_segment_discards_it_and_every_older_one(
    template: Template, tmp_path: Path
) -> None:
    directory = template.copy(tmp_path / "buf")
    victim = _victim(template, 1)
    flip(segment_path(directory, 1), victim.offset + 40)
    result = CliRunner().invoke(cli, ["buffer", "repair", str(directory)])
    assert result.exit_code == 0, result.output
    assert list_segments(directory) == list(range(2, template.last_seq + 1))
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        with pytest.raises(ScnTooOldError):
            buf.read_after(victim.scn)
        rest = [r for r in template.records if r.segment >= 2 and r.scn > buf.oldest_servable]
        assert as_items(read_all(buf, after=buf.oldest_servable)) == as_items(rest)


def test_buffer_files_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    directory = tmp_path / "buf"
    directory.mkdir(mode=0o755)  # made by an installer, say
    old = os.umask(0)
    try:
        with EventBuffer.open(directory, segment_bytes=SEG) as buf:
            fill(buf, workload(30))
        with MetaStore.open(directory / "metastore.sqlite3"):  # with its -wal and -shm files
            files = list(directory.iterdir())
            modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in files}
    finally:
        os.umask(old)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert {"buffer.json", "LOCK", "metastore.sqlite3-wal"} <= set(modes)
    assert len(list_segments(directory)) > 1
    assert modes == dict.fromkeys(modes, 0o600)
