"""Every MariaDB column type written on the source is read back from the buffer equal to SELECT."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

from drc.core.tablefilter import TableFilter
from drc.core.values import Bit, ZeroDate
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import capturing, master_position, read_all
from tests.support.servers import connect

COLUMNS = """
  id INT PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, mi MEDIUMINT UNSIGNED, i INT,
  bi BIGINT, biu BIGINT UNSIGNED,
  dc DECIMAL(65,30), dc2 DECIMAL(10,2),
  f FLOAT, d DOUBLE,
  dt DATE, dtm DATETIME(6), dtm0 DATETIME, ts TIMESTAMP(6) NULL, tm TIME(6), tm0 TIME, y YEAR,
  c CHAR(10), vc VARCHAR(100), tx TEXT, ltx LONGTEXT,
  l1 VARCHAR(50) CHARACTER SET latin1,
  bn BINARY(6), vb VARBINARY(20), bl BLOB, lbl LONGBLOB,
  b1 BIT(1), b64 BIT(64), b13 BIT(13),
  e ENUM('small','medium','large'), s SET('red','green','blue'),
  j JSON, g GEOMETRY
"""
ROWS = [
    # extremes and special values
    "(1, -128, 255, -32768, 16777215, -2147483648, -9223372036854775808, 18446744073709551615,"
    " '-99999999999999999999999999999999999.999999999999999999999999999999', -12345678.99,"
    " -3.40282e38, 1.7976931348623157e308,"
    " '0000-00-00', '0000-00-00 00:00:00.000000', '2020-00-15 10:11:12', '0000-00-00 00:00:00',"
    " '-838:59:59.000000', '838:59:59', 0,"
    " 'ab', '😀𝄞 héllo', 'x', REPEAT('long', 10000), 'café ÿ',"
    " 'ab', x'00ff00', x'00', REPEAT(x'ab01', 500000),"
    " b'1', b'1111111111111111111111111111111111111111111111111111111111111111', b'1010101010101',"
    " '', '', '{\"a\": [1, 2.5, \"x\"], \"n\": null}', ST_GeomFromText('POINT(1 2)'))",
    # ordinary values
    "(2, 127, 0, 32767, 0, 2147483647, 9223372036854775807, 0,"
    " '99999999999999999999999999999999999.999999999999999999999999999999', 0.01,"
    " 1.1, -0.0,"
    " '2024-02-29', '9999-12-31 23:59:59.999999', '1000-01-01 00:00:00',"
    " '2038-01-19 03:14:07.999999',"
    " '100:00:00.5', '-00:00:01', 2155,"
    " 'abcdefghij', '', '', '', 'latin1 only',"
    " 'abcdef', '', '', '',"
    " b'0', b'0', b'1000000000000',"
    " 'large', 'red,blue', '[]', ST_GeomFromText('LINESTRING(0 0, 1 1, 2 5)'))",
    # every nullable column NULL
    "(3" + ", NULL" * 34 + ")",
]


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


def _matches(ours: Any, selected: Any) -> bool:
    """Whether our exact value is what pymysql's SELECT shows for the column."""
    if isinstance(ours, ZeroDate):
        return ours.text == selected
    if isinstance(ours, Bit):
        return ours.value.to_bytes((ours.width + 7) // 8, "big") == selected
    if isinstance(ours, frozenset):  # SELECT shows a SET as 'a,b' in member order
        return isinstance(selected, str) and ours == frozenset(selected.split(",")) - {""}
    if isinstance(ours, float):
        return struct.pack("<d", ours) == struct.pack("<d", selected)
    return type(ours) is type(selected) and ours == selected


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

    options = CaptureOptions(
        capture=TableFilter.build(["types_db.*"]), start_from=f"{start[0]}:{start[1]}"
    )
    with capturing(dc1, tmp_path / "buf", options) as capture:
        capture.wait_for(end)
        stored = read_all(capture.buffer)

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
            assert _matches(ours, value), f"row {row_id} column {name}: {ours!r} vs {value!r}"
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
