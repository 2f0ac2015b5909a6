"""Back to source on real MariaDB: a pull from before the buffer's start (retention deleted those
segments) is served from the source binlog with the same SCNs and the same record bytes the
replicator stored, and gets 410 once the binlog is purged (drc.replicator.backfill); in a
replicator group under the two-way workload a follower serves it too (through its leader, on
real ZooKeeper), and answers 410 once the binlog is purged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drc.api import wire
from drc.config import DrcConfig
from drc.core.codec import decode_transaction, peek_length
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.runtime import ReplicatorService, build_replicator
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.capture import serving, source_section
from tests.support.group import Group, last_scn, records
from tests.support.servers import connect, execute, fresh_database, master_position
from tests.support.two_way import TwoWay

TOKEN = "bts-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Accept": wire.MEDIA_RECORDS}
PAD = "x" * 1000


def _config(server: ServerInfo, tmp: Path, start: tuple[str, int]) -> DrcConfig:
    return DrcConfig.model_validate(
        {
            "datacenter": {"name": "dc1"},
            "source": source_section(server, 93001),
            "replicator": {
                "buffer_dir": str(tmp / "buf"),
                "start_from": f"{start[0]}:{start[1]}",
                "include": ["bts_db.t"],
                "fragment_rows": 7,  # some transactions are stored as several fragments
                "commit_max_ms": 20,
                "buffer": {"segment_mb": 1, "retain_gb": 0.002},  # keeps about 2 MB
            },
            "api": {"host": "127.0.0.1", "port": 0, "tokens": [TOKEN]},
        }
    )


def _fresh_tables(server: ServerInfo) -> None:
    """bts_db's tables, empty, at the start of a new binlog file."""
    execute(server, "FLUSH BINARY LOGS")
    fresh_database(
        server,
        "bts_db",
        "CREATE TABLE bts_db.t (id INT PRIMARY KEY, v TEXT)",
        "CREATE TABLE bts_db.skipped (id INT PRIMARY KEY)",
    )


@pytest.fixture
def served(dc1: ServerInfo, tmp_path: Path) -> Iterator[tuple[ReplicatorService, str]]:
    _fresh_tables(dc1)
    service = build_replicator(_config(dc1, tmp_path, master_position(dc1)))
    service.replicator.prepare()
    url = service.start_api().url
    with serving(service):
        yield service, url


def _write(server: ServerInfo, first: int, txns: int, rows: int) -> list[int]:
    conn = connect(server, autocommit=False)
    ids = []
    with conn.cursor() as cur:
        for n in range(txns):
            batch = [(first + n * rows + k, PAD) for k in range(rows)]
            cur.executemany("INSERT INTO bts_db.t VALUES (%s, %s)", batch)
            ids.extend(row[0] for row in batch)
            if n % 5 == 0:  # filtered out: the buffer keeps only markers of these
                cur.execute("INSERT INTO bts_db.skipped VALUES (%s)", (first + n,))
            conn.commit()
    conn.close()
    return ids


def _wait_captured(
    service: ReplicatorService, server: ServerInfo, in_new_file: bool = False
) -> None:
    """Until the buffer holds what was written; ``in_new_file``: the one transaction written
    since a FLUSH BINARY LOGS (the server adds a binlog checkpoint event after it)."""
    file, pos = master_position(server)
    target = (int(file.rsplit(".", 1)[1]), 0 if in_new_file else pos)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        last = service.buffer.last_scn
        if last is not None and (last.log_index, last.log_pos) >= target:
            return
        assert service.failure is None, service.failure
        time.sleep(0.05)
    stats = service.replicator.stats
    raise AssertionError(
        f"capture did not reach {file}:{pos}: buffer at {service.buffer.last_scn}, "
        f"source at {stats.source_position}, last error {stats.last_error}"
    )


def _pull(url: str, after: SCN, until: SCN) -> list[tuple[SCN, bytes]]:
    """Every record (SCN, bytes) after ``after`` up to ``until``, through the API."""
    out: list[tuple[SCN, bytes]] = []
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
        while after < until:
            response = client.get(wire.PATH_EVENTS, params={"after": str(after), "wait_ms": -1})
            assert response.status_code == 200, response.text
            body, offset = response.content, 0
            while offset < len(body):
                end = offset + peek_length(body, offset)
                out.append((decode_transaction(body, offset)[0].scn, body[offset:end]))
                offset = end
            after = SCN.parse(response.headers[wire.HEADER_NEXT])
    return out


def _stored(service: ReplicatorService) -> list[tuple[SCN, bytes]]:
    out, after = [], SCN.ZERO
    while records := service.buffer.read_after(after, max_records=1000, max_bytes=64 << 20):
        out.extend((r.scn, r.payload) for r in records)
        after = records[-1].scn
    return out


def _with_changes(records: list[tuple[SCN, bytes]]) -> list[tuple[SCN, bytes]]:
    return [(scn, data) for scn, data in records if decode_transaction(data)[0].changes]


