"""The binlog range tests/integration/test_decoding_equivalence writes on one server: every
MariaDB type with edge values and NULLs, multi-row writes, latin1, a sysbench-like and a bulk
table, an ALTER mid-range, and MINIMAL row images (test_native_equivalence reads it too)."""

from __future__ import annotations

from tests.support.column_types import COLUMNS, ROWS

# Edge values beyond test_capture_types' rows, in its column order.
MORE_EDGES = (
    "(4, 0, 1, -1, 1, -1, -1, 1, '-0.000000000000000000000000000001', -0.01,"
    " 1.17549435e-38, 5e-324,"
    " '2020-02-00', '2020-01-01 00:00:00.000001', '0000-01-01 00:00:00',"
    " '1970-01-01 00:00:01.000001',"
    " '-00:00:00.500000', '-01:00:00', 1901,"
    " '😀', 'x', '😀', '', 'ÿ€',"
    " x'61000000', x'0000', x'00', '',"
    " b'1', b'0', b'0',"
    " 'nope', 'red,green,blue', 'null', ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'))"
)
WORKLOAD = [
    f"INSERT INTO eq.all_types VALUES {', '.join(ROWS)}",
    f"INSERT INTO eq.all_types VALUES {MORE_EDGES}",
    "UPDATE eq.all_types SET vc = 'changed 😀', dc = -dc, tm = '-00:00:01.25', s = '', j = '{}',"
    " f = -f, ti = NULL WHERE id IN (1, 2, 4)",
    "UPDATE eq.all_types SET ti = 5, dtm = '0000-00-00 00:00:00', y = 0 WHERE id = 3",
    "DELETE FROM eq.all_types WHERE id IN (3, 4)",
    "INSERT INTO eq.latin VALUES (1, 'café ÿ', '€', 'naïve'), (2, '', '', NULL)",
    "INSERT INTO eq.sb SELECT seq, seq % 97, REPEAT('c', 120), REPEAT('p', 60)"
    " FROM eq.seq_1_to_300",
    "UPDATE eq.sb SET k = k + 1 WHERE id <= 100",
    "DELETE FROM eq.sb WHERE id > 250",
    "INSERT INTO eq.bulk SELECT seq, seq % 1000, CONCAT('row ', seq), '2024-01-02 03:04:05.123456',"
    " seq / 100 FROM eq.seq_1_to_2000",
    "ALTER TABLE eq.sb ADD COLUMN extra DECIMAL(5,1) NULL",
    "INSERT INTO eq.sb VALUES (1000, 1, 'c', 'p', -1234.5), (1001, 2, 'c', 'p', NULL)",
    "UPDATE eq.sb SET extra = 0.5, c = 'changed' WHERE id >= 1000",
    "SET SESSION binlog_row_image = 'MINIMAL'",
    "UPDATE eq.minimal SET v = 'after' WHERE id = 1",
    "DELETE FROM eq.minimal WHERE id = 2",
    "SET SESSION binlog_row_image = 'FULL'",
]
SCHEMA = [
    "DROP DATABASE IF EXISTS eq",
    "CREATE DATABASE eq",
    f"CREATE TABLE eq.all_types ({COLUMNS}) CHARACTER SET utf8mb4",
    "CREATE TABLE eq.latin (id INT PRIMARY KEY, a VARCHAR(20), b CHAR(5), t TEXT)"
    " CHARACTER SET latin1",
    "CREATE TABLE eq.sb (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL,"
    " pad CHAR(60) NOT NULL)",
    "CREATE TABLE eq.bulk (id BIGINT PRIMARY KEY, a INT, b VARCHAR(100), c DATETIME(6),"
    " d DECIMAL(12,2))",
    "CREATE TABLE eq.minimal (id INT PRIMARY KEY, v VARCHAR(10), n INT)",
    "INSERT INTO eq.minimal VALUES (1, 'before', 1), (2, 'gone', NULL)",
]
