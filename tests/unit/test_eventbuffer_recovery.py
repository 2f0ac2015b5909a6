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
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.core.errors import BufferStateError, CorruptRecordError
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer, Record
from drc.eventbuffer.format import HEADER_SIZE, SegmentHeader, decode_header, encode_header
from drc.eventbuffer.layout import list_segments, segment_path
from tests.unit.test_eventbuffer import SEG, Item, as_items, fill, read_all, scn, workload

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
def test_random_byte_flips_in_the_last_segment_keep_the_valid_prefix(
    template: Template, tmp_path: Path, seed: int
) -> None:
    rnd = random.Random(1000 + seed)
    directory = template.copy(tmp_path / "buf")
    positions = sorted(rnd.sample(range(template.last_size), rnd.randint(1, 3)))
    for position in positions:
        flip(segment_path(directory, template.last_seq), position, rnd.randint(1, 255))
    check_recovered(directory, template, template.expected_after_damage(positions[0]))


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


def test_a_damaged_header_of_the_only_segment_zero_is_rewritten(tmp_path: Path) -> None:
    directory = tmp_path / "buf"
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        fill(buf, workload(3))
        epoch = buf.epoch
    flip(segment_path(directory, 0), 5)
    with EventBuffer.open(directory, segment_bytes=SEG) as buf:
        assert buf.epoch == epoch and read_all(buf) == []
        fill(buf, workload(2))
        assert len(read_all(buf)) >= 2


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


def test_a_damaged_header_of_a_sealed_segment_stops_the_writer(
    template: Template, tmp_path: Path
) -> None:
    directory = template.copy(tmp_path / "buf")
    flip(segment_path(directory, 1), 40)
    with pytest.raises(CorruptRecordError, match=f"{segment_path(directory, 1)} offset 0"):
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
