"""One column value's bytes -> its exact value (drc.replicator.binlog.values), on byte literals.

The bytes come from encoders written here after MySQL's own packing code (TIME2, DECIMAL,
DATETIME2), checked against hand-worked anchors; the values are what SELECT shows (the
integration tests compare with a live server).
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.core.errors import UnsupportedColumnError
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


def identical(a: Any, b: Any) -> bool:
    """Same type and value: floats bit for bit, Decimals digit for digit, dicts in order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


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


def time2_bytes(text: str, fsp: int) -> bytes:
    """MySQL's TIME_to_longlong_time_packed + my_time_packed_to_binary, C arithmetic included.

    ``text`` is '[-]H:MM:SS[.ffffff]' with at most ``fsp`` fraction digits.
    """
    negative, body = text.startswith("-"), text.lstrip("-")
    hms, _, digits = body.partition(".")
    assert len(digits) <= fsp
    hour, minute, second = (int(p) for p in hms.split(":"))
    micro = int(digits.ljust(6, "0")) if digits else 0
    nr = ((hour << 12 | minute << 6 | second) << 24) + micro  # MY_PACKED_TIME_MAKE
    nr = -nr if negative else nr
    int_part = nr >> 24  # MY_PACKED_TIME_GET_INT_PART: an arithmetic shift
    frac_part = int(math.fmod(nr, 1 << 24))  # MY_PACKED_TIME_GET_FRAC_PART: C's %, dividend sign
    head = (0x800000 + int_part).to_bytes(3, "big")
    if fsp == 0:
        return head
    if fsp <= 2:
        return head + (int(frac_part / 10000) & 0xFF).to_bytes(1, "big")  # C division truncates
    if fsp <= 4:
        return head + (int(frac_part / 100) & 0xFFFF).to_bytes(2, "big")
    return (nr + 0x800000000000).to_bytes(6, "big")  # mi_int6store(nr + TIMEF_OFS)


def time2_value(text: str) -> dt.timedelta:
    negative, body = text.startswith("-"), text.lstrip("-")
    hms, _, digits = body.partition(".")
    hour, minute, second = (int(p) for p in hms.split(":"))
    micro = int(digits.ljust(6, "0")) if digits else 0
    value = dt.timedelta(hours=hour, minutes=minute, seconds=second, microseconds=micro)
    return -value if negative else value


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


