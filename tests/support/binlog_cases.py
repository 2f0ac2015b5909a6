"""Column values as a binlog row image stores them, and the exact values they stand for:
the byte encoders (after MySQL's packing code) and the cases shared by the row-decoder tests."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from drc.core.values import Bit, ZeroDate
from drc.replicator.binlog import columns as c
from drc.replicator.binlog import values
from drc.replicator.binlog.columns import spec_of


def column(kind: int, name: str = "c", **attrs: Any) -> Any:
    """A TABLE_MAP column as the library describes it (only what the decoder reads)."""
    return SimpleNamespace(
        **{"type": kind, "name": name, "unsigned": False, "character_set_name": None, **attrs}
    )


def read(col: Any, raw: bytes) -> Any:
    """The value of ``raw``, which must be exactly the value's bytes."""
    value, end = values.read_value(spec_of(col, "shop", "orders"), raw + b"\xaa", 0)
    assert end == len(raw)
    return value


# --- encoders, after MySQL's packing code -----------------------------------------------------


def pack_decimal(text: str, precision: int, decimals: int) -> bytes:
    """MySQL's decimal2bin, for valid values: digit groups, sign bit, negatives inverted."""
    negative, digits = text.startswith("-"), text.lstrip("-")
    whole, _, frac = digits.partition(".")
    whole = whole.lstrip("0").rjust(precision - decimals, "0")
    frac = frac.ljust(decimals, "0")
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    lead = len(whole) % 9
    parts = [whole[:lead]] if lead else []
    parts += [whole[i : i + 9] for i in range(lead, len(whole), 9)]
    tail = [frac[i : i + 9] for i in range(0, len(frac), 9)]
    out = b"".join(int(p).to_bytes(sizes[len(p)], "big") for p in parts + tail)
    packed = bytearray(out)
    packed[0] ^= 0x80
    return bytes(b ^ 0xFF for b in packed) if negative else bytes(packed)


def datetime2_bytes(y: int, mo: int, d: int, h: int, mi: int, s: int) -> bytes:
    return (1 << 39 | (y * 13 + mo) << 22 | d << 17 | h << 12 | mi << 6 | s).to_bytes(5, "big")


def _time2(sign: int, h: int, mi: int, s: int) -> bytes:
    return (0x800000 + sign * (h << 12 | mi << 6 | s)).to_bytes(3, "big")


# --- every type, on byte literals ---------------------------------------------------------------

T = c
LATIN1 = {"character_set_name": "latin1"}
UTF8 = {"character_set_name": "utf8mb4"}
BINARY = {"character_set_name": "binary"}
JSON_INT16 = b"\x05" + struct.pack("<h", -5)
JSON_STRING = b"\x0c\x03abc"

