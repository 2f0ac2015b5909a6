"""Every MariaDB column type written on the source is read back from the buffer equal to SELECT."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

from drc.core.values import Bit, ZeroDate
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import captured
from tests.support.column_types import COLUMNS, ROWS, matches_select
from tests.support.servers import connect, master_position


def _selected(server: ServerInfo) -> dict[int, dict[str, Any]]:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SELECT * FROM types_db.all_types ORDER BY id")
            names = [d[0] for d in cur.description]
            return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}
    finally:
        conn.close()


def test_every_type_reads_back_equal_to_select(dc1: ServerInfo, tmp_path: Path) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, as an old application writes them
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("DROP DATABASE IF EXISTS types_db")
        cur.execute("CREATE DATABASE types_db")
        cur.execute(f"CREATE TABLE types_db.all_types ({COLUMNS}) CHARACTER SET utf8mb4")
        start = master_position(dc1)
        for row in ROWS:
            cur.execute(f"INSERT INTO types_db.all_types VALUES {row}")
        cur.execute("UPDATE types_db.all_types SET vc = 'changed 😀' WHERE id = 2")
        end = master_position(dc1)
    conn.close()

    stored = captured(dc1, tmp_path / "buf", ["types_db.*"], start, end)

    inserted = {c.after["id"]: c.after for t in stored for c in t.changes if c.op == "insert"}
    updated = [c for t in stored for c in t.changes if c.op == "update"]
    selected = _selected(dc1)
    assert sorted(inserted) == [1, 2, 3]
    assert len(updated) == 1 and updated[0].before == inserted[2]
    final = {**inserted, 2: updated[0].after}
    for row_id, row in selected.items():
        assert list(final[row_id]) == list(row), "column names and order as in the table"
        for name, value in row.items():
            ours = final[row_id][name]
            assert matches_select(ours, value), f"row {row_id} column {name}: {ours!r} vs {value!r}"
    # Types the comparison above would blur are exact in the buffer.
    assert final[1]["dtm"] == ZeroDate("0000-00-00 00:00:00.000000")
    assert final[1]["dtm0"] == ZeroDate("2020-00-15 10:11:12")
    assert final[1]["s"] == frozenset() and final[2]["s"] == frozenset({"red", "blue"})
    assert final[3]["s"] is None and final[3]["dt"] is None
    assert final[1]["biu"] == 2**64 - 1 and final[1]["bi"] == -(2**63)
    assert final[1]["dc"] == Decimal(
        "-99999999999999999999999999999999999.999999999999999999999999999999"
    )
    assert final[1]["b64"] == Bit(2**64 - 1, 64) and final[2]["b13"] == Bit(1 << 12, 13)
    assert final[1]["tm"] == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert len(final[1]["lbl"]) == 1_000_000
    assert final[2]["ts"] == dt.datetime(2038, 1, 19, 3, 14, 7, 999999)
    assert final[1]["y"] == 0 and final[2]["y"] == 2155
