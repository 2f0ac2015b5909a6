"""The record codec: exact round-trips of every column type, framing, and corrupt input."""

from __future__ import annotations

import dataclasses
import datetime as dt
import struct
import zlib
from decimal import Decimal
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.core import value_codec
from drc.core.codec import (
    HEADER_SIZE,
    decode_transaction,
    encode_transaction,
    peek_length,
    peek_tables,
)
from drc.core.errors import CorruptRecordError, UnsupportedValueError
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.scn import SCN
from drc.core.value_codec import decode_value, encode_value
from drc.core.values import Bit, ZeroDate

SETTINGS = settings(max_examples=150, deadline=None)

# ---------------------------------------------------------------- exact comparison


def same(a: Any, b: Any) -> bool:
    """Equal *and* the same representation: == alone says -0.0 == 0.0 and 1.0 == 1.00."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return struct.pack(">d", a) == struct.pack(">d", b)
    if type(a) is Decimal:
        return a.as_tuple() == b.as_tuple()
    if type(a) is dt.datetime:
        return a.replace(tzinfo=None) == b.replace(tzinfo=None) and a.utcoffset() == b.utcoffset()
    if type(a) is dict:
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def assert_same_txn(a: Transaction, b: Transaction) -> None:
    assert a == b
    for x, y in zip(a.changes, b.changes, strict=True):
        assert same(x.before, y.before) and same(x.after, y.after)


# ---------------------------------------------------------------- value strategies

TIME_MAX = dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)


@st.composite
def mysql_decimals(draw: st.DrawFn) -> Decimal:
    digits = draw(st.lists(st.integers(0, 9), min_size=1, max_size=65))
    scale = draw(st.integers(0, min(30, len(digits))))
    return Decimal((draw(st.integers(0, 1)), tuple(digits), -scale))


@st.composite
def zero_dates(draw: st.DrawFn) -> ZeroDate:
    # At least one of year, month, day is zero: never a valid Python date.
    y, m, d = draw(st.sampled_from([(0, 1, 1), (1, 0, 1), (1, 1, 0)]))
    year = 0 if y == 0 else draw(st.integers(0, 9999))
    month = 0 if m == 0 else draw(st.integers(0, 12))
    day = 0 if d == 0 else draw(st.integers(0, 31))
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if draw(st.booleans()):
        text += " " + draw(st.sampled_from(["00:00:00", "12:34:56", "23:59:59"]))
        text += draw(st.sampled_from(["", ".0", ".000000", ".123456"]))
    return ZeroDate(text)


fixed_offsets = st.builds(
    dt.timezone,
    st.timedeltas(min_value=dt.timedelta(hours=-23, minutes=-59), max_value=dt.timedelta(hours=23)),
)
bits = st.integers(1, 64).flatmap(lambda w: st.builds(Bit, st.integers(0, 2**w - 1), st.just(w)))
json_docs = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=15,
)
values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**64 - 1),
    st.integers(1901, 2155),  # YEAR
    st.booleans(),
    mysql_decimals(),
    st.decimals(allow_nan=False, allow_infinity=False),  # any exponent, e.g. 1E+3
    st.floats(allow_nan=False),
    st.dates(),
    st.datetimes(),
    st.datetimes(
        min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31), timezones=fixed_offsets
    ),
    st.timedeltas(min_value=-TIME_MAX, max_value=TIME_MAX),
    zero_dates(),
    st.text(),
    st.sampled_from(["😀𝄞", "naïve café", "", "a\x00b"]),
    st.text(alphabet=st.characters(max_codepoint=255)),  # latin1 decoded
    st.binary(max_size=300),
    bits,
    st.frozensets(st.text(max_size=10), max_size=8),  # SET
    json_docs,
)
column_names = st.text(min_size=1, max_size=12)
rows = st.dictionaries(column_names, values, min_size=1, max_size=6)


@st.composite
def row_changes(draw: st.DrawFn) -> RowChange:
    op = draw(st.sampled_from(list(Op)))
    before = draw(rows) if op is not Op.INSERT else None
    after = draw(rows) if op is not Op.DELETE else None
    return RowChange(draw(st.text(max_size=10)), draw(st.text(max_size=10)), op, before, after)


transactions = st.builds(
    Transaction,
    scn=st.builds(
        SCN,
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**32 - 1),
        st.integers(0, 2**64 - 1),
    ),
    server_id=st.integers(0, 2**32 - 1),
    gtid=st.none() | st.text(max_size=40),
    timestamp=st.integers(0, 2**32 - 1),
    changes=st.lists(row_changes(), max_size=5).map(tuple),
    ddl=st.lists(st.builds(SchemaChange, st.text(max_size=10), st.text()), max_size=2).map(tuple),
    drc_originated=st.booleans(),
    fragment=st.integers(0, 1000),
    last_fragment=st.booleans(),
)


def sample_txn() -> Transaction:
    after = {
        "id": 2**64 - 1,
        "name": "Zoë 😀",
        "price": Decimal("-0.00"),
        "at": dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
        "d": dt.date(1, 1, 1),
        "t": dt.timedelta(hours=-838, minutes=-59, seconds=-59),
        "z": ZeroDate("0000-00-00 00:00:00.000000"),
        "flags": Bit(5, 3),
        "tags": frozenset({"b", "a"}),
        "doc": {"k": [1, 2.5, None, True, {"n": "x"}]},
        "blob": b"\x00\xff",
        "f": -0.0,
        "nothing": None,
    }
    return Transaction(
        scn=SCN(2, 101, 17, 123456),
        server_id=101,
        gtid="0-101-99",
        timestamp=1_700_000_000,
        changes=(
            RowChange("shop", "orders", Op.INSERT, None, after),
            RowChange("shop", "orders", Op.UPDATE, {"id": 1, "qty": 1}, {"id": 1, "qty": 2}),
            RowChange("shop", "items", Op.DELETE, {"id": -(2**63)}, None),
        ),
        ddl=(SchemaChange("shop", "ALTER TABLE orders ADD COLUMN note TEXT"),),
    )


def frame(payload: bytes, magic: bytes = b"DX", version: int = 1, flags: int = 0) -> bytes:
    """A record built from the spec in the codec docstring, independently of the codec."""
    head = magic + bytes([version, flags]) + struct.pack(">I", len(payload))
    return head + struct.pack(">I", zlib.crc32(head + payload)) + payload


# ---------------------------------------------------------------- round trips


@SETTINGS
@given(values)
def test_every_value_type_round_trips_exactly(value: Any) -> None:
    assert same(decode_value(encode_value(value)), value)


@SETTINGS
@given(st.floats())
def test_floats_round_trip_bit_exact(value: float) -> None:
    back = decode_value(encode_value(value))
    assert struct.pack(">d", back) == struct.pack(">d", value)


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        1,
        0,
        -0.0,
        Decimal("-0"),
        Decimal("1.000"),
        Decimal("1E+3"),
        Decimal("-" + "9" * 35 + "." + "9" * 30),
        dt.date(2020, 1, 1),
        dt.datetime(2020, 1, 1),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
        dt.datetime(2020, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=-9, minutes=-30))),
        dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
        -dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
        dt.timedelta.max,
        dt.timedelta.min,
        ZeroDate("2020-00-15"),
        Bit(2**64 - 1, 64),
        Bit(0, 1),
        frozenset(),
        "😀𝄞",
        b"",
        [],
        {},
    ],
    ids=repr,
)
def test_edge_values_keep_type_and_representation(value: Any) -> None:
    back = decode_value(encode_value(value))
    assert same(back, value), (back, value)


def test_one_megabyte_blob_round_trips() -> None:
    blob = bytes(range(256)) * 4096
    assert decode_value(encode_value(blob)) == blob
    txn = Transaction(
        SCN(1, 1, 1, 4), 1, None, 0, (RowChange("s", "t", Op.INSERT, None, {"b": blob}),)
    )
    back, end = decode_transaction(encode_transaction(txn))
    assert back.changes[0].after == {"b": blob} and end > 2**20


@settings(max_examples=100, deadline=None)
@given(transactions)
def test_transactions_round_trip_exactly(txn: Transaction) -> None:
    data = encode_transaction(txn)
    back, end = decode_transaction(data)
    assert end == len(data) == peek_length(data)
    assert_same_txn(back, txn)


def test_sample_transaction_round_trips_with_row_order_kept() -> None:
    txn = sample_txn()
    back, _ = decode_transaction(encode_transaction(txn))
    assert_same_txn(back, txn)
    assert list(back.changes[0].after) == list(txn.changes[0].after)  # type: ignore[arg-type]
    assert back.changes[2].op is Op.DELETE
    assert back.tables() == {("shop", "orders"), ("shop", "items")}


def test_encoding_is_deterministic_and_pinned() -> None:
    # A byte-literal fixture: if this changes, the on-disk format changed; bump VERSION.
    txn = Transaction(
        scn=SCN(1, 2, 3, 4),
        server_id=2,
        gtid=None,
        timestamp=5,
        changes=(RowChange("d", "t", Op.INSERT, None, {"a": Decimal("1.5"), "b": Bit(1, 1)}),),
    )
    data = encode_transaction(txn)
    assert data == encode_transaction(txn)
    assert data.hex() == PINNED_HEX
    assert decode_transaction(bytes.fromhex(PINNED_HEX))[0] == txn


PINNED_HEX = (
    "4458"
    "01"
    "00"
    "0000003e"
    "d96271e8"  # b"DX", version 1, flags 0, length 62, CRC
    "99"  # array of 9
    "c414"
    "00000001"
    "00000003"
    "0000000000000004"
    "00000002"  # bin(20) SCN
    "02"
    "c0"
    "05"
    "c2"
    "00"
    "c3"  # server_id, gtid nil, timestamp, drc false, fragment, last
    "91"
    "95"
    "a164"
    "a174"
    "a169"
    "c0"  # changes: ["d", "t", "i", nil,
    "82"
    "a161"
    "c70301"
    "312e35"  # {"a": ext 1 "1.5",
    "a162"
    "c70907"
    "01"
    "0000000000000001"  # "b": ext 7 width 1 value 1}]
    "90"  # ddl: []
)


def test_non_dict_mappings_encode_as_maps() -> None:
    from types import MappingProxyType

    change = RowChange("s", "t", Op.INSERT, None, MappingProxyType({"a": 1, "b": 2}))
    txn = Transaction(SCN(1, 1, 1, 4), 1, None, 0, (change,))
    back, _ = decode_transaction(encode_transaction(txn))
    assert back.changes[0].after == {"a": 1, "b": 2}


def test_records_decode_back_to_back_from_any_buffer_type() -> None:
    first, second = sample_txn(), Transaction(SCN(3, 7, 1, 4), 7, None, 1, ())
    prefix = b"junk before"
    buf = prefix + encode_transaction(first) + encode_transaction(second)
    for kind in (bytes, bytearray, memoryview):
        txn1, offset = decode_transaction(kind(buf), len(prefix))  # type: ignore[operator]
        txn2, end = decode_transaction(kind(buf), offset)  # type: ignore[operator]
        assert_same_txn(txn1, first)
        assert txn2 == second and end == len(buf)


# ---------------------------------------------------------------- unsupported values


class Color(str):
    pass


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ((1, 2), "builtins.tuple"),
        ({1, 2}, "builtins.set"),
        (Op.INSERT, "Op"),  # a str subclass must not silently become a plain str
        (Color("red"), "Color"),
        (object(), "builtins.object"),
        (Decimal("NaN"), "only finite"),
        (Decimal("-Infinity"), "only finite"),
        (2**64, "outside -2**63..2**64-1"),
        (-(2**63) - 1, "outside -2**63..2**64-1"),
        (frozenset({1}), "only hold str members"),
        ({1: "a"}, "JSON object key"),
        ([{"ok": {b"k": 1}}], "JSON object key"),
    ],
    ids=repr,
)
def test_unsupported_values_are_refused_by_name(value: Any, named: str) -> None:
    with pytest.raises(UnsupportedValueError) as info:
        encode_value(value)
    assert named in str(info.value)


def test_unsupported_value_inside_a_transaction_is_refused() -> None:
    change = RowChange("s", "t", Op.INSERT, None, {"a": (1, 2)})
    with pytest.raises(UnsupportedValueError, match="tuple"):
        encode_transaction(Transaction(SCN(1, 1, 1, 4), 1, None, 0, (change,)))
    bad_key = RowChange("s", "t", Op.INSERT, None, {1: "a"})  # type: ignore[dict-item]
    with pytest.raises(UnsupportedValueError, match="column name 1"):
        encode_transaction(Transaction(SCN(1, 1, 1, 4), 1, None, 0, (bad_key,)))


# ---------------------------------------------------------------- corrupt input

SAMPLE = encode_transaction(sample_txn())


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_single_byte_flip_is_detected(mask: int) -> None:
    for index in range(len(SAMPLE)):
        data = bytearray(SAMPLE)
        data[index] ^= mask
        with pytest.raises(CorruptRecordError) as info:
            decode_transaction(bytes(data))
        assert info.value.offset == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(SAMPLE) - 1), st.integers(1, 255), st.binary(max_size=4))
def test_any_byte_flip_at_any_offset_raises(index: int, mask: int, prefix: bytes) -> None:
    data = bytearray(prefix + SAMPLE)
    data[len(prefix) + index] ^= mask
    with pytest.raises(CorruptRecordError) as info:
        decode_transaction(bytes(data), len(prefix))
    assert info.value.offset == len(prefix)


def test_every_truncation_is_detected() -> None:
    for size in range(len(SAMPLE)):
        with pytest.raises(CorruptRecordError, match="truncated"):
            decode_transaction(SAMPLE[:size])


def test_peek_length_needs_only_the_header() -> None:
    assert peek_length(SAMPLE[:HEADER_SIZE]) == len(SAMPLE)
    assert peek_length(b"xx" + SAMPLE, 2) == len(SAMPLE)
    with pytest.raises(CorruptRecordError, match="truncated record header"):
        peek_length(SAMPLE[: HEADER_SIZE - 1])
    with pytest.raises(ValueError, match="outside the buffer"):
        peek_length(SAMPLE, -1)


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (frame(b"\x90", magic=b"DY"), "bad magic"),
        (frame(b"\x90", version=2), "version 2"),
        (frame(b"\x90", flags=2), "reserved flags"),
        (frame(b"\x90")[:-1], "truncated record"),
        (frame(b"\x90")[:8] + b"\x00\x00\x00\x00" + b"\x90", "CRC mismatch"),
    ],
)
def test_bad_frames_name_the_failed_check(record: bytes, message: str) -> None:
    with pytest.raises(CorruptRecordError, match=message):
        decode_transaction(record)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_payload_with_a_valid_crc_is_rejected(payload: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_transaction(frame(payload))


def wire(**overrides: Any) -> list[Any]:
    """A valid payload structure with chosen items replaced, packed by the test itself."""
    fields = {
        "scn": SCN(1, 2, 3, 4).to_bytes(),
        "server_id": 2,
        "gtid": None,
        "timestamp": 5,
        "drc": False,
        "fragment": 0,
        "last": True,
        "changes": [["d", "t", "i", None, {"a": 1}]],
        "ddl": [],
    }
    fields.update(overrides)
    return list(fields.values())


def ext(code: int, data: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(code, data)


def row(value: Any) -> list[list[Any]]:
    return [["d", "t", "i", None, {"a": value}]]


STRUCTURE_CASES = {
    "not an array": msgpack.packb({"a": 1}),
    "8 items": msgpack.packb(wire()[:8]),
    "scn 19 bytes": msgpack.packb(wire(scn=b"\x00" * 19)),
    "scn as text": msgpack.packb(wire(scn="1:2:3:4")),
    "bool server_id": msgpack.packb(wire(server_id=True)),
    "server_id too big": msgpack.packb(wire(server_id=2**32)),
    "negative timestamp": msgpack.packb(wire(timestamp=-1)),
    "negative fragment": msgpack.packb(wire(fragment=-1)),
    "int drc flag": msgpack.packb(wire(drc=1)),
    "change not array": msgpack.packb(wire(changes=["x"])),
    "unknown op": msgpack.packb(wire(changes=[["d", "t", "x", None, {"a": 1}]])),
    "insert with before": msgpack.packb(wire(changes=[["d", "t", "i", {"a": 1}, {"a": 1}]])),
    "delete with after": msgpack.packb(wire(changes=[["d", "t", "d", None, {"a": 1}]])),
    "update without after": msgpack.packb(wire(changes=[["d", "t", "u", {"a": 1}, None]])),
    "row as array": msgpack.packb(wire(changes=[["d", "t", "i", None, [1]]])),
    "bytes column name": msgpack.packb(wire(changes=[["d", "t", "i", None, {b"a": 1}]])),
    "int schema": msgpack.packb(wire(changes=[[1, "t", "i", None, {"a": 1}]])),
    "ddl wrong shape": msgpack.packb(wire(ddl=[["d"]])),
    "trailing bytes": msgpack.packb(wire()) + b"\x00",
    "unknown ext": msgpack.packb(wire(changes=row(ext(99, b"")))),
    "msgpack timestamp": msgpack.packb(
        wire(changes=row(dt.datetime(2020, 1, 1, tzinfo=dt.UTC))), datetime=True
    ),
    "timestamp in json": msgpack.packb(
        wire(changes=row({"k": [dt.datetime(2020, 1, 1, tzinfo=dt.UTC)]})), datetime=True
    ),
    "bytes key in json": msgpack.packb(wire(changes=row({"k": {b"x": 1}}))),
    "month 13": msgpack.packb(
        wire(changes=row(ext(2, struct.pack(">HBBBBBI", 2020, 13, 1, 0, 0, 0, 0))))
    ),
    "year 0 date": msgpack.packb(wire(changes=row(ext(4, struct.pack(">HBB", 0, 1, 1))))),
    "short date": msgpack.packb(wire(changes=row(ext(4, b"\x07\xe4\x01")))),
    "microsecond 1e6": msgpack.packb(
        wire(changes=row(ext(2, struct.pack(">HBBBBBI", 2020, 1, 1, 0, 0, 0, 10**6))))
    ),
    "offset 24h": msgpack.packb(
        wire(changes=row(ext(3, struct.pack(">HBBBBBIq", 2020, 1, 1, 0, 0, 0, 0, 86400 * 10**6))))
    ),
    "decimal garbage": msgpack.packb(wire(changes=row(ext(1, b"abc")))),
    "decimal non-canonical": msgpack.packb(wire(changes=row(ext(1, b"1e3")))),
    "decimal nan": msgpack.packb(wire(changes=row(ext(1, b"NaN")))),
    "decimal non-ascii": msgpack.packb(wire(changes=row(ext(1, "١".encode())))),
    "bit too big": msgpack.packb(wire(changes=row(ext(7, struct.pack(">BQ", 3, 8))))),
    "bit width 0": msgpack.packb(wire(changes=row(ext(7, struct.pack(">BQ", 0, 0))))),
    "set unsorted": msgpack.packb(wire(changes=row(ext(8, msgpack.packb(["b", "a"]))))),
    "set duplicate": msgpack.packb(wire(changes=row(ext(8, msgpack.packb(["a", "a"]))))),
    "set of ints": msgpack.packb(wire(changes=row(ext(8, msgpack.packb([1]))))),
    "timedelta unnormalized": msgpack.packb(
        wire(changes=row(ext(5, struct.pack(">iII", 0, 86400, 0))))
    ),
    "zero date that is valid": msgpack.packb(wire(changes=row(ext(6, b"2020-01-01")))),
    "zero date garbage": msgpack.packb(wire(changes=row(ext(6, b"yesterday")))),
    "zero date bad utf8": msgpack.packb(wire(changes=row(ext(6, b"\xff")))),
}


def test_structure_check_cases_are_themselves_well_formed() -> None:
    # Guard against a case failing for a reason other than the one named.
    good = msgpack.packb(wire())
    assert decode_transaction(frame(good))[0].changes[0].after == {"a": 1}


@pytest.mark.parametrize("name", list(STRUCTURE_CASES))
def test_payload_with_valid_crc_but_wrong_structure_is_rejected(name: str) -> None:
    with pytest.raises(CorruptRecordError) as info:
        decode_transaction(b"pad" + frame(STRUCTURE_CASES[name]), 3)
    assert info.value.offset == 3
    assert "passed its CRC but does not decode" in str(info.value)


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\xd6\xff\x00\x00\x00\x01", b"\xc7\x00\x63"])
def test_decode_value_rejects_bad_bytes(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_value(data)


def test_ext_codes_are_the_documented_ones() -> None:
    codes = (
        value_codec.EXT_DECIMAL, value_codec.EXT_DATETIME, value_codec.EXT_DATETIME_TZ,
        value_codec.EXT_DATE, value_codec.EXT_TIMEDELTA, value_codec.EXT_ZERO_DATE,
        value_codec.EXT_BIT, value_codec.EXT_SET,
    )  # fmt: skip
    assert codes == (1, 2, 3, 4, 5, 6, 7, 8)
    assert encode_value(Decimal("-1.50")) == msgpack.packb(ext(1, b"-1.50"))
    assert encode_value(dt.date(2020, 1, 2)) == msgpack.packb(ext(4, b"\x07\xe4\x01\x02"))


@given(transactions)
def test_a_peek_sees_what_decoding_sees(txn: Transaction) -> None:
    drc, tables, ddl = peek_tables(encode_transaction(txn))
    assert drc == txn.drc_originated and ddl == len(txn.ddl)
    assert tables == {(c.schema, c.table) for c in txn.changes}


@pytest.mark.parametrize(
    "payload",
    [[1, 2, 3], [b"s", 1, None, 1, "yes", 0, True, [], []], [b"s", 1, None, 1, False, 0, True,
     [["db", 7, "i", None, {}]], []], [b"s", 1, None, 1, False, 0, True, [["db"]], []]],
)  # fmt: skip
def test_a_peek_at_a_malformed_record_raises(payload: list[Any]) -> None:
    with pytest.raises(CorruptRecordError):
        peek_tables(frame(msgpack.packb(payload)))


def test_a_gtid_position_is_a_tenth_item_only_when_present() -> None:
    plain = sample_txn()
    with_position = dataclasses.replace(plain, gtid_position="1-1-9,2-2-3")
    assert msgpack.unpackb(encode_transaction(plain)[HEADER_SIZE:], raw=False).__len__() == 9
    data = encode_transaction(with_position)
    assert msgpack.unpackb(data[HEADER_SIZE:], raw=False)[9] == "1-1-9,2-2-3"
    back, _ = decode_transaction(data)
    assert back.gtid_position == "1-1-9,2-2-3"
    assert decode_transaction(encode_transaction(plain))[0].gtid_position is None
    assert peek_tables(data)[1] == peek_tables(encode_transaction(plain))[1]