def test_a_pull_older_than_the_buffer_is_served_from_the_binlog_then_410_once_purged(
    served: tuple[ReplicatorService, str], dc1: ServerInfo
) -> None:
    service, url = served
    start = service.buffer.resume_scn
    assert start is not None
    written = _write(dc1, 1, txns=40, rows=10)  # about 400 KB: fits the retention
    _wait_captured(service, dc1)
    original = _with_changes(_stored(service))  # what the replicator stored, byte for byte
    assert service.buffer.oldest_servable <= start

    written += _write(dc1, 100_000, txns=400, rows=10)  # about 4 MB: retention drops the start
    _wait_captured(service, dc1)
    oldest = service.buffer.oldest_servable
    assert oldest > original[-1][0], "retention should have deleted the first records"

    pulled = _pull(url, start, service.buffer.last_scn)
    # Everything up to the buffer's start came from the binlog; the first phase was seen in
    # the buffer before retention deleted it.
    again = [(scn, data) for scn, data in _with_changes(pulled) if scn <= original[-1][0]]
    assert [scn for scn, _ in again] == [scn for scn, _ in original]
    assert again == original, "the same bytes as the replicator stored"
    rows = [c.after["id"] for _s, d in pulled for c in decode_transaction(d)[0].changes]
    assert rows == written, "the source part and the buffer part join without gap or repeat"

    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        written += _write(dc1, 900_000, txns=1, rows=1)
        _wait_captured(service, dc1, in_new_file=True)  # left the old file: it may be purged
        cur.execute("PURGE BINARY LOGS TO %s", (master_position(dc1)[0],))
        cur.execute("SHOW BINARY LOGS")
        assert [row[0] for row in cur.fetchall()] == [master_position(dc1)[0]]
    conn.close()
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
        gone = client.get(wire.PATH_EVENTS, params={"after": str(start), "wait_ms": -1})
    assert gone.status_code == 410, gone.text
    assert gone.json()["error"] == wire.ERROR_SCN_TOO_OLD
    assert "purged" in gone.json()["message"]


def _stored_in(directory: Path) -> list[tuple[SCN, bytes]]:
    return [(scn, payload) for scn, payload, _ts, _more in records(directory)]


W_TABLE = "CREATE TABLE bts_db.w (id INT PRIMARY KEY, v VARCHAR(40))"


@pytest.mark.slow
def test_a_follower_serves_a_pull_older_than_every_members_buffer_from_the_source(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """Three members under the two-way workload (on bts_db.w); the bulk rows written into
    bts_db.t push every member's retention past the start."""
    _fresh_tables(dc1)
    execute(dc1, W_TABLE)
    fresh_database(dc2, "bts_db", W_TABLE)
    retention = "[replicator.buffer]\nsegment_mb = 1\nretain_gb = 0.002\n"  # about 2 MB
    name = f"bts{time.time_ns() % 10**9}"
    group = Group.create(sandbox, dc1, tmp_path, 3, 2.0, name, extra=retention)
    other = Group.create(sandbox, dc2, tmp_path / "dc2", 1, 2.0, f"{name}x")  # dc2's
    load = TwoWay(sandbox, group, other, "bts_db", tmp_path / "load", table="w")
    group.start()
    other.start()
    try:
        load.start_channels()
        leader = group.wait_leader(30)
        group.wait_started(leader)
        other.wait_started(other.wait_leader(30))
        group.wait_roles(["follower", "follower", "leader"])
        start = last_scn(leader.buffer_dir)
        assert start is not None
        load.start()
        load.wait_flowing()
        written = _write(dc1, 1, txns=40, rows=10)
        group.wait_caught_up(_source_scn(dc1))
        stored = _with_changes(_stored_in(group.members[0].buffer_dir))
        original = [(scn, data) for scn, data in stored if scn > start]
        written += _write(dc1, 100_000, txns=400, rows=10)  # retention drops the start
        group.wait_caught_up(_source_scn(dc1))
        for member in group.members:
            with EventBuffer.open_read_only(member.buffer_dir) as buffer:
                assert buffer.oldest_servable > original[-1][0], member.member_id
        follower = next(m for m in group.members if (m.status() or {}).get("role") == "follower")
        end = last_scn(follower.buffer_dir)
        assert end is not None
        pulled = _pull(follower.url, start, end)
        gone = _purged_then_pulled(dc1, group, follower.url, start)
        load.stop_writes()
        load.wait_converged(dc1)
        other.wait_caught_up(_source_scn(dc2))
        load.assert_applied_once_none_echoed(dc1, [])
    finally:
        load.close()
        group.stop()
        other.stop()
    again = [(scn, data) for scn, data in _with_changes(pulled) if scn <= original[-1][0]]
    assert again == original, "the same SCNs and bytes as the members stored"
    txns = [decode_transaction(d)[0] for _s, d in pulled]
    scns = [t.scn for t in txns if t.last_fragment]
    assert all(a < b for a, b in zip(scns, scns[1:], strict=False)), "SCNs strictly increase"

    def ids(table: str, applied: bool) -> list[int]:
        return [
            c.after["id"]
            for t in txns
            if t.drc_originated == applied
            for c in t.changes
            if (c.schema, c.table) == ("bts_db", table) and c.after is not None
        ]

    assert ids("t", False) == written, "the source part and the buffer part join, no gap, no repeat"
    mine, theirs = ids("w", False), ids("w", True)
    assert mine and mine == load.dc1_writes.written[: len(mine)], "dc1's writes, each once"
    assert len(set(theirs)) == len(theirs) and set(theirs) <= set(load.dc2_writes.written)
    assert gone.status_code == 410, gone.text
    assert gone.json()["error"] == wire.ERROR_SCN_TOO_OLD
    assert "purged" in gone.json()["message"], gone.text


def _purged_then_pulled(server: ServerInfo, group: Group, url: str, after: SCN) -> httpx.Response:
    """Purge ``server``'s binlog files before the one the group reads now, then pull after
    ``after`` from ``url``."""
    execute(server, "FLUSH BINARY LOGS")
    group.wait_caught_up(_source_scn(server))  # every member reads the new file
    execute(server, f"PURGE BINARY LOGS TO '{master_position(server)[0]}'")
    with httpx.Client(base_url=url, headers=HEADERS, timeout=60) as client:
        return client.get(wire.PATH_EVENTS, params={"after": str(after), "wait_ms": -1})


def _source_scn(server: ServerInfo) -> SCN:
    file, pos = master_position(server)
    return SCN(0, 0, int(file.rsplit(".", 1)[1]), pos)