@pytest.mark.parametrize(
    ("col", "raw", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_each_type_decodes_to_its_exact_value(col: Any, raw: bytes, expected: Any) -> None:
    assert identical(read(col, raw), expected)


def test_invalid_utf8_is_an_error_not_a_guess() -> None:
    with pytest.raises(UnicodeDecodeError):
        read(column(T.VARCHAR, max_length=50, **UTF8), b"\x03a\xffb")


@pytest.mark.parametrize(
    "col",
    [column(T.VAR_STRING, max_length=10), column(T.DECIMAL), column(T.NEWDATE),
     column(T.NEWDECIMAL, precision=2, decimals=3), column(T.ENUM, size=9, enum_values=None),
     column(T.BLOB, length_size=5)],
    ids=["var_string", "old decimal", "newdate", "bad decimal", "enum of 9 bytes", "blob prefix 5"],
)  # fmt: skip
def test_a_type_drc_cannot_decode_names_table_and_column(col: Any) -> None:
    spec = spec_of(SimpleNamespace(**{**vars(col), "name": "legacy"}), "shop", "orders")
    assert spec.kind == c.R_UNSUPPORTED
    with pytest.raises(UnsupportedColumnError, match=r"'legacy' of shop\.orders has binlog type"):
        values.read_value(spec, b"\x01a" * 8, 0)


def test_a_charset_python_lacks_keeps_the_bytes() -> None:
    assert c.text_encoding("latin1") == "cp1252"  # MySQL's latin1 is Windows-1252
    assert c.text_encoding("utf8mb4") == "utf8"
    assert c.text_encoding("ucs2") is None and spec_of(column(T.VARCHAR, max_length=9,
        character_set_name="ucs2")).kind == c.R_NO_CODEC  # fmt: skip


# --- dates -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parts", "fsp", "text"),
    [
        ((0, 0, 0, 0, 0, 0, 0), 0, "0000-00-00 00:00:00"),
        ((0, 0, 0, 0, 0, 0, 0), 6, "0000-00-00 00:00:00.000000"),
        ((2020, 0, 15, 10, 11, 12, 500000), 1, "2020-00-15 10:11:12.5"),
    ],
)
def test_invalid_datetimes_keep_their_text(parts: tuple[int, ...], fsp: int, text: str) -> None:
    assert values.datetime_or_zero(*parts, fsp) == ZeroDate(text)


def test_valid_datetime_stays_a_datetime() -> None:
    value = values.datetime_or_zero(2024, 2, 29, 1, 2, 3, 4, 6)
    assert value == dt.datetime(2024, 2, 29, 1, 2, 3, 4)


@pytest.mark.parametrize("fsp", range(7))
def test_datetime2_reads_its_fraction(fsp: int) -> None:
    size = c.fraction_bytes(fsp)
    micro = 123456 // 10 ** (6 - fsp) * 10 ** (6 - fsp)
    stored = micro // 10 ** (6 - fsp) * (10 if fsp % 2 else 1)  # an odd fsp keeps one more digit
    raw = datetime2_bytes(2024, 1, 2, 3, 4, 5) + stored.to_bytes(size, "big")
    assert read(column(T.DATETIME2, fsp=fsp), raw) == dt.datetime(2024, 1, 2, 3, 4, 5, micro)


# --- TIME2: one big-endian number over integer and fraction bytes -----------------------------


TIME2_CASES: list[tuple[str, int]] = [
    *((t, fsp) for fsp in range(7) for t in ("00:00:00", "-00:00:01", "00:00:01", "-838:59:59")),
    *((t, fsp) for fsp in range(7) for t in ("838:59:59", "-01:00:00", "-12:34:56", "100:00:00")),
    ("-00:00:00.5", 1), ("-00:00:00.1", 1), ("-838:59:59.9", 1), ("838:59:59.9", 1),
    ("100:00:00.5", 1), ("-100:00:00.5", 1), ("-00:00:00.5", 6), ("-01:00:00.9", 1),
    ("-00:00:00.01", 2), ("-00:00:00.99", 2), ("-12:34:56.78", 2), ("838:59:59.99", 2),
    ("-00:00:00.001", 3), ("-00:00:00.5", 3), ("-838:59:59.999", 3), ("12:34:56.123", 3),
    ("-00:00:00.0001", 4), ("-01:02:03.0004", 4), ("-838:59:59.9999", 4), ("00:00:00.9999", 4),
    ("-00:00:00.00001", 5), ("-00:00:00.5", 5), ("-838:59:59.99999", 5), ("1:2:3.45678", 5),
    ("-00:00:00.000001", 6), ("-01:00:00.000001", 6), ("-838:59:59.999999", 6),
    ("838:59:59.999999", 6), ("-00:00:00.999999", 6), ("-00:00:01.000001", 6),
    ("-23:59:59.5", 6), ("00:00:00.000001", 6),
]  # fmt: skip


def test_time2_encoder_matches_mysql_bytes() -> None:
    """Anchors for the encoder above, worked out by hand from my_time_packed_to_binary."""
    assert time2_bytes("-01:00:00.000001", 6) == bytes.fromhex("7fefff ffffff")
    assert time2_bytes("-00:00:00.5", 1) == bytes.fromhex("7fffff ce")
    assert time2_bytes("-00:00:00.001", 3) == bytes.fromhex("7fffff fff6")
    assert time2_bytes("100:00:00.5", 1) == bytes.fromhex("864000 32")
    assert time2_bytes("-838:59:59", 0) == bytes.fromhex("4b9105")
    assert time2_bytes("00:00:00", 6) == bytes.fromhex("800000 000000")


@pytest.mark.parametrize(("text", "fsp"), TIME2_CASES, ids=[f"{t}({f})" for t, f in TIME2_CASES])
def test_time2_decodes_the_stored_value(text: str, fsp: int) -> None:
    raw = time2_bytes(text, fsp)
    frac_bytes, unit = c.time2_layout(fsp)
    assert len(raw) == 3 + frac_bytes
    assert values.time2(raw, frac_bytes, unit) == time2_value(text)
    value = read(column(T.TIME2, fsp=fsp), raw)  # exactly the value's bytes are read
    assert type(value) is dt.timedelta and value == time2_value(text)


def test_negative_fractional_time_is_not_the_split_value() -> None:
    raw = time2_bytes("-01:00:00.000001", 6)
    assert values.time2(raw, 3, 1) == -dt.timedelta(hours=1, microseconds=1)
    assert values.time2(raw, 3, 1) != -dt.timedelta(hours=1, microseconds=999999)


# --- DECIMAL ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 65).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, min(p, 30)))),
    st.data(),
)
def test_valid_decimals_read_back_exactly(shape: tuple[int, int], data: Any) -> None:
    precision, decimals = shape
    whole = data.draw(st.integers(0, 10 ** (precision - decimals) - 1))
    frac = data.draw(st.integers(0, 10**decimals - 1))
    sign = data.draw(st.sampled_from(["", "-"]))
    text = f"{sign}{whole}" + (f".{frac:0{decimals}d}" if decimals else "")
    col = column(T.NEWDECIMAL, precision=precision, decimals=decimals)
    value = read(col, pack_decimal(text, precision, decimals))
    assert value == Decimal(text) and -value.as_tuple().exponent == decimals


def test_a_decimal_group_out_of_range_is_corrupt_not_a_number() -> None:
    col = column(T.NEWDECIMAL, precision=1, decimals=0)
    with pytest.raises(ValueError, match="out of range"):
        read(col, b"\x00")  # -127 in a DECIMAL(1,0): no server writes that
