"""One column value's bytes -> its exact value (drc.replicator.binlog.values), on byte literals.

The bytes come from encoders written here after MySQL's own packing code (TIME2, DECIMAL,
DATETIME2), checked against hand-worked anchors; the values are what SELECT shows (the
integration tests compare with a live server).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.core.errors import UnsupportedColumnError
from drc.core.values import ZeroDate
from drc.replicator.binlog import columns as c
from drc.replicator.binlog import values
from drc.replicator.binlog.columns import spec_of
from tests.support.binlog_cases import (
    CASES,
    UTF8,
    T,
    column,
    datetime2_bytes,
    pack_decimal,
    read,
)
from tests.support.values import TIME2_CASES, identical, time2_bytes, time2_value


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
