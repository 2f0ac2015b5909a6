"""One column value's bytes -> its exact Python value (drc.core.values lists the types).

``read_value(spec, data, pos) -> (value, next_pos)`` reads the value of one column at ``pos`` of
a row image. Every function here is pure and typed, over ``bytes`` and an offset; a value that
runs past the end of ``data`` comes back short and is caught by the row decoder, which checks
where each row ends.

What DRC keeps that a plain binlog reader loses (shared/DESIGN.md rule 5: never a silent wrong
answer):

| type                          | DRC's value                                             |
| ----------------------------- | ------------------------------------------------------- |
| zero / partial DATE, DATETIME | ZeroDate('0000-00-00 ...'), the text SELECT shows       |
| zero TIMESTAMP                | ZeroDate('0000-00-00 00:00:00[.000]')                   |
| YEAR 0000                     | 0 (not 1900)                                            |
| SET                           | frozenset of members, empty SET frozenset() (not NULL)  |
| BIT(n)                        | Bit(value, n)                                           |
| BINARY(n)                     | the n stored bytes, its trailing 0x00 pad put back      |
| VARBINARY, BLOB               | bytes, b'' included                                     |
| FLOAT                         | the shortest text naming the float32 (1.1), as SELECT   |
| negative TIME(n) with a       | the stored value: -01:00:00.000001 (see :func:`time2`)  |
| fraction                      |                                                         |

TIMESTAMP values are naive datetimes in UTC.
"""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal
from typing import Any

import numpy as np
from pymysqlreplication.json_binary import parse_json

from drc.core.errors import UnsupportedColumnError
from drc.core.values import Bit, ZeroDate
from drc.replicator.binlog.columns import (
    R_BIT,
    R_BYTES,
    R_DATE,
    R_DATETIME,
    R_DATETIME2,
    R_DECIMAL,
    R_ENUM,
    R_ENUM_NAMELESS,
    R_FLOAT,
    R_INT24,
    R_JSON,
    R_NO_CODEC,
    R_NUMBER,
    R_PADDED,
    R_TEXT,
    R_TIME,
    R_TIME2,
    R_TIMESTAMP,
    R_TIMESTAMP2,
    R_UINT24,
    R_YEAR,
    ColumnSpec,
    DecimalLayout,
)

EPOCH = dt.datetime(1970, 1, 1)
_FLOAT = struct.Struct("<f").unpack_from
_INT32_BE = struct.Struct(">i").unpack_from
_UINT32 = struct.Struct("<I").unpack_from
_UINT64 = struct.Struct("<Q").unpack_from


def read_value(spec: ColumnSpec, data: bytes, pos: int) -> tuple[Any, int]:
    """The value of column ``spec`` at ``pos`` and the position after it (never NULL: the
    row's null bitmap says that). One flat dispatch, the usual kinds first."""
    kind = spec.kind
    if kind == R_NUMBER:
        assert spec.unpack is not None
        return spec.unpack(data, pos)[0], pos + spec.size
    if R_TEXT <= kind <= R_JSON:
        return read_prefixed(spec, data, pos)
    if kind == R_DECIMAL:
        assert spec.decimal is not None
        return read_decimal(spec.decimal, data, pos)
    if kind == R_DATETIME2:
        return datetime2(data, pos, spec.fsp, spec.size), pos + 5 + spec.size
    if kind == R_TIMESTAMP2:
        return timestamp2(data, pos, spec.fsp, spec.size), pos + 4 + spec.size
    if kind == R_INT24 or kind == R_UINT24:
        end = pos + 3
        return int.from_bytes(data[pos:end], "little", signed=kind == R_INT24), end
    if kind == R_FLOAT:
        return float32_text(_FLOAT(data, pos)[0]), pos + 4
    if kind == R_DATE:
        return date(data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16), pos + 3
    if kind == R_TIME2:
        end = pos + spec.size
        return time2(data[pos:end], spec.size - 3, spec.unit), end
    if R_ENUM <= kind <= R_BIT:
        return _read_member(spec, data, pos)
    if kind == R_YEAR:
        raw = data[pos]
        return (0 if raw == 0 else 1900 + raw), pos + 1
    if kind == R_TIME:
        return time_v1(data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16), pos + 3
    if kind == R_DATETIME:
        return datetime_v1(_UINT64(data, pos)[0]), pos + 8
    if kind == R_TIMESTAMP:
        return timestamp_v1(_UINT32(data, pos)[0]), pos + 4
    raise UnsupportedColumnError(spec.problem)


