"""A table of every MariaDB column type, rows of extreme, ordinary and NULL values, and how a
captured value compares with what SELECT shows."""

from __future__ import annotations

import struct
from typing import Any

from drc.core.values import Bit, ZeroDate

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


def matches_select(ours: Any, selected: Any) -> bool:
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
