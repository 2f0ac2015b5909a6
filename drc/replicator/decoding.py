"""Exact column values from python-mysql-replication.

The library decodes most column types exactly, but some lose information DRC must keep
(shared/DESIGN.md rule 5: never a silent wrong answer):

| type            | library returns                    | DRC returns                        |
| --------------- | ---------------------------------- | ---------------------------------- |
| zero / partial DATE, DATETIME | None (same as NULL)  | ZeroDate('0000-00-00 ...')         |
| zero TIMESTAMP  | 1970-01-01 00:00:00                | ZeroDate('0000-00-00 00:00:00')    |
| YEAR 0000       | 1900                               | 0                                  |
| empty SET       | None (same as NULL)                | frozenset()                        |
| SET             | set                                | frozenset                          |
| BIT(n)          | text of '0'/'1'                    | Bit(value, n)                      |
| BINARY(n)       | bytes without trailing 0x00 pad    | the n stored bytes                 |
| empty VARBINARY/BLOB | '' (str)                      | b''                                |
| FLOAT           | the float32 widened (1.100000023…) | shortest text that round-trips to  |
|                 |                                    | the same float32 (1.1), as SELECT  |
| negative TIME(n) | the fraction complemented:        | the stored value (see time2)       |
| with a fraction | -01:00:00.000001 → -01:00:00.999999 |                                    |

TIMESTAMP values are naive datetimes in UTC. The fix is one override of the library's per-column
dispatch method (``_RowsEvent__read_values_name``); every other type still goes through the
library, and a type it cannot decode raises UnsupportedColumnError naming table and column.
This per-value path is the reference: fast_rows decodes whole FULL row images to the identical
values, and hands every other row to it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from drc.core.errors import UnsupportedColumnError
from drc.core.values import Bit, ZeroDate

_ORIGINAL = RowsEvent._RowsEvent__read_values_name  # type: ignore[attr-defined]
_EPOCH = dt.datetime(1970, 1, 1)
_STRINGS = {FIELD_TYPE.STRING, FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.BLOB}


def _bits(value: int, start: int, size: int, width: int) -> int:
    return (value >> (width - (start + size))) & ((1 << size) - 1)


def _fraction_text(micro: int, fsp: int) -> str:
    return f".{micro:06d}"[: fsp + 1] if fsp else ""


def _datetime_or_zero(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int, fsp: int) -> Any:
    try:
        return dt.datetime(y, mo, d, h, mi, s, us)
    except ValueError:
        return ZeroDate(
            f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}{_fraction_text(us, fsp)}"
        )


def _read_date(event: Any) -> Any:
    raw = event.packet.read_uint24()
    year, month, day = raw >> 9, (raw >> 5) & 15, raw & 31
    try:
        return dt.date(year, month, day)
    except ValueError:
        return ZeroDate(f"{year:04d}-{month:02d}-{day:02d}")


def _read_datetime2(event: Any, column: Any) -> Any:
    raw = event.packet.read_int_be_by_size(5)
    micro = event._RowsEvent__read_fsp(column)
    year_month = _bits(raw, 1, 17, 40)
    return _datetime_or_zero(
        year_month // 13,
        year_month % 13,
        _bits(raw, 18, 5, 40),
        _bits(raw, 23, 5, 40),
        _bits(raw, 28, 6, 40),
        _bits(raw, 34, 6, 40),
        micro,
        column.fsp,
    )


def _read_datetime_v1(event: Any) -> Any:
    raw = event.packet.read_uint64()
    date, time = divmod(raw, 1_000_000)
    return _datetime_or_zero(
        date // 10000, (date // 100) % 100, date % 100, time // 10000, (time // 100) % 100,
        time % 100, 0, 0,
    )  # fmt: skip


def _read_timestamp2(event: Any, column: Any) -> Any:
    seconds = event.packet.read_int_be_by_size(4)
    micro = event._RowsEvent__read_fsp(column)
    if seconds == 0 and micro == 0:
        return ZeroDate("0000-00-00 00:00:00" + _fraction_text(0, column.fsp))
    return _EPOCH + dt.timedelta(seconds=seconds, microseconds=micro)


def _read_timestamp_v1(event: Any) -> Any:
    seconds = event.packet.read_uint32()
    return (
        ZeroDate("0000-00-00 00:00:00") if seconds == 0 else _EPOCH + dt.timedelta(seconds=seconds)
    )


# TIME2 fraction bytes and microseconds per stored fraction unit, by fsp (MySQL's TIMEF format).
_TIME2_FRACTION = {1: (1, 10_000), 2: (1, 10_000), 3: (2, 100), 4: (2, 100), 5: (3, 1), 6: (3, 1)}


def time2_layout(fsp: int) -> tuple[int, int]:
    """(fraction bytes, microseconds per fraction unit) of a TIME(fsp) value; (0, 0) for fsp 0."""
    return _TIME2_FRACTION.get(fsp, (0, 0))


def time2(raw: bytes, frac_bytes: int, unit: int) -> dt.timedelta:
    """A TIME2 value from its 3 + ``frac_bytes`` stored bytes (MySQL's my_time_packed_from_binary).

    The bytes are ONE big-endian number offset by 0x800000 << (8 * frac_bytes): the integer part
    (1 sign bit, 1 unused, 10 bits hour, 6 minute, 6 second) then the fraction, negative values in
    two's complement over the whole width. The library decodes the two parts separately, which
    turns -01:00:00.000001 into -01:00:00.999999.
    """
    bits = 8 * frac_bytes
    value = int.from_bytes(raw, "big") - (0x800000 << bits)
    intpart, frac = value >> bits, value & ((1 << bits) - 1)
    if intpart < 0 and frac:  # a negative fraction borrows one from the integer part
        intpart += 1
        frac -= 1 << bits
    hms = -intpart if intpart < 0 else intpart
    magnitude = dt.timedelta(
        hours=hms >> 12 & 0x3FF,
        minutes=hms >> 6 & 63,
        seconds=hms & 63,
        microseconds=abs(frac) * unit,
    )
    return -magnitude if value < 0 else magnitude


def _read_time2(event: Any, column: Any) -> dt.timedelta:
    frac_bytes, unit = time2_layout(column.fsp)
    return time2(event.packet.read(3 + frac_bytes), frac_bytes, unit)


def _read_set(event: Any, column: Any) -> frozenset[str]:
    mask = event.packet.read_uint_by_size(column.size)
    return frozenset(v for i, v in enumerate(column.set_values or ()) if mask & (1 << i))


def _exact_value(event: Any, column: Any, *args: Any) -> Any:
    kind = column.type
    if kind == FIELD_TYPE.DATE:
        return _read_date(event)
    if kind == FIELD_TYPE.DATETIME2:
        return _read_datetime2(event, column)
    if kind == FIELD_TYPE.TIMESTAMP2:
        return _read_timestamp2(event, column)
    if kind == FIELD_TYPE.TIME2:
        return _read_time2(event, column)
    if kind == FIELD_TYPE.DATETIME:
        return _read_datetime_v1(event)
    if kind == FIELD_TYPE.TIMESTAMP:
        return _read_timestamp_v1(event)
    if kind == FIELD_TYPE.YEAR:
        raw = event.packet.read_uint8()
        return 0 if raw == 0 else 1900 + raw
    if kind == FIELD_TYPE.SET:
        return _read_set(event, column)
    if kind == FIELD_TYPE.BIT:
        return Bit(int.from_bytes(event.packet.read(column.bytes), "big"), column.bits)
    value = _delegate(event, column, *args)
    if kind == FIELD_TYPE.FLOAT:
        return float(str(np.float32(value)))
    if kind in _STRINGS and getattr(column, "character_set_name", None) == "binary":
        # The library decodes binary strings with the codec 'binary', which does not exist, and
        # keeps the bytes on LookupError; but CPython decodes b'' to '' without a codec lookup.
        value = value if isinstance(value, bytes) else value.encode()
        if kind == FIELD_TYPE.STRING:
            return value.ljust(column.max_length, b"\0")  # BINARY(n) is stored without its pad
    return value


def _delegate(event: Any, column: Any, *args: Any) -> Any:
    try:
        return _ORIGINAL(event, column, *args)
    except NotImplementedError as exc:
        raise UnsupportedColumnError(
            f"column {column.name!r} of {event.schema}.{event.table} has binlog type "
            f"{column.type}, which DRC cannot decode exactly; exclude the table from capture "
            "or change the column type"
        ) from exc


def _read_values_name(
    self: Any,
    column: Any,
    null_bitmap: Any,
    null_bitmap_index: int,
    is_partial: bool,
    cols_bitmap: Any,
    unsigned: bool,
    i: int,
) -> Any:
    from pymysqlreplication.bitmap import BitGet

    if BitGet(cols_bitmap, i) == 0 or self._is_null(null_bitmap, null_bitmap_index):
        return _ORIGINAL(
            self, column, null_bitmap, null_bitmap_index, is_partial, cols_bitmap, unsigned, i
        )
    return _exact_value(
        self, column, null_bitmap, null_bitmap_index, is_partial, cols_bitmap, unsigned, i
    )


def install() -> None:
    """Route the library's row decoding through DRC's exact readers (idempotent).

    Two overrides: this module's per-value dispatch, and fast_rows' per-table plans that decode
    FULL row images without it (and fall back to it for anything else).
    """
    from drc.replicator import fast_rows  # it builds on this module's readers

    RowsEvent._RowsEvent__read_values_name = _read_values_name  # type: ignore[attr-defined]
    fast_rows.install()
