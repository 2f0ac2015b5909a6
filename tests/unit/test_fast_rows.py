"""Plan-based row decoding against the per-value reference, on byte literals and fakes.

Each case decodes the same row image twice, through the library's row loop with decoding.py's
per-value override (the reference) and through fast_rows, on a real BinLogPacketWrapper over a
real pymysql packet, and requires the same outcome: identical values (type and value, floats
bit-exact, Decimal digits and exponent), the same packet position, or the same exception type.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql.protocol import MysqlPacket
from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import RowsEvent, WriteRowsEvent
from pymysqlreplication.table import Table

from drc.core.errors import UnsupportedColumnError
from drc.core.values import Bit, ZeroDate
from drc.replicator import decoding, fast_rows
from tests.support.values import TIME2_CASES, identical, time2_bytes, time2_value

T = FIELD_TYPE
REFERENCE = fast_rows._ORIGINAL  # the library's row loop, calling decoding.py per value


@pytest.fixture(autouse=True)
def _reference_installed() -> Iterator[None]:
    decoding.install()  # the per-value override is the reference the fast path must equal
    yield


# --- fakes ------------------------------------------------------------------------------------


def column(kind: int, name: str = "c", **attrs: Any) -> Column:
    base = {"type": kind, "name": name, "unsigned": False, "character_set_name": None}
    return Column(**{**base, **attrs})


def event(columns: list[Column], payload: bytes, ignore_errors: bool = False) -> Any:
    """A WriteRowsEvent positioned at a row image, as the library leaves it before a row."""
    wrapper = object.__new__(BinLogPacketWrapper)
    wrapper.packet = MysqlPacket(payload, "utf8")
    wrapper.read_bytes = 0
    wrapper._BinLogPacketWrapper__data_buffer = b""
    ev = object.__new__(WriteRowsEvent)
    ev.__dict__.update(
        packet=wrapper, table_id=7, schema="shop", table="orders", columns=columns,
        table_map={7: Table(7, "shop", "orders", columns, primary_key="")},
        event_type=BINLOG.WRITE_ROWS_EVENT_V2, _ignore_decode_errors=ignore_errors,
        _ctl_connection=None, _RowsEvent__none_sources={},
        _RowsEvent__use_column_name_cache=False, _RowsEvent__enable_logging=False,
    )  # fmt: skip
    return ev


def outcome(decode: Callable[..., Any], columns: list[Column], payload: bytes, **kw: Any) -> Any:
    ev = event(columns, payload, **kw)
    try:
        values = decode(ev, fast_rows.full_bitmap(len(columns)))
    except Exception as exc:
        return ("raised", type(exc))
    sources = ev._get_none_sources(values)
    return ("ok", values, ev.packet.packet._position, ev.packet.read_bytes, sources)


def assert_same(columns: list[Column], payload: bytes, fast_only: bool = False, **kw: Any) -> Any:
    """Both outcomes, which must be identical; ``fast_only``: and no row fell back."""
    reference = outcome(REFERENCE, columns, payload, **kw)
    fallbacks: list[bytes] = []

    def counting(ev: Any, bitmap: bytes, image: Any = None) -> Any:
        fallbacks.append(bitmap)
        return REFERENCE(ev, bitmap, image)

    fast_rows._ORIGINAL = counting
    try:
        fast = outcome(fast_rows._read_column_data, columns, payload, **kw)
    finally:
        fast_rows._ORIGINAL = REFERENCE
    assert identical(fast, reference), f"fast {fast!r} != reference {reference!r}"
    assert not (fast_only and fallbacks), "the row fell back to the reference"
    return fast


def row(*values: bytes, nulls: int = 0, count: int | None = None) -> bytes:
    width = ((count if count is not None else len(values)) + 7) // 8
    return nulls.to_bytes(width, "little") + b"".join(values)


# --- every type, on byte literals ---------------------------------------------------------------


def _pack_decimal(text: str, precision: int, decimals: int) -> bytes:
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


def _datetime2(y: int, mo: int, d: int, h: int, mi: int, s: int) -> bytes:
    return (1 << 39 | (y * 13 + mo) << 22 | d << 17 | h << 12 | mi << 6 | s).to_bytes(5, "big")


def _time2(sign: int, h: int, mi: int, s: int) -> bytes:
    return (0x800000 + sign * (h << 12 | mi << 6 | s)).to_bytes(3, "big")


LATIN1 = {"character_set_name": "latin1"}
UTF8 = {"character_set_name": "utf8mb4"}
BINARY = {"character_set_name": "binary"}
JSON_INT16 = b"\x05" + struct.pack("<h", -5)
JSON_STRING = b"\x0c\x03abc"

CASES: list[tuple[str, Column, bytes, Any]] = [  # ... = compare with the reference only
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
    ("decimal", column(T.NEWDECIMAL, precision=12, decimals=2), _pack_decimal("5.00", 12, 2),
     Decimal("5.00")),
    ("decimal negative", column(T.NEWDECIMAL, precision=10, decimals=2),
     _pack_decimal("-12345678.99", 10, 2), Decimal("-12345678.99")),
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
    ("datetime(0)", column(T.DATETIME2, fsp=0), _datetime2(2024, 2, 29, 3, 4, 6),
     dt.datetime(2024, 2, 29, 3, 4, 6)),
    ("datetime(1) partial", column(T.DATETIME2, fsp=1), bytes.fromhex("8000000000 05"),
     ZeroDate("0000-00-00 00:00:00.0")),
    ("timestamp(6)", column(T.TIMESTAMP2, fsp=6), bytes.fromhex("7fffffff 0f423f"),
     dt.datetime(2038, 1, 19, 3, 14, 7, 999999)),
    ("zero timestamp(3)", column(T.TIMESTAMP2, fsp=3), bytes.fromhex("00000000 0000"),
     ZeroDate("0000-00-00 00:00:00.000")),
    ("time(6) negative", column(T.TIME2, fsp=6), _time2(-1, 11, 3, 10) + b"\0\0\0",
     -dt.timedelta(hours=11, minutes=3, seconds=10)),
    ("time(5) negative fraction", column(T.TIME2, fsp=5), bytes.fromhex("7fffff f0bdc0"), ...),
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
    ("col", "value", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_type_decodes_as_the_reference(col: Column, value: bytes, expected: Any) -> None:
    columns, payload = [column(T.LONG, "id"), col], row(b"\x01\x00\x00\x00", value)
    status, values, *_ = assert_same(columns, payload, fast_only=True)
    assert status == "ok"
    if expected is not ...:  # ... marks a quirk only the reference defines
        assert identical(values["c"], expected), values["c"]


def test_a_row_of_every_type_with_nulls_between() -> None:
    columns = [Column(**{**c[1].__dict__, "name": f"c{i}"}) for i, c in enumerate(CASES)]
    values = [c[2] for c in CASES]
    nulls = sum(1 << i for i in range(0, len(CASES), 3))
    payload = row(
        *(v for i, v in enumerate(values) if not nulls >> i & 1), nulls=nulls, count=len(CASES)
    )
    status, decoded, _, _, sources = assert_same(columns, payload, fast_only=True)
    assert status == "ok" and decoded["c0"] is None and sources["c0"] == "null"
    assert decoded["c1"] == 255


def test_unused_null_bitmap_bits_are_ignored() -> None:
    columns = [column(T.LONG, "a"), column(T.LONG, "b")]
    payload = row(b"\x01\0\0\0", b"\x02\0\0\0", nulls=0xFC)  # bits 2-7 are no columns
    assert assert_same(columns, payload, fast_only=True)[1] == {"a": 1, "b": 2}


@pytest.mark.parametrize("ignore_errors", [False, True])
def test_invalid_utf8_follows_the_decode_errors_setting(ignore_errors: bool) -> None:
    columns = [column(T.VARCHAR, max_length=50, **UTF8)]
    result = assert_same(columns, row(b"\x03a\xffb"), ignore_errors=ignore_errors)
    assert result == (
        ("ok", {"c": "ab"}, 5, 5, {}) if ignore_errors else ("raised", UnicodeDecodeError)
    )


# --- any bytes: the fast path never disagrees, even on garbage --------------------------------

FIXED: list[tuple[Column, int]] = [
    (column(T.INT24), 3),
    (column(T.FLOAT), 4),
    (column(T.DOUBLE), 8),
    (column(T.YEAR), 1),
    (column(T.NEWDECIMAL, precision=12, decimals=2), 6),
    (column(T.NEWDECIMAL, precision=65, decimals=30), 30),
    (column(T.NEWDECIMAL, precision=7, decimals=7), 4),
    (column(T.NEWDECIMAL, precision=19, decimals=0), 9),
    (column(T.DATE), 3),
    (column(T.DATETIME2, fsp=6), 8),
    (column(T.DATETIME2, fsp=3), 7),
    (column(T.TIMESTAMP2, fsp=5), 7),
    (column(T.TIMESTAMP2, fsp=0), 4),
    (column(T.TIME2, fsp=6), 6),
    (column(T.TIME2, fsp=1), 4),
    (column(T.TIME2, fsp=0), 3),
    (column(T.TIME2, fsp=3), 5),
    (column(T.TIME), 3),
    (column(T.DATETIME), 8),
    (column(T.TIMESTAMP), 4),
    (column(T.SET, size=2, set_values=[str(i) for i in range(12)]), 2),
    (column(T.ENUM, size=1, enum_values=["", "a", "b"]), 1),
    (column(T.BIT, bits=20, bytes=3), 3),
]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(FIXED), st.data())
def test_fixed_size_values_match_the_reference_on_any_bytes(
    case: tuple[Column, int], data: Any
) -> None:
    col, size = case
    value = data.draw(st.binary(min_size=size, max_size=size))
    assert_same([col, column(T.TINY, "after")], row(value, b"\x2a"))


@settings(max_examples=200, deadline=None)
@given(
    st.binary(max_size=12),
    st.sampled_from([1, 2, 3, 4]),
    st.sampled_from(["utf8mb4", "latin1", "binary", "ucs2", None]),
)
def test_length_prefixed_values_match_the_reference_on_any_bytes(
    raw: bytes, prefix: int, charset: str | None
) -> None:
    col = column(T.BLOB, length_size=prefix, character_set_name=charset)
    assert_same([col], row(raw))  # the leading bytes are as good a length as any, even too long


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 65).flatmap(lambda p: st.tuples(st.just(p), st.integers(0, min(p, 30)))),
    st.data(),
)
def test_valid_decimals_match_the_reference(shape: tuple[int, int], data: Any) -> None:
    precision, decimals = shape
    whole = data.draw(st.integers(0, 10 ** (precision - decimals) - 1))
    frac = data.draw(st.integers(0, 10**decimals - 1))
    sign = data.draw(st.sampled_from(["", "-"]))
    text = f"{sign}{whole}" + (f".{frac:0{decimals}d}" if decimals else "")
    col = column(T.NEWDECIMAL, precision=precision, decimals=decimals)
    payload = row(_pack_decimal(text, precision, decimals))
    status, values, *_ = assert_same([col], payload, fast_only=True)
    assert status == "ok" and values["c"] == Decimal(text)


@pytest.mark.parametrize(("text", "fsp"), TIME2_CASES, ids=[f"{t}({f})" for t, f in TIME2_CASES])
def test_time2_values_decode_to_the_stored_value(text: str, fsp: int) -> None:
    columns = [column(T.TIME2, "t", fsp=fsp), column(T.TINY, "after")]
    status, values, *_ = assert_same(columns, row(time2_bytes(text, fsp), b"\x2a"), fast_only=True)
    assert status == "ok" and values == {"t": time2_value(text), "after": 42}
    read = fast_rows.reader_for(columns[0])
    assert read is not None and read(time2_bytes(text, fsp), 0)[0] == time2_value(text)


# --- plans and the fallback rule ----------------------------------------------------------------


def test_plan_covers_named_columns_of_known_types() -> None:
    plan = fast_rows.build_plan([column(T.LONG, "id"), column(T.VARCHAR, "v", max_length=10)])
    assert plan is not None
    assert [name for name, _ in plan.steps] == ["id", "v"]
    assert (plan.present, plan.null_bytes, plan.null_mask) == (b"\x03", 1, 0b11)


@pytest.mark.parametrize(
    "col",
    [column(T.VAR_STRING, max_length=10), column(T.DECIMAL), column(T.LONG, name=None),
     column(T.NEWDECIMAL, precision=2, decimals=3), column(T.ENUM, size=3, enum_values=None)],
    ids=["var_string", "old decimal", "unnamed", "bad decimal", "odd enum size"],
)  # fmt: skip
def test_no_plan_when_a_column_needs_the_original(col: Column) -> None:
    assert fast_rows.build_plan([column(T.LONG, "id"), col]) is None


def test_full_bitmap_sets_exactly_the_column_bits() -> None:
    assert fast_rows.full_bitmap(1) == b"\x01"
    assert fast_rows.full_bitmap(8) == b"\xff"
    assert fast_rows.full_bitmap(9) == b"\xff\x01"


def test_plan_is_cached_on_the_table_and_rebuilt_for_another_errors_setting() -> None:
    ev = event([column(T.LONG, "id")], row(b"\x01\0\0\0"))
    first = fast_rows._plan_for(ev)
    assert fast_rows._plan_for(ev) is first
    assert (
        ev.table_map[7].__dict__["_drc_plan"] is first and "_drc_plan" not in ev.table_map[7].data
    )
    ev._ignore_decode_errors = True
    assert fast_rows._plan_for(ev) is not first and fast_rows._plan_for(ev).ignore_decode_errors


@pytest.fixture
def original_calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    calls: list[bytes] = []

    def counting(ev: Any, bitmap: bytes, image: Any = None) -> Any:
        calls.append(bitmap)
        return REFERENCE(ev, bitmap, image)

    monkeypatch.setattr(fast_rows, "_ORIGINAL", counting)
    return calls


def test_full_image_takes_the_fast_path(original_calls: list[bytes]) -> None:
    ev = event([column(T.LONG, "a"), column(T.LONG, "b")], row(b"\x01\0\0\0", b"\x02\0\0\0"))
    assert fast_rows._read_column_data(ev, b"\x03") == {"a": 1, "b": 2}
    assert original_calls == [] and ev.packet.read_bytes == 9 and not ev.is_partial_json_update


def test_minimal_image_falls_back(original_calls: list[bytes]) -> None:
    columns = [column(T.LONG, "a"), column(T.LONG, "b")]
    payload = b"\x00" + b"\x02\0\0\0"  # only b present: a one-bit null bitmap, then b
    ev = event(columns, payload)
    assert fast_rows._read_column_data(ev, b"\x02") == {"a": None, "b": 2}
    assert original_calls == [b"\x02"]
    assert ev._get_none_sources({"a": None}) == {"a": "cols bitmap"}


def test_partial_update_event_falls_back(original_calls: list[bytes]) -> None:
    ev = event([column(T.LONG, "a")], row(b"\x01\0\0\0"))
    ev.event_type = BINLOG.PARTIAL_UPDATE_ROWS_EVENT
    assert fast_rows._read_column_data(ev, b"\x01") == {"a": 1}
    assert len(original_calls) == 1


def test_bytes_pushed_back_into_the_wrapper_fall_back(original_calls: list[bytes]) -> None:
    ev = event([column(T.LONG, "a")], b"\x01\0\0\0")
    ev.packet.unread(b"\x00")  # the null bitmap now sits in the wrapper's own buffer
    assert fast_rows._read_column_data(ev, b"\x01") == {"a": 1}
    assert len(original_calls) == 1


def test_row_past_the_packet_end_raises_the_library_error(original_calls: list[bytes]) -> None:
    ev = event([column(T.VARCHAR, "v", max_length=10)], row(b"\x09abc"))
    with pytest.raises(AssertionError, match="Result length not requested length"):
        fast_rows._read_column_data(ev, b"\x01")
    assert len(original_calls) == 1


def test_unknown_type_names_table_and_column() -> None:
    ev = event(
        [column(T.LONG, "id"), column(T.VAR_STRING, "legacy", max_length=10)],
        row(b"\0" * 4, b"\x01a"),
    )
    with pytest.raises(UnsupportedColumnError, match=r"'legacy' of shop\.orders"):
        fast_rows._read_column_data(ev, b"\x03")


def test_install_is_idempotent_and_uninstall_restores_the_library_loop() -> None:
    decoding.install()
    decoding.install()
    assert RowsEvent._read_column_data is fast_rows._read_column_data
    fast_rows.uninstall()
    assert RowsEvent._read_column_data is fast_rows._ORIGINAL
    fast_rows.install()
    assert RowsEvent._read_column_data is fast_rows._read_column_data