def read_prefixed(spec: ColumnSpec, data: bytes, pos: int) -> tuple[Any, int]:
    """A string, BLOB, GEOMETRY or JSON value: its length (``spec.size`` bytes), its bytes."""
    size = spec.size
    if size == 1:
        start = pos + 1
        end = start + data[pos]
    else:
        start = pos + size
        end = start + int.from_bytes(data[pos:start], "little")
    raw = data[start:end]
    kind = spec.kind
    if kind == R_TEXT:
        return raw.decode(spec.encoding), end
    if kind == R_BYTES:
        return raw, end
    if kind == R_PADDED:
        return raw.ljust(spec.pad, b"\0"), end
    if kind == R_NO_CODEC:
        return (raw if raw else ""), end  # as CPython decodes b'' without looking the codec up
    return (parse_json(raw[0], raw[1:]) if raw else None), end  # R_JSON; empty is None


def float32_text(value: float) -> float:
    """A FLOAT as SELECT shows it: the shortest decimal naming the float32 (1.1, not
    1.100000023841858), as a float."""
    return float(str(np.float32(value)))


def read_decimal(layout: DecimalLayout, data: bytes, pos: int) -> tuple[Decimal, int]:
    """A packed DECIMAL (drc.replicator.binlog.columns.DecimalLayout)."""
    sign, whole, fraction, end = decimal_parts(layout, data, pos)
    return Decimal(layout.text.format(sign, whole, fraction)), end


def decimal_parts(layout: DecimalLayout, data: bytes, pos: int) -> tuple[str, int, int, int]:
    """A packed DECIMAL's sign ('' or '-'), integer part, fraction digits (an int of
    ``layout`` decimals) and the position after it."""
    end = pos + layout.size
    value = int.from_bytes(data[pos:end], "big")
    sign = "" if value & layout.top else "-"
    value ^= layout.top if sign == "" else layout.invert
    whole = fraction = 0
    for shift, mask, scale in layout.whole:
        group = value >> shift & mask
        if group >= scale:
            raise ValueError(f"DECIMAL digit group {group} out of range")
        whole = whole * scale + group
    for shift, mask, scale in layout.fraction:
        group = value >> shift & mask
        if group >= scale:
            raise ValueError(f"DECIMAL digit group {group} out of range")
        fraction = fraction * scale + group
    return sign, whole, fraction, end


def _read_member(spec: ColumnSpec, data: bytes, pos: int) -> tuple[Any, int]:
    end = pos + spec.size
    kind = spec.kind
    if kind == R_BIT:
        return Bit(int.from_bytes(data[pos:end], "big"), spec.width), end
    index = int.from_bytes(data[pos:end], "little")
    if kind == R_ENUM:
        return spec.members[index], end
    if kind == R_ENUM_NAMELESS:
        return None, end
    return frozenset(m for i, m in enumerate(spec.members) if index >> i & 1), end  # R_SET


# --- temporal types ---------------------------------------------------------------------------


def date(raw: int) -> dt.date | ZeroDate:
    """3 bytes: 15 bits year, 4 month, 5 day."""
    year, month, day = raw >> 9, (raw >> 5) & 15, raw & 31
    try:
        return dt.date(year, month, day)
    except ValueError:
        return ZeroDate(f"{year:04d}-{month:02d}-{day:02d}")


