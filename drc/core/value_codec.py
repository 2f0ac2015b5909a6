"""Column values as msgpack with DRC's ext types: the row images of a record (drc.core.codec).

A row image is a msgpack map of column name (str) -> value, in table column order; decoding
keeps that order. Values use msgpack's own types for None, bool, int (-2**63 .. 2**64-1),
float (always float64, so bit-exact incl. -0.0), str, bytes (bin), and dict/list (MySQL JSON
documents, whose object keys must be str). The rest are ext types:

    code  Python type                  ext data
    1     decimal.Decimal              ASCII str(d): exact digits, exponent, sign of zero
    2     datetime.datetime (naive)    >HBBBBBI  year month day hour minute second microsecond
    3     datetime.datetime (aware)    code 2's 11 bytes + >q UTC offset in microseconds
    4     datetime.date                >HBB      year month day
    5     datetime.timedelta           >iII      days seconds microseconds (Python's own form)
    6     ZeroDate                     UTF-8 text as MySQL printed it
    7     Bit                          >BQ       width value
    8     frozenset[str] (SET)         msgpack array of the members, sorted (stable bytes)

Code -1 is msgpack's Timestamp; DRC never writes it and rejects it on decode. Decoded ext data
is validated as strictly as the encoder writes it (dates must be real dates, decimals must be
canonical, Bit values must fit, SET members must be sorted unique strs).

Why msgpack with ext types rather than msgspec: msgpack's C extension packs and unpacks the
common types (int, str, bytes, float, maps in order) without Python code; only ext values call
back into Python (``default=`` on encode, ``ext_hook=`` on decode), which gives exact round-trips
of Decimal, naive and aware datetimes, timedelta, ZeroDate, Bit and frozenset. msgspec 0.22
encodes Decimal, naive datetime, date and timedelta natively as strings, frozenset as an array
and dataclasses as maps, never calling ``enc_hook`` for them, so untyped decoding returns
'-0.00', '2020-01-02T03:04:05.000006', ['a'], {'value': 1, 'width': 2}. Typed decoding needs a
Struct per table version (rows are dynamic, schemas change by SCN). Making msgspec exact means
wrapping every such value in Ext in Python before encoding. Measured on the 100-row bench
workload (payload only, one run on the 2-core dev box): encode msgpack+ext 171k rows/s vs
msgspec+pre-walk 118k rows/s; decode msgpack+ext 179k rows/s vs msgspec+ext_hook 150k rows/s.
msgspec untyped is 2-3x faster but lossy (bench/bench_codec.py shows it when installed).

Encoding a value of any other type (tuple, set, an int or str subclass such as an Enum, a
Decimal NaN or Infinity, an int outside the 64-bit ranges, a map with non-str keys) raises
UnsupportedValueError naming it, so a record that could not be decoded is never written.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Callable, Mapping
from typing import Any

import msgpack

from drc.core.errors import CorruptRecordError, UnsupportedValueError
from drc.core.values import Bit, ZeroDate

EXT_DECIMAL = 1
EXT_DATETIME = 2
EXT_DATETIME_TZ = 3
EXT_DATE = 4
EXT_TIMEDELTA = 5
EXT_ZERO_DATE = 6
EXT_BIT = 7
EXT_SET = 8

_DATETIME = struct.Struct(">HBBBBBI")
_DATETIME_TZ = struct.Struct(">HBBBBBIq")
_DATE = struct.Struct(">HBB")
_TIMEDELTA = struct.Struct(">iII")
_BIT = struct.Struct(">BQ")
_ONE_US = dt.timedelta(microseconds=1)


class Malformed(ValueError):
    """Bytes that parsed as msgpack but do not have the structure DRC writes (an ext value, a
    record's payload); becomes CorruptRecordError."""


# Errors that decoding untrusted bytes can raise; all mean "this value or record is corrupt".
DECODE_ERRORS = (
    ValueError,  # msgpack format errors, Malformed, bad dates, UnicodeDecodeError
    TypeError,  # unhashable map keys, wrong argument types
    ArithmeticError,  # decimal.InvalidOperation, OverflowError
    struct.error,
    msgpack.UnpackException,
    KeyError,
    RecursionError,
)


# ---------------------------------------------------------------- encode


def _enc_decimal(v: decimal.Decimal) -> msgpack.ExtType:
    if not v.is_finite():
        raise UnsupportedValueError(f"Decimal {v} cannot be stored by MySQL; only finite decimals")
    return msgpack.ExtType(EXT_DECIMAL, str(v).encode("ascii"))


def _enc_datetime(v: dt.datetime) -> msgpack.ExtType:
    fields = (v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)
    offset = v.utcoffset()
    if offset is None:
        return msgpack.ExtType(EXT_DATETIME, _DATETIME.pack(*fields))
    return msgpack.ExtType(EXT_DATETIME_TZ, _DATETIME_TZ.pack(*fields, offset // _ONE_US))


def _enc_set(v: frozenset[Any]) -> msgpack.ExtType:
    if any(type(m) is not str for m in v):
        raise UnsupportedValueError("a SET value (frozenset) may only hold str members")
    return msgpack.ExtType(EXT_SET, msgpack.packb(sorted(v)))


_ENCODERS: dict[type, Callable[[Any], msgpack.ExtType]] = {
    decimal.Decimal: _enc_decimal,
    dt.datetime: _enc_datetime,
    dt.date: lambda v: msgpack.ExtType(EXT_DATE, _DATE.pack(v.year, v.month, v.day)),
    dt.timedelta: lambda v: msgpack.ExtType(
        EXT_TIMEDELTA, _TIMEDELTA.pack(v.days, v.seconds, v.microseconds)
    ),
    ZeroDate: lambda v: msgpack.ExtType(EXT_ZERO_DATE, v.text.encode("utf-8")),
    Bit: lambda v: msgpack.ExtType(EXT_BIT, _BIT.pack(v.width, v.value)),
    frozenset: _enc_set,
}


def _default(obj: Any) -> msgpack.ExtType:
    # Exact-type lookup: a datetime is also a date, a bool an int, an Enum a str; with
    # strict_types every subclass lands here and is either known exactly or refused.
    encoder = _ENCODERS.get(type(obj))
    if encoder is None:
        if type(obj) is int:  # msgpack hands over ints it cannot pack
            raise UnsupportedValueError(f"integer {obj} is outside -2**63..2**64-1")
        raise UnsupportedValueError(
            f"cannot encode a value of type {type(obj).__module__}.{type(obj).__qualname__}; "
            "see drc.core.values for the supported column value types"
        )
    return encoder(obj)


def pack(obj: Any) -> bytes:
    """``obj`` as msgpack with DRC's ext types; JSON documents in it are not checked (the
    callers check them once: :func:`encode_value`, :func:`row_to_wire`)."""
    try:
        return msgpack.packb(obj, default=_default, strict_types=True, use_bin_type=True)
    except UnsupportedValueError:
        raise
    except (ValueError, OverflowError) as exc:  # e.g. nesting deeper than msgpack's recursion limit
        raise UnsupportedValueError(f"value cannot be encoded: {exc}") from exc


def encode_value(value: Any) -> bytes:
    """One value as msgpack with DRC's ext types, no frame (for tests and other modules)."""
    if isinstance(value, dict | list):
        _check_json(value)
    return pack(value)


def encode_key(values: list[Any]) -> bytes:
    """``encode_value(values)`` for a row key's values, decoded from a record (hashed per key
    by catch-up's routing): key columns never hold JSON documents, so their object keys are
    not walked again."""
    return pack(values)


# ---------------------------------------------------------------- decode


def _dec_decimal(data: bytes) -> decimal.Decimal:
    text = data.decode("ascii")
    value = decimal.Decimal(text)
    if value.is_finite() and str(value) == text:
        return value
    raise Malformed(f"decimal ext holds {text!r}, not a canonical finite decimal")


def _dec_datetime_tz(data: bytes) -> dt.datetime:
    year, month, day, hour, minute, second, micro, offset = _DATETIME_TZ.unpack(data)
    tz = dt.timezone(offset * _ONE_US)
    return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


def _dec_timedelta(data: bytes) -> dt.timedelta:
    days, seconds, micros = _TIMEDELTA.unpack(data)
    if seconds >= 86400 or micros >= 1_000_000:
        raise Malformed(f"timedelta ext holds unnormalized {days}d {seconds}s {micros}us")
    return dt.timedelta(days, seconds, micros)


def _dec_bit(data: bytes) -> Bit:
    width, value = _BIT.unpack(data)
    return Bit(value, width)


def _dec_set(data: bytes) -> frozenset[str]:
    members = msgpack.unpackb(data, raw=False, use_list=True)
    if type(members) is not list or any(type(m) is not str for m in members):
        raise Malformed("SET ext does not hold an array of str")
    if any(a >= b for a, b in zip(members, members[1:], strict=False)):
        raise Malformed("SET ext members are not sorted and unique")
    return frozenset(members)


_DECODERS: dict[int, Callable[[bytes], Any]] = {
    EXT_DECIMAL: _dec_decimal,
    EXT_DATETIME: lambda data: dt.datetime(*_DATETIME.unpack(data)),
    EXT_DATETIME_TZ: _dec_datetime_tz,
    EXT_DATE: lambda data: dt.date(*_DATE.unpack(data)),
    EXT_TIMEDELTA: _dec_timedelta,
    EXT_ZERO_DATE: lambda data: ZeroDate(data.decode("utf-8")),
    EXT_BIT: _dec_bit,
    EXT_SET: _dec_set,
}


def _ext_hook(code: int, data: bytes) -> Any:
    # Called from C once per ext value: the two commonest types skip the table lookup.
    if code == EXT_DATETIME:
        return dt.datetime(*_DATETIME.unpack(data))
    if code == EXT_DECIMAL:
        return _dec_decimal(data)
    decoder = _DECODERS.get(code)
    if decoder is None:
        raise Malformed(f"unknown ext type code {code}")
    return decoder(data)


def unpack(data: bytes | bytearray | memoryview) -> Any:
    """Inverse of :func:`pack`; bad bytes raise one of :data:`DECODE_ERRORS`. What it returns
    is not yet checked for types DRC never writes (:func:`check_wire_row` does that)."""
    return msgpack.unpackb(
        data, raw=False, strict_map_key=True, ext_hook=_ext_hook, use_list=True, timestamp=0
    )


def decode_value(data: bytes | bytearray | memoryview) -> Any:
    """Inverse of :func:`encode_value`; bad bytes raise CorruptRecordError (offset 0)."""
    try:
        value = unpack(data)
        _check_decoded([value])
    except DECODE_ERRORS as exc:
        raise CorruptRecordError(f"value does not decode: {exc}", 0) from exc
    return value


# ---------------------------------------------------------------- structure checks

# Types msgpack returns that DRC never writes; containers need a walk for nested ones.
_WALK = frozenset({msgpack.Timestamp, dict, list})


def _check_decoded(values: Any) -> None:
    # The type scan runs in C: rows without JSON or foreign types cost no Python loop.
    if not _WALK.isdisjoint(map(type, values)):
        for value in values:
            if type(value) is msgpack.Timestamp:
                raise Malformed("msgpack Timestamp (ext -1) found; DRC never writes it")
            if type(value) is dict:
                "".join(value)  # raises TypeError if any key is not str (bytes passes msgpack)
                _check_decoded(value.values())
            elif type(value) is list:
                _check_decoded(value)


def _check_json(value: dict[Any, Any] | list[Any], path: str = "value") -> None:
    """Encode side: JSON object keys must be str, or the record could not be decoded."""
    items = value.items() if type(value) is dict else enumerate(value)
    for key, item in items:
        if type(value) is dict and type(key) is not str:
            raise UnsupportedValueError(f"{path} has a JSON object key of type {type(key)}")
        if type(item) is dict or type(item) is list:
            _check_json(item, f"{path}[{key!r}]")


# ---------------------------------------------------------------- row images


def row_to_wire(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A row image as the dict a record's payload packs; UnsupportedValueError for a column
    name that is not a str or a JSON document with a non-str object key."""
    if row is None:
        return None
    if type(row) is not dict:
        row = dict(row)
    for name, value in row.items():
        if type(name) is not str:
            raise UnsupportedValueError(f"column name {name!r} is a {type(name).__name__}")
        if type(value) is dict or type(value) is list:
            _check_json(value, name)
    return row  # type: ignore[return-value]


def check_wire_row(row: dict[Any, Any]) -> None:
    """A decoded row image has str column names and only the value types DRC writes."""
    "".join(row)  # TypeError for a non-str column name (msgpack lets bytes keys through)
    if not _WALK.isdisjoint(map(type, row.values())):
        _check_decoded(row.values())
