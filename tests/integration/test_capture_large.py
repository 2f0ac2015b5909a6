"""A 200k-row transaction is captured in bounded fragments that share its SCN, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import FragmentLimits
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import capturing, read_all
from tests.support.servers import connect, master_position

ROWS = 200_000
FRAGMENT_ROWS = 20_000


@pytest.mark.slow
def test_200k_row_transaction_is_stored_as_bounded_fragments(
    dc1: ServerInfo, tmp_path: Path
) -> None:
    conn = connect(dc1, autocommit=False)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS big_db")
        cur.execute("CREATE DATABASE big_db")
        cur.execute("USE big_db")
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(30))")
        conn.commit()
        start = master_position(dc1)
        cur.execute(f"INSERT INTO t SELECT seq, CONCAT('value ', seq) FROM seq_1_to_{ROWS}")
        cur.execute("INSERT INTO t VALUES (0, 'after the big insert')")
        conn.commit()
        cur.execute("INSERT INTO t VALUES (-1, 'next transaction')")
        conn.commit()
        end = master_position(dc1)
    conn.close()

    options = CaptureOptions(
        capture=TableFilter.build(["big_db.*"]),
        start_from=f"{start[0]}:{start[1]}",
        fragments=FragmentLimits(rows=FRAGMENT_ROWS, bytes=64 << 20),
    )
    with capturing(dc1, tmp_path / "buf", options) as capture:
        capture.wait_for(end, timeout=300)
        stored = [t for t in read_all(capture.buffer) if t.changes]

    big, after = stored[:-1], stored[-1]
    assert len({t.scn for t in big}) == 1, "every fragment carries the transaction's SCN"
    assert [t.fragment for t in big] == list(range(len(big)))
    assert [t.last_fragment for t in big] == [False] * (len(big) - 1) + [True]
    assert all(len(t.changes) <= FRAGMENT_ROWS for t in big), "no fragment exceeds the limit"
    ids = [c.after["id"] for t in big for c in t.changes]
    assert ids == [*range(1, ROWS + 1), 0], "every row once, in order"
    assert big[0].gtid == big[-1].gtid
    assert after.scn > big[0].scn and after.changes[0].after["id"] == -1
