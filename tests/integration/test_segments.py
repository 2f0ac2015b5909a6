"""Segments copied from a live replicator: what catch-up executors download is the stream.

The replicator captures the sandbox's dc1 into small segments (so a workload spans many, and a
large transaction's fragments cross a segment boundary) and serves them with the real API
server and a token. The SDK downloads every listed segment over HTTP; the transactions read
from the copies must be exactly the buffer's, and the source binlog's (read independently).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer
from drc.client import ApiAuthError, SegmentSource, assemble, read_segment
from drc.core.events import Transaction
from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import FragmentLimits
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import Capture, capturing, read_all, source_transactions
from tests.support.servers import connect, fresh_database, master_position

pytestmark = pytest.mark.integration

TOKEN = "segments-test-token"
DB = "seg_copy"


@contextmanager
def served(server: ServerInfo, tmp: Path) -> Iterator[tuple[Capture, str, tuple[str, int]]]:
    fresh_database(server, DB, f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(200))")
    start = master_position(server)
    options = CaptureOptions(
        capture=TableFilter.build([f"{DB}.*"]),
        start_from=f"{start[0]}:{start[1]}",
        fragments=FragmentLimits(rows=40, bytes=1 << 20),
        commit_max_ms=5,
    )
    with capturing(server, tmp / "buf", options, segment_bytes=8192) as capture:
        deps = ApiDeps(buffer=capture.buffer, datacenter="dc1", tokens=(TOKEN,))
        api = ApiServer(create_app(deps), "127.0.0.1", 0, open_access=False, stop_event=deps.stop)
        with api:
            yield capture, api.url, start


def workload(server: ServerInfo) -> None:
    """Single-row transactions, hot-row updates, a delete, and one 300-row transaction that
    the replicator stores as fragments."""
    conn = connect(server, autocommit=True)
    with conn.cursor() as cur:
        for n in range(60):
            cur.execute(f"INSERT INTO {DB}.t VALUES (%s, %s)", (n, "x" * 50))
        for n in range(40):
            cur.execute(f"UPDATE {DB}.t SET v = %s WHERE id = %s", (f"hot {n}", n % 3))
        cur.execute(f"DELETE FROM {DB}.t WHERE id = 59")
        cur.execute("BEGIN")
        cur.executemany(
            f"INSERT INTO {DB}.t VALUES (%s, %s)", [(1000 + n, "bulk" * 10) for n in range(300)]
        )
        cur.execute("COMMIT")
    conn.close()


def copied(source: SegmentSource, directory: Path) -> list[Transaction]:
    listing = source.list()
    out: list[Transaction] = []
    for info in listing.segments:
        path = source.download(info, directory, listing.epoch)
        out.extend(read_segment(path, listing.epoch, info.seq))
    return out


def test_downloaded_segments_hold_exactly_the_captured_stream(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    with served(dc1, tmp_path) as (capture, url, start):
        workload(dc1)
        capture.wait_for(master_position(dc1))
        (tmp_path / "copies").mkdir()
        with SegmentSource(url, token=TOKEN) as source:
            listing = source.list()
            assert len(listing.segments) > 3, "the workload spans several segments"
            pairs = zip(listing.segments, listing.segments[1:], strict=False)
            assert any(a.last_scn == b.first_scn for a, b in pairs), "a txn crosses segments"
            txns = copied(source, tmp_path / "copies")
        # Every fragment as the buffer holds it; the active segment up to its last commit.
        assert txns == read_all(capture.buffer)[: len(txns)]
        assert txns[-1].scn == listing.last_scn
    whole = list(assemble(txns))
    assert any(t.fragment for t in txns), "the bulk transaction was stored as fragments"
    got = [
        (t.gtid, [(c.schema, c.table, c.before, c.after) for c in t.changes])
        for t in whole
        if t.changes
    ]
    assert got == source_transactions(dc1, start, [DB])


def test_the_active_segment_is_listed_up_to_its_last_commit_while_capture_goes_on(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    with served(dc1, tmp_path) as (capture, url, _start):
        workload(dc1)
        capture.wait_for(master_position(dc1))
        with SegmentSource(url, token=TOKEN) as source:
            listing = source.list()
            active = listing.segments[-1]
            assert not active.sealed and active.last_scn == capture.buffer.last_scn
            conn = connect(dc1, autocommit=True)
            with conn.cursor() as cur:
                cur.execute(f"INSERT INTO {DB}.t VALUES (5000, 'after the listing')")
            conn.close()
            capture.wait_for(master_position(dc1))
            path = source.download(active, tmp_path, listing.epoch)  # checked against the listing
        scns = [t.scn for t in read_segment(path, listing.epoch, active.seq)]
        assert scns[-1] == active.last_scn


def test_segments_need_the_token(dc1: ServerInfo, tmp_path: Path) -> None:
    with served(dc1, tmp_path) as (_capture, url, _start):
        with SegmentSource(url, token="wrong") as source:
            with pytest.raises(ApiAuthError):
                source.list()