CASES: list[tuple[str, Any, bytes, Any]] = [
    ("tinyint", column(T.TINY), b"\x80", -128),
    ("tinyint unsigned", column(T.TINY, unsigned=True), b"\xff", 255),
    ("smallint", column(T.SHORT), b"\x00\x80", -32768),
    ("mediumint", column(T.INT24), b"\x00\x00\x80", -(2**23)),
    ("mediumint unsigned", column(T.INT24, unsigned=True), b"\xff\xff\xff", 2**24 - 1),
    ("int", column(T.LONG), b"\x00\x00\x00\x80", -(2**31)),
    ("bigint unsigned", column(T.LONGLONG, unsigned=True), b"\xff" * 8, 2**64 - 1),
    ("bigint", column(T.LONGLONG), b"\x00" * 7 + b"\x80", -(2**63)),
    ("float shortest text", column(T.FLOAT), struct.pack("<f", 1.1), 1.1),
    ("double -0.0", column(T.DOUBLE), struct.pack("<d", -0.0), -0.0),
    ("year 0", column(T.YEAR), b"\x00", 0),
    ("year 2155", column(T.YEAR), b"\xff", 2155),
    ("decimal", column(T.NEWDECIMAL, precision=12, decimals=2), pack_decimal("5.00", 12, 2),
     Decimal("5.00")),
    ("decimal negative", column(T.NEWDECIMAL, precision=10, decimals=2),
     pack_decimal("-12345678.99", 10, 2), Decimal("-12345678.99")),
    ("decimal only fraction", column(T.NEWDECIMAL, precision=5, decimals=5),
     bytes.fromhex("8030 39"), Decimal("0.12345")),
    ("decimal no fraction", column(T.NEWDECIMAL, precision=3, decimals=0), bytes.fromhex("807b"),
     Decimal("123")),
    ("varchar utf8mb4", column(T.VARCHAR, max_length=400, **UTF8),
     b"\x07\x00" + "😀é!".encode(), "😀é!"),
    ("varchar latin1", column(T.VARCHAR, max_length=50, **LATIN1), b"\x02\xe9\xff", "éÿ"),
    ("varchar no charset", column(T.VARCHAR, max_length=50), b"\x02hi", "hi"),
    ("char", column(T.STRING, max_length=480, **UTF8), b"\x02\x00ab", "ab"),
    ("binary keeps its pad", column(T.STRING, max_length=6, **BINARY), b"\x02ab",
     b"ab\0\0\0\0"),
    ("empty varbinary", column(T.VARCHAR, max_length=20, **BINARY), b"\x00", b""),
    ("empty blob", column(T.BLOB, length_size=2, **BINARY), b"\x00\x00", b""),
    ("longblob", column(T.BLOB, length_size=4, **BINARY), b"\x03\x00\x00\x00abc", b"abc"),
    ("text", column(T.BLOB, length_size=2, **UTF8), b"\x01\x00x", "x"),
    ("charset without codec", column(T.VARCHAR, max_length=50, character_set_name="ucs2"),
     b"\x02\x00a", b"\x00a"),
    ("empty text without codec", column(T.VARCHAR, max_length=50, character_set_name="ucs2"),
     b"\x00", ""),
    ("geometry", column(T.GEOMETRY, length_size=4), b"\x02\x00\x00\x00\x01\x02", b"\x01\x02"),
    ("json int", column(T.JSON, length_size=4), b"\x03\x00\x00\x00" + JSON_INT16, -5),
    ("json string", column(T.JSON, length_size=4), b"\x05\x00\x00\x00" + JSON_STRING, b"abc"),
    ("json empty", column(T.JSON, length_size=4), b"\x00\x00\x00\x00", None),
    ("enum", column(T.ENUM, size=1, enum_values=["", "small", "large"]), b"\x02", "large"),
    ("enum without names", column(T.ENUM, size=2, enum_values=None), b"\x02\x00", None),
    ("set", column(T.SET, size=1, set_values=["red", "green", "blue"]), b"\x05",
     frozenset({"red", "blue"})),
    ("empty set", column(T.SET, size=1, set_values=["red"]), b"\x00", frozenset()),
    ("bit 13", column(T.BIT, bits=13, bytes=2), b"\x10\x00", Bit(1 << 12, 13)),
    ("bit 64", column(T.BIT, bits=64, bytes=8), b"\xff" * 8, Bit(2**64 - 1, 64)),
    ("date", column(T.DATE), (2024 << 9 | 2 << 5 | 29).to_bytes(3, "little"), dt.date(2024, 2, 29)),
    ("zero date", column(T.DATE), b"\x00\x00\x00", ZeroDate("0000-00-00")),
    ("datetime(6)", column(T.DATETIME2, fsp=6), bytes.fromhex("8000000000 0f423f"),
     ZeroDate("0000-00-00 00:00:00.999999")),
    ("datetime(0)", column(T.DATETIME2, fsp=0), datetime2_bytes(2024, 2, 29, 3, 4, 6),
     dt.datetime(2024, 2, 29, 3, 4, 6)),
    ("datetime(1) partial", column(T.DATETIME2, fsp=1), bytes.fromhex("8000000000 05"),
     ZeroDate("0000-00-00 00:00:00.0")),
    ("timestamp(6)", column(T.TIMESTAMP2, fsp=6), bytes.fromhex("7fffffff 0f423f"),
     dt.datetime(2038, 1, 19, 3, 14, 7, 999999)),
    ("zero timestamp(3)", column(T.TIMESTAMP2, fsp=3), bytes.fromhex("00000000 0000"),
     ZeroDate("0000-00-00 00:00:00.000")),
    ("time(6) negative", column(T.TIME2, fsp=6), _time2(-1, 11, 3, 10) + b"\0\0\0",
     -dt.timedelta(hours=11, minutes=3, seconds=10)),
    ("time(5) negative fraction", column(T.TIME2, fsp=5), bytes.fromhex("7fffff f0bdc0"),
     -dt.timedelta(seconds=1)),
    ("time(6) -01:00:00.000001", column(T.TIME2, fsp=6), bytes.fromhex("7fefff ffffff"),
     -dt.timedelta(hours=1, microseconds=1)),
    ("time(1) -00:00:00.5", column(T.TIME2, fsp=1), bytes.fromhex("7fffff ce"),
     -dt.timedelta(microseconds=500000)),
    ("time(0)", column(T.TIME2, fsp=0), _time2(1, 838, 59, 59),
     dt.timedelta(hours=838, minutes=59, seconds=59)),
    ("time v1", column(T.TIME), (1234559).to_bytes(3, "little"),
     dt.timedelta(hours=123, minutes=45, seconds=59)),
    ("datetime v1", column(T.DATETIME), struct.pack("<Q", 20240229030405),
     dt.datetime(2024, 2, 29, 3, 4, 5)),
    ("datetime v1 zero", column(T.DATETIME), b"\x00" * 8, ZeroDate("0000-00-00 00:00:00")),
    ("timestamp v1", column(T.TIMESTAMP), struct.pack("<I", 86400), dt.datetime(1970, 1, 2)),
    ("timestamp v1 zero", column(T.TIMESTAMP), b"\x00" * 4, ZeroDate("0000-00-00 00:00:00")),
]  # fmt: skip
