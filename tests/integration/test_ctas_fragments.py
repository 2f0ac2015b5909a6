"""CREATE TABLE ... SELECT of more rows than a capture fragment holds crosses once, unechoed.

MariaDB logs a CTAS in ROW format as one GTID group: the CREATE (as SHOW CREATE TABLE text),
then the copied rows, then the commit. Had the capture stored the CREATE in the first fragment
of a transaction whose later fragments carry the rows (one SCN), the apply's DDL path would move
the checkpoint to that SCN before the rows, and the idempotency stage would drop them. It does
not: drc.replicator.assembler emits the CREATE as a transaction of its own at the CREATE's
position (a Statement with nothing yet open in the group commits it), and the rows as a later
transaction, fragmented like any large one. These tests pin that layout down in the buffer and
check the target, with small capture fragments, on both apply paths (held in one group; written
piece by piece, drc.apply.streamed), across the crash states between the CREATE and the rows
(set by hand, as tests/integration/test_apply_ddl_once.py does), and across a kill -9 of the
apply process while the rows' target transaction is open.

A keyless copy (CTAS copies columns, not keys) would show a row applied twice as a duplicate;
a keyed one with a column of its own checks the explicit-definition form.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.apply.service import build_channel
from drc.catchup.driver import run_catchup
from drc.config import load_config
from drc.core.codec import decode_transaction
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer
from drc.replicator.assembler import FragmentLimits
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import (
    ApplyProcess,
    Running,
    apply_process_config,
    apply_user,
    assert_same,
    channel_config,
    journal_done,
    just_before,
    serving,
    set_checkpoint,
)
from tests.support.capture import capturing
from tests.support.catchup import checkpoint_of, config_for, prepare
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end

SCHEMA = "ctas_frag"
ROWS = 3000
FRAGMENTS = FragmentLimits(rows=200, bytes=8 << 20)  # the copy's rows: 15 fragments
COPY = f"CREATE TABLE {SCHEMA}.copy SELECT * FROM {SCHEMA}.t"
KEYED = (
    f"CREATE TABLE {SCHEMA}.keyed (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NOT NULL, "
    f"extra INT NOT NULL DEFAULT 5) SELECT id, v, n FROM {SCHEMA}.t"
)
# A group's bytes (the channel's max_bytes_per_commit_mb) past which the copy's fragments are
# written piece by piece: ~25 kB, a couple of fragments of this table.
STREAMED_MB = 0.025
KEYLESS = "match_whole_row"  # the copy has no key


def _source(dc1: ServerInfo, dc2: ServerInfo, rows: int = ROWS) -> tuple[str, int]:
    """The schema and its table of ``rows`` rows on dc1, from the returned position on."""
    drop_everywhere(SCHEMA, dc1, dc2)
    apply_user(dc2)
    start = position(dc1)
    execute(
        dc1,
        f"CREATE DATABASE {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NOT NULL)",
        f"INSERT INTO {SCHEMA}.t SELECT seq, CONCAT('value ', seq), seq % 7 "
        f"FROM {SCHEMA}.seq_1_to_{rows}",
    )
    return start


def _records(buffer: EventBuffer) -> list[Transaction]:
    out: list[Transaction] = []
    after = SCN.zero()
    while batch := buffer.read_after(after, 10_000, 64 << 20):
        out.extend(decode_transaction(r.payload)[0] for r in batch)
        after = batch[-1].scn
    return out


def _assert_ctas_layout(buffer: EventBuffer, table: str, rows: int) -> None:
    """The CTAS of ``table`` is stored as its CREATE alone, then its rows under a later SCN in
    several fragments, none of which carries DDL (the premise of the apply's correctness)."""
    records = _records(buffer)
    created = [
        i for i, t in enumerate(records)
        if any(f"TABLE `{SCHEMA}`.`{table}`" in d.statement for d in t.ddl)
    ]  # fmt: skip
    assert len(created) == 1, [t.ddl for t in records]
    create = records[created[0]]
    assert create.last_fragment and create.fragment == 0 and not create.changes
    later = records[created[0] + 1 :]
    rows_at = next(t.scn for t in later if any(c.table == table for c in t.changes))
    copied = [t for t in later if t.scn == rows_at]
    assert len(copied) >= 3, "the rows span several fragments"
    assert rows_at > create.scn
    assert {c.table for t in copied for c in t.changes} == {table}
    assert [t.fragment for t in copied] == list(range(len(copied)))
    assert copied[-1].last_fragment and not any(t.ddl for t in copied)
    assert sum(len(t.changes) for t in copied) == rows


def _assert_not_echoed(dc2: ServerInfo, since: tuple[str, int], tmp: Path) -> None:
    """Everything the channel wrote into dc2's copy of the schema is DRC-originated (the far
    side's channel pulls with skip_drc and never sees it): DDL and rows."""
    options = CaptureOptions(
        capture=TableFilter.build([f"{SCHEMA}.*"]), start_from=f"{since[0]}:{since[1]}",
        commit_max_ms=10,
    )  # fmt: skip
    with capturing(dc2, tmp, options) as capture:
        capture.wait_for(position(dc2))
        records = [t for t in _records(capture.buffer) if t.changes or t.ddl]
    assert records, "the channel's writes were captured"
    assert all(t.drc_originated for t in records), [
        (t.scn, [d.statement[:40] for d in t.ddl], len(t.changes))
        for t in records
        if not t.drc_originated
    ]


@pytest.fixture
def source(dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path) -> Iterator[tuple[EventBuffer, str]]:
    """dc1's schema with both CTAS, captured with small fragments and served."""
    start = _source(dc1, dc2)
    execute(dc1, COPY, KEYED)
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start, fragments=FRAGMENTS) as (
        capture,
        url,
    ):
        capture.wait_for(position(dc1))
        yield capture.buffer, url


