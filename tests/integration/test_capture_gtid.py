"""Every stored record keeps the source GTID of its transaction, filtered-out markers and the
start marker included, so the buffer's last record always holds a position to resume from by
GTID on another server (drc.core.gtid)."""

from __future__ import annotations

from pathlib import Path

from drc.core import gtid as gtids
from drc.core.tablefilter import TableFilter
from drc.replicator.replicator import CaptureOptions
from drc.replicator.session_start import stored_position
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import capturing, read_all, source_transactions
from tests.support.servers import connect, master_position


def _gtid_binlog_pos(server: ServerInfo) -> str:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            return str(cur.fetchone()[0])
    finally:
        conn.close()


def test_every_record_keeps_its_gtid_and_the_last_one_the_sources_position(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS gtid_db")
        cur.execute("CREATE DATABASE gtid_db")
        cur.execute("CREATE TABLE gtid_db.kept (id INT PRIMARY KEY, v INT)")
        cur.execute("CREATE TABLE gtid_db.skipped (id INT PRIMARY KEY, v INT)")
    start = master_position(dc1)
    options = CaptureOptions(
        capture=TableFilter.build(["gtid_db.kept"]), start_from=f"{start[0]}:{start[1]}"
    )
    with capturing(dc1, tmp_path / "buf", options) as capture:
        capture.wait_for(start)
        first = read_all(capture.buffer)
        assert [t.changes for t in first] == [()]  # the start marker...
        assert gtids.stored_position(first[0].gtid, first[0].gtid_position) == gtids.position(
            gtids.parse_gtids(_gtid_binlog_pos(dc1))
        )  # ...holds the position the capture started at
        with conn.cursor() as cur:
            for n in range(20):
                cur.execute("INSERT INTO gtid_db.kept VALUES (%s, %s)", (n, n))
            for n in range(5):  # the newest transactions are all filtered out
                cur.execute("INSERT INTO gtid_db.skipped VALUES (%s, %s)", (n, n))
        end = master_position(dc1)
        capture.wait_for(end)
        stored = read_all(capture.buffer)
        last = capture.buffer.last_scn
        resume = stored_position(capture.buffer, last)
    conn.close()

    source = source_transactions(dc1, start, ["gtid_db"])
    kept = [(t.gtid, len(t.changes)) for t in stored if t.changes]
    assert kept == [(gtid, 1) for gtid, changes in source if changes[0][1] == "kept"]
    assert all(t.gtid is not None for t in stored[1:])
    assert stored[-1].changes == () and stored[-1].scn == last  # the marker of skipped rows
    assert resume is not None
    assert gtids.format_position(resume) == _gtid_binlog_pos(dc1)