def datetime_or_zero(
    y: int, mo: int, d: int, h: int, mi: int, s: int, us: int, fsp: int
) -> dt.datetime | ZeroDate:
    try:
        return dt.datetime(y, mo, d, h, mi, s, us)
    except ValueError:
        return ZeroDate(
            f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{s:02d}{fraction_text(us, fsp)}"
        )


def fraction_text(micro: int, fsp: int) -> str:
    return f".{micro:06d}"[: fsp + 1] if fsp else ""


def micros(data: bytes, pos: int, fsp: int, size: int) -> int:
    """Fractional seconds of DATETIME2/TIMESTAMP2: ``size`` bytes, big-endian and signed (as
    the library reads them), an odd fsp stored with one more digit."""
    if not size:
        return 0
    value = int.from_bytes(data[pos : pos + size], "big", signed=True)
    if fsp % 2:
        value = int(value / 10)
    return value * 10 ** (6 - fsp)


def datetime2(data: bytes, pos: int, fsp: int, size: int) -> dt.datetime | ZeroDate:
    """5 bytes: 1 sign bit, 17 bits year*13+month, 5 day, 5 hour, 6 minute, 6 second; then the
    fraction."""
    raw = int.from_bytes(data[pos : pos + 5], "big")
    year_month = raw >> 22 & 0x1FFFF
    micro = micros(data, pos + 5, fsp, size) if size else 0
    try:
        return dt.datetime(
            year_month // 13, year_month % 13, raw >> 17 & 31, raw >> 12 & 31, raw >> 6 & 63,
            raw & 63, micro,
        )  # fmt: skip
    except ValueError:
        return datetime_or_zero(
            year_month // 13, year_month % 13, raw >> 17 & 31, raw >> 12 & 31, raw >> 6 & 63,
            raw & 63, micro, fsp,
        )  # fmt: skip


def timestamp2(data: bytes, pos: int, fsp: int, size: int) -> dt.datetime | ZeroDate:
    """4 bytes of seconds since the epoch, big-endian, then the fraction."""
    seconds, micro = _INT32_BE(data, pos)[0], micros(data, pos + 4, fsp, size)
    if seconds == 0 and micro == 0:
        return ZeroDate("0000-00-00 00:00:00" + fraction_text(0, fsp))
    return EPOCH + dt.timedelta(seconds=seconds, microseconds=micro)


def time2(raw: bytes, frac_bytes: int, unit: int) -> dt.timedelta:
    """A TIME2 value from its 3 + ``frac_bytes`` stored bytes (MySQL's my_time_packed_from_binary).

    The bytes are ONE big-endian number offset by 0x800000 << (8 * frac_bytes): the integer part
    (1 sign bit, 1 unused, 10 bits hour, 6 minute, 6 second) then the fraction, negative values in
    two's complement over the whole width. Decoding the two parts separately (as
    python-mysql-replication does) turns -01:00:00.000001 into -01:00:00.999999.
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


def time_v1(raw: int) -> dt.timedelta:
    """The old TIME: HHMMSS as a decimal number in 3 bytes."""
    return dt.timedelta(
        hours=int(raw / 10000), minutes=int((raw % 10000) / 100), seconds=int(raw % 100)
    )


def timestamp_v1(seconds: int) -> dt.datetime | ZeroDate:
    """The old TIMESTAMP: seconds since the epoch, 0 for the zero timestamp."""
    if seconds == 0:
        return ZeroDate("0000-00-00 00:00:00")
    return EPOCH + dt.timedelta(seconds=seconds)


def datetime_v1(raw: int) -> dt.datetime | ZeroDate:
    """The old DATETIME: YYYYMMDDHHMMSS as a decimal number in 8 bytes."""
    day, time = divmod(raw, 1_000_000)
    return datetime_or_zero(
        day // 10000, (day // 100) % 100, day % 100, time // 10000, (time // 100) % 100,
        time % 100, 0, 0,
    )  # fmt: skip
