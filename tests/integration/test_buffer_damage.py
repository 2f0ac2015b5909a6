"""Damage to the buffer's only segment never turns into a silent gap for subscribers.

A real replicator captures dc1 and serves its buffer over HTTP; the test damages the segment
file while the replicator is down, restarts it, writes more, and pulls from a position inside
the damaged range. A subscriber must either get every transaction after its position (nothing
skipped) or a 410/409 telling it to resync: never a 200 that jumps over lost transactions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from drc.api import wire
from drc.cli.main import cli
from drc.config import DrcConfig
from drc.core.errors import CorruptRecordError
from drc.core.jsonwire import transaction_from_json
from drc.core.scn import SCN
from drc.eventbuffer.layout import segment_path
from drc.runtime import ReplicatorService, build_replicator
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import serving, source_section
from tests.support.servers import connect, master_position

TOKEN = "damage-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FIRST = 14  # transactions captured before the damage, as in the report of issue 12
MORE = 3  # written after the restart


def _config(server: ServerInfo, tmp: Path) -> DrcConfig:
    return DrcConfig.model_validate(
        {
            "datacenter": {"name": "dc1"},
            "source": source_section(server, 91201),
            # start_from "current": what an empty buffer would resume from after a lost history.
            "replicator": {"buffer_dir": str(tmp / "buf"), "include": ["dmg_db.*"]},
            "api": {"host": "127.0.0.1", "port": 0, "tokens": [TOKEN]},
        }
    )


@contextmanager
def _serving(config: DrcConfig) -> Iterator[tuple[ReplicatorService, str]]:
    service = build_replicator(config)
    service.replicator.prepare()  # the start position is stored before the test writes
    url = service.start_api().url
    with serving(service):
        yield service, url


def _insert(server: ServerInfo, ids: range) -> None:
    conn = connect(server)
    with conn.cursor() as cur:
        for n in ids:  # one transaction each (autocommit)
            cur.execute("INSERT INTO dmg_db.t VALUES (%s, %s)", (n, f"v{n}"))
    conn.close()


def _wait_caught_up(service: ReplicatorService, server: ServerInfo) -> None:
    file, pos = master_position(server)
    target = (int(file.rsplit(".", 1)[1]), pos)
    for _ in range(600):
        last = service.buffer.last_scn
        if last is not None and (last.log_index, last.log_pos) >= target:
            return
        threading.Event().wait(0.05)
    raise AssertionError(f"capture did not reach {file}:{pos}")


def _pull(url: str, after: SCN) -> tuple[int, list[tuple[SCN, int]]]:
    """(status, [(scn, inserted id)]) of every transaction after ``after`` up to the newest."""
    out: list[tuple[SCN, int]] = []
    position = str(after)
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        while True:
            params = {"after": position, "tables": "dmg_db.t"}
            response = client.get(wire.PATH_EVENTS, params=params)
            if response.status_code != 200:
                return response.status_code, out
            body = response.json()
            for data in body["transactions"]:
                txn = transaction_from_json(data)
                out += [(txn.scn, change.after["id"]) for change in txn.changes]
            position = body["next"]
            if position == body["newest"]:
                return 200, out


def _verify(directory: Path) -> int:
    return CliRunner().invoke(cli, ["buffer", "verify", str(directory)]).exit_code


@pytest.fixture
def captured(dc1: ServerInfo, tmp_path: Path) -> tuple[DrcConfig, list[SCN]]:
    """A buffer holding FIRST one-row transactions (ids 1..FIRST), replicator stopped."""
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS dmg_db")
        cur.execute("CREATE DATABASE dmg_db")
        cur.execute("CREATE TABLE dmg_db.t (id INT PRIMARY KEY, v VARCHAR(20))")
    conn.close()
    config = _config(dc1, tmp_path)
    with _serving(config) as (service, url):
        _insert(dc1, range(1, FIRST + 1))
        _wait_caught_up(service, dc1)
        status, seen = _pull(url, SCN(0, 0, 0, 0))
    assert status == 200 and [n for _, n in seen] == list(range(1, FIRST + 1))
    return config, [scn for scn, _ in seen]


def test_a_flipped_header_byte_of_the_only_segment_skips_nothing(
    captured: tuple[DrcConfig, list[SCN]], dc1: ServerInfo
) -> None:
    config, scns = captured
    directory = Path(config.replicator.buffer_dir)
    segment = segment_path(directory, 0)
    raw = bytearray(segment.read_bytes())
    raw[20] ^= 0x40  # inside the epoch field of the header
    segment.write_bytes(raw)
    assert _verify(directory) == 1

    with _serving(config) as (service, url):
        _insert(dc1, range(FIRST + 1, FIRST + MORE + 1))
        _wait_caught_up(service, dc1)
        status, seen = _pull(url, scns[2])
    # The header is rebuilt from what is known (buffer.json, file name, base SCN): no loss.
    assert status == 200
    assert [n for _, n in seen] == list(range(4, FIRST + MORE + 1))
    assert [scn for scn, _ in seen][: FIRST - 3] == scns[3:]
    assert _verify(directory) == 0


def test_a_flip_inside_a_record_stops_capture_until_repair_moves_the_servable_start(
    captured: tuple[DrcConfig, list[SCN]], dc1: ServerInfo
) -> None:
    config, scns = captured
    directory = Path(config.replicator.buffer_dir)
    segment = segment_path(directory, 0)
    raw = bytearray(segment.read_bytes())
    victim = _record_offset(raw, scns[7])
    raw[victim + 30] ^= 0x40  # inside the record of transaction 8: records follow it
    segment.write_bytes(raw)
    assert _verify(directory) == 1

    with pytest.raises(CorruptRecordError) as failure:
        build_replicator(config)
    message = str(failure.value)
    assert str(segment) in message and f"offset {victim}" in message
    assert "drc buffer verify" in message and "drc buffer repair" in message

    repaired = CliRunner().invoke(cli, ["buffer", "repair", str(directory)])
    assert repaired.exit_code == 0, repaired.output
    assert _verify(directory) == 0
    with _serving(config) as (service, url):
        _insert(dc1, range(FIRST + 1, FIRST + MORE + 1))
        _wait_caught_up(service, dc1)
        for index in (2, 7, FIRST - 2):
            # Before the servable start: read again from the source binlog, nothing skipped
            # (a 410 once the binlog is purged: test_back_to_source.py).
            status, seen = _pull(url, scns[index])
            assert status == 200 and [n for _, n in seen] == list(
                range(index + 2, FIRST + MORE + 1)
            )
        status, seen = _pull(url, scns[-1])
    assert status == 200 and [n for _, n in seen] == list(range(FIRST + 1, FIRST + MORE + 1))


def _record_offset(raw: bytearray, scn: SCN) -> int:
    """Offset of the frame whose SCN is ``scn`` (the SCN follows the 8-byte crc and length)."""
    offset = raw.find(scn.to_bytes())
    assert offset > 64
    return offset - 8