@pytest.mark.parametrize("streamed", [False, True], ids=["one-group", "piece-by-piece"])
def test_ctas_spanning_fragments_applies_every_row_once(
    dc1: ServerInfo,
    dc2: ServerInfo,
    source: tuple[EventBuffer, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    streamed: bool,
) -> None:
    buffer, url = source
    _assert_ctas_layout(buffer, "copy", ROWS)
    _assert_ctas_layout(buffer, "keyed", ROWS)
    since = position(dc2)
    limits = {"max_bytes_per_commit_mb": STREAMED_MB} if streamed else {}
    config = channel_config("ctas", url, [f"{SCHEMA}.*"], no_primary_key=KEYLESS, **limits)
    caplog.set_level(logging.INFO, logger="drc.apply.streamed")
    with Running(build_channel(config, apply_user(dc2))) as running:
        wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running, timeout=180)
    pieces = "piece by piece" in caplog.text
    assert pieces == streamed, caplog.text
    assert running.stats.ddl == 5  # database, t, copy, keyed, done
    assert running.stats.duplicate_inserts == 0
    assert_same(dc1, dc2, SCHEMA)
    _assert_not_echoed(dc2, since, tmp_path / "dc2-buf")


def _crashed(target: ServerInfo, channel: str, checkpoint: str, pending: str | None) -> None:
    """dc2 as a crash leaves it after ``keyed``'s CREATE ran (journalled done) and before its
    rows committed: the rows gone, the checkpoint at ``checkpoint`` (``pending``: its DDL)."""
    conn = connect(target)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DELETE FROM {SCHEMA}.keyed")
        cur.execute(f"DELETE FROM {SCHEMA}.done")
        set_checkpoint(cur, channel, checkpoint, pending)
    conn.commit()
    conn.close()


