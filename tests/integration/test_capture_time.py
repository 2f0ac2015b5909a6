"""TIME(0)..TIME(6) values, negative and positive with fractions, are captured equal to SELECT.

MySQL/MariaDB store TIME(n) as one big-endian number over the integer and fraction bytes, negative
values in two's complement over the whole width; python-mysql-replication decodes the two parts
separately and turned -01:00:00.000001 into -01:00:00.999999. Rows are captured through the fast
path (FULL images) and, for an update logged with binlog_row_image=MINIMAL, the per-value path.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import captured
from tests.support.servers import connect, master_position

NAMES = [f"t{fsp}" for fsp in range(7)]
FIXED = [
    "00:00:00", "-00:00:00.5", "-00:00:00.000001", "-01:00:00.000001", "-838:59:59.9",
    "100:00:00.5", "838:59:59.999999", "-838:59:59.999999", "-838:59:59", "838:59:59",
    "-00:00:00.1", "-00:00:00.01", "-00:00:00.001", "-00:00:00.0001", "-00:00:00.00001",
    "-00:00:00.999999", "-00:00:01.000001", "-00:00:01", "00:00:00.000001", "-12:34:56.789012",
    "12:34:56.789012", "-23:59:59.999999", "-100:00:00.5", "-01:02:03.4", "-01:02:03.45",
    "-01:02:03.456", "-01:02:03.4567", "-01:02:03.45678", "-01:02:03.456789", "-00:59:59.99",
]  # fmt: skip
# The exact value of each fixed text in the column whose precision holds all of its digits.
EXACT = {
    ("-01:00:00.000001", 6): -dt.timedelta(hours=1, microseconds=1),
    ("-00:00:00.000001", 6): -dt.timedelta(microseconds=1),
    ("-00:00:00.5", 1): -dt.timedelta(microseconds=500000),
    ("-838:59:59.9", 1): -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=900000),
    ("100:00:00.5", 1): dt.timedelta(hours=100, microseconds=500000),
    ("838:59:59.999999", 6): dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
    ("-838:59:59.999999", 6): -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
    ("00:00:00", 0): dt.timedelta(0),
}


def _random_times(count: int) -> list[str]:
    rng = random.Random(20240229)
    out = []
    for _ in range(count):
        sign = rng.choice(["-", "-", ""])
        hours = rng.choice([0, 0, 1, rng.randrange(839)])
        micro = rng.choice([1, 999999, rng.randrange(1, 1_000_000), rng.randrange(1, 10) * 10**5])
        out.append(f"{sign}{hours:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{micro:06d}")
    return out


TIMES = FIXED + _random_times(200)


def _selected(server: ServerInfo) -> dict[int, dict[str, Any]]:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, {', '.join(NAMES)} FROM time_db.times ORDER BY id")
            return {r[0]: dict(zip(NAMES, r[1:], strict=True)) for r in cur.fetchall()}
    finally:
        conn.close()


def _assert_equal(ours: dict[str, Any], selected: dict[str, Any], what: str) -> None:
    for name, value in selected.items():
        assert isinstance(value, dt.timedelta), f"{what} {name}: SELECT gave {value!r}"
        assert type(ours[name]) is dt.timedelta, f"{what} {name}: {ours[name]!r}"
        assert ours[name] == value, f"{what} {name}: captured {ours[name]} vs SELECT {value}"


def test_time_values_are_captured_equal_to_select(dc1: ServerInfo, tmp_path: Path) -> None:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS time_db")
        cur.execute("CREATE DATABASE time_db")
        columns = ", ".join(f"t{fsp} TIME({fsp})" for fsp in range(7))
        cur.execute(f"CREATE TABLE time_db.times (id INT PRIMARY KEY, {columns})")
        start = master_position(dc1)
        rows = [f"({i}, {', '.join([repr(text)] * 7)})" for i, text in enumerate(TIMES)]
        cur.execute(f"INSERT INTO time_db.times VALUES {', '.join(rows)}")
        before_update = _selected(dc1)
        # A MINIMAL after image is decoded by the per-value path, not the fast path.
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute(
            "UPDATE time_db.times SET "
            + ", ".join(f"{n} = '-01:00:00.000001'" for n in NAMES)
            + " WHERE id = 0"
        )
        cur.execute("SET SESSION binlog_row_image = 'FULL'")
        cur.execute("DELETE FROM time_db.times WHERE id = 1")
        end = master_position(dc1)
    conn.close()

    stored = captured(dc1, tmp_path / "buf", ["time_db.*"], start, end)

    changes = [c for t in stored for c in t.changes]
    inserted = {c.after["id"]: c.after for c in changes if c.op == "insert"}
    assert sorted(inserted) == list(range(len(TIMES)))
    for row_id, row in before_update.items():
        _assert_equal(inserted[row_id], row, f"row {row_id} ({TIMES[row_id]!r})")
    for (text, fsp), value in EXACT.items():
        assert inserted[TIMES.index(text)][f"t{fsp}"] == value, (text, fsp)

    (update,) = [c for c in changes if c.op == "update"]
    after = _selected(dc1)
    _assert_equal({n: update.after[n] for n in NAMES}, after[0], "updated row 0")
    assert update.after["t6"] == -dt.timedelta(hours=1, microseconds=1)
    assert update.after["t1"] == -dt.timedelta(hours=1)  # MariaDB truncates to TIME(1)
    (delete,) = [c for c in changes if c.op == "delete"]
    _assert_equal(delete.before, before_update[1], "deleted row 1")