def test_a_crash_between_the_create_and_its_rows_applies_them_once(
    dc1: ServerInfo, dc2: ServerInfo, source: tuple[EventBuffer, str]
) -> None:
    _, url = source
    name = f"ctas-{uuid.uuid4().hex[:8]}"  # a journal of its own (it outlives the schema)
    config = channel_config(name, url, [f"{SCHEMA}.*"], no_primary_key=KEYLESS)
    with Running(build_channel(config, apply_user(dc2))) as running:
        wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running, timeout=180)
    assert_same(dc1, dc2, SCHEMA)
    created, _ = journal_done(dc2, name, f"CREATE TABLE `{SCHEMA}`.`keyed`%")
    # 1. After the CREATE ran, before the checkpoint moved to it; 2. after it moved there.
    for checkpoint, pending in ((just_before(created), created), (created, None)):
        _crashed(dc2, name, checkpoint, pending)
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running, timeout=180)
        # keyed's CREATE is journalled done: not run again (it would stop the channel: 1050
        # table exists); its rows twice would fail assert_same.
        assert running.stats.ddl == 0
        assert running.stats.duplicate_inserts == 0
        assert_same(dc1, dc2, SCHEMA)


def test_bulk_catchup_of_a_ctas_spanning_fragments_and_segments_applies_it_once(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """drc catchup (executors in process): the CREATE is a DDL step of its own, the rows (in
    fragments over several small segments) the span after it; then streaming goes on."""
    prepare(dc1, dc2, SCHEMA)
    start = _source(dc1, dc2)
    execute(dc1, COPY, KEYED)
    small = {"segment_bytes": 16384}
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start, small, fragments=FRAGMENTS) as (
        capture,
        url,
    ):
        capture.wait_for(position(dc1))
        _assert_ctas_layout(capture.buffer, "copy", ROWS)
        assert len(capture.buffer.segments()) > 3
        last = capture.buffer.last_scn
        config = load_config(config_for(tmp_path, dc2, url, "ctas-cu", SCHEMA))
        summary = run_catchup(config, "ctas-cu", master=None, partitions=3, out=lambda _: None)
        assert summary.to == last and checkpoint_of(dc2, "ctas-cu") == str(last)
        assert summary.ddl == 4  # database, t, copy, keyed
        assert_same(dc1, dc2, SCHEMA)
        channel = build_channel(config.channels[0], config.target_or_source())
        with Running(channel) as running:
            execute(dc1, f"CREATE TABLE {SCHEMA}.again SELECT * FROM {SCHEMA}.t")
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running, timeout=180)
        assert channel.stats.idempotent_fixes == 0, "nothing applied twice"
    assert_same(dc1, dc2, SCHEMA)


KILL_ROWS = 40_000


def _uncommitted(target: ServerInfo) -> int:
    """Rows the apply's open transaction has written into the copy so far (-1: no table)."""
    conn = connect(target)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
            cur.execute(f"SELECT COUNT(*) FROM {SCHEMA}.copy")
            return int(cur.fetchone()[0])
    except Exception:
        return -1
    finally:
        conn.close()


def test_kill_9_while_the_ctas_rows_are_open_applies_them_once(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    start = _source(dc1, dc2, KILL_ROWS)
    fragments = FragmentLimits(rows=1000, bytes=8 << 20)
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start, fragments=fragments) as (_, url):
        config = apply_process_config(
            tmp_path, dc2, url, "ctas-kill", [f"{SCHEMA}.*"], max_bytes_per_commit_mb=0.1,
            no_primary_key=KEYLESS,
        )  # fmt: skip
        with ApplyProcess(config, tmp_path / "apply.log") as apply:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), timeout=300)
            since = position(dc2)
            execute(dc1, COPY)
            # The copy exists on dc2 (its CREATE applied) and its rows' transaction is open.
            assert wait_for(lambda: 0 < _uncommitted(dc2) < KILL_ROWS, 300, 0.2), (
                _uncommitted(dc2), apply.tail())  # fmt: skip
            apply.kill()
            assert query(dc2, f"SELECT COUNT(*) FROM {SCHEMA}.copy")[0][0] == 0
            apply.start()
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), timeout=300)
            assert apply.alive(), apply.tail()
    assert "piece by piece" in apply.log.read_text()
    assert_same(dc1, dc2, SCHEMA)
    _assert_not_echoed(dc2, since, tmp_path / "dc2-buf")
