"""Row images decoded by a per-table plan: the fast path of binlog row decoding.

python-mysql-replication decodes each value through a long if/elif chain with bitmap lookups, a
packet wrapper and several calls per byte read; on capture that per-value overhead dominates.
Here each TABLE_MAP's columns are compiled once into a *plan*, one reader per column, cached on
the library's Table object (``_drc_plan``; ``Table.data`` ignores names starting with '_', and
tablemap_cache shares one Table across identical TABLE_MAPs, so a plan lives as long as the
schema). A reader is a pure decoder ``read(data, pos) -> (value, next_pos)`` over the event's
bytes, returning exactly what decoding.py's per-value override returns (the reference):

    row image:  [null bitmap, (n+7)//8 bytes][value of column 0][value of column 1]...
                 bit i set = column i is NULL (with a FULL image bit i is column i)

The fast path reads straight from the pymysql packet under the library's BinLogPacketWrapper
and commits the position (packet cursor and wrapper ``read_bytes``) only after the whole row
decoded, so a row can always be handed to the original method from where it started.

Fallback rule: the original ``_read_column_data`` (through decoding.py's per-value override)
decodes the row when
  - the table has no plan: a column without a name or of a type not compiled here (it raises
    UnsupportedColumnError naming table and column, as before),
  - the image is not FULL (the columns-present bitmap is not exactly n set bits),
  - the event is a PARTIAL_UPDATE_ROWS_EVENT (MySQL's partial JSON),
  - the wrapper holds unread-back bytes, or the packet data is not ``bytes``,
  - any reader raises or the row runs past the packet: the original then gives the
    library's own value or error for the same bytes.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from operator import methodcaller
from typing import Any

import numpy as np
from pymysqlreplication.constants import BINLOG, FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.json_binary import parse_json
from pymysqlreplication.row_event import RowsEvent

from drc.core.values import Bit, ZeroDate
from drc.replicator.decoding import (
    _EPOCH,
    _datetime_or_zero,
    _fraction_text,
    time2,
    time2_layout,
)

Reader = Callable[[bytes, int], tuple[Any, int]]

_ORIGINAL = RowsEvent._read_column_data
_PLAN = "_drc_plan"
_MISSING = object()


@dataclass(frozen=True, slots=True)
class Plan:
    """How to decode one FULL row image of a table; built once per TABLE_MAP schema."""

    steps: tuple[tuple[str, Reader], ...]  # (column name, reader) in column order
    present: bytes  # the columns-present bitmap of a FULL image: exactly n bits set
    null_bytes: int
    null_mask: int  # MariaDB sets the null bitmap's unused high bits
    ignore_decode_errors: bool


# --- fixed-size numbers ---------------------------------------------------------------------


def _struct_reader(fmt: str) -> Reader:
    unpack_from = struct.Struct(fmt).unpack_from
    size = struct.calcsize(fmt)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return unpack_from(data, pos)[0], pos + size

    return read


def _int_reader(size: int, signed: bool) -> Reader:
    """Little-endian integers without a struct code (MEDIUMINT's 3 bytes)."""

    def read(data: bytes, pos: int) -> tuple[int, int]:
        end = pos + size
        return int.from_bytes(data[pos:end], "little", signed=signed), end

    return read


_INTS = {
    FIELD_TYPE.TINY: ("<b", "<B"),
    FIELD_TYPE.SHORT: ("<h", "<H"),
    FIELD_TYPE.LONG: ("<i", "<I"),
    FIELD_TYPE.LONGLONG: ("<q", "<Q"),
}
_unpack_f = struct.Struct("<f").unpack_from


def _read_float(data: bytes, pos: int) -> tuple[float, int]:
    # Same float32 -> shortest text -> float as decoding.py: FLOAT reads back as SELECT shows it.
    return float(str(np.float32(_unpack_f(data, pos)[0]))), pos + 4


def _read_year(data: bytes, pos: int) -> tuple[int, int]:
    raw = data[pos]
    return (0 if raw == 0 else 1900 + raw), pos + 1


# --- NEWDECIMAL -----------------------------------------------------------------------------

_DIGITS_TO_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def _decimal_groups(digits: int, leading_partial: bool) -> list[tuple[int, int]]:
    """(bytes, digits) of each group, most significant first: 9 digits per 4 bytes."""
    full, rest = divmod(digits, 9)
    partial = [(_DIGITS_TO_BYTES[rest], rest)] if rest else []
    return partial + [(4, 9)] * full if leading_partial else [(4, 9)] * full + partial


def _decimal_fields(groups: list[tuple[int, int]], low_bits: int) -> tuple[tuple[int, ...], ...]:
    """(shift, mask, 10**digits) per group, for a value whose lowest ``low_bits`` follow."""
    fields, shift = [], low_bits + 8 * sum(size for size, _ in groups)
    for size, digits in groups:
        shift -= 8 * size
        fields.append((shift, (1 << 8 * size) - 1, 10**digits))
    return tuple(fields)


def _decimal_reader(precision: int, decimals: int) -> Reader | None:
    """MySQL's packed decimal: big-endian digit groups, sign in the top bit, negatives inverted.

    A group out of its decimal range means bytes the library would turn into a different
    (malformed) number; raising sends the row to the fallback, which then decides.
    """
    if not 0 <= decimals <= precision:
        return None
    int_groups = _decimal_groups(precision - decimals, leading_partial=True)
    frac_groups = _decimal_groups(decimals, leading_partial=False)
    frac_bits = 8 * sum(size for size, _ in frac_groups)
    size = sum(size for size, _ in int_groups) + frac_bits // 8
    int_fields = _decimal_fields(int_groups, frac_bits)
    frac_fields = _decimal_fields(frac_groups, 0)
    top = 1 << (8 * size - 1)
    invert = ((1 << 8 * size) - 1) ^ top  # every bit but the sign
    text = f"{{}}{{}}.{{:0{decimals}d}}" if decimals else "{}{}"

    def read(data: bytes, pos: int) -> tuple[Decimal, int]:
        end = pos + size
        value = int.from_bytes(data[pos:end], "big")
        sign = "" if value & top else "-"
        value ^= top if sign == "" else invert
        number = fraction = 0
        for shift, mask, scale in int_fields:
            group = value >> shift & mask
            if group >= scale:
                raise ValueError("decimal group out of range")
            number = number * scale + group
        for shift, mask, scale in frac_fields:
            group = value >> shift & mask
            if group >= scale:
                raise ValueError("decimal group out of range")
            fraction = fraction * scale + group
        return Decimal(text.format(sign, number, fraction)), end

    return read


# --- strings and other length-prefixed values -----------------------------------------------


def _prefixed_reader(prefix: int, convert: Callable[[bytes], Any] | None) -> Reader | None:
    """A value stored as a little-endian length of ``prefix`` bytes, then the bytes."""
    if prefix == 1:

        def read(data: bytes, pos: int) -> tuple[Any, int]:
            end = pos + 1 + data[pos]
            raw = data[pos + 1 : end]
            return (raw if convert is None else convert(raw)), end

        return read
    if prefix not in (2, 3, 4):
        return None

    def read_long(data: bytes, pos: int) -> tuple[Any, int]:
        start = pos + prefix
        end = start + int.from_bytes(data[pos:start], "little")
        raw = data[start:end]
        return (raw if convert is None else convert(raw)), end

    return read_long


def _bytes_or_empty_text(raw: bytes) -> bytes | str:
    # A charset Python has no codec for: the library keeps the bytes on LookupError, but CPython
    # decodes b'' to '' without looking the codec up.
    return raw if raw else ""


def _text_convert(column: Any, errors: str, pad_binary: bool) -> Callable[[bytes], Any] | None:
    """bytes -> value as the library's __read_string plus decoding.py's binary fix-ups."""
    name = getattr(column, "character_set_name", None)
    if name is None:
        return methodcaller("decode", "utf-8", errors)
    if name == "binary":
        return methodcaller("ljust", column.max_length, b"\0") if pad_binary else None
    encoding = RowsEvent.charset_to_encoding(name)
    try:
        b"a".decode(encoding, "ignore")  # the lookup the library makes for every value
    except LookupError:
        return _bytes_or_empty_text
    return methodcaller("decode", encoding, errors)


def _string_reader(column: Any, errors: str) -> Reader | None:
    prefix = 2 if column.max_length > 255 else 1
    pad = column.type == FIELD_TYPE.STRING  # BINARY(n) is stored without its trailing 0x00 pad
    return _prefixed_reader(prefix, _text_convert(column, errors, pad))


def _blob_reader(column: Any, errors: str) -> Reader | None:
    return _prefixed_reader(column.length_size, _text_convert(column, errors, pad_binary=False))


def _json_reader(column: Any) -> Reader | None:
    def parse(raw: bytes) -> Any:  # MySQL binary JSON; an empty value is the library's None
        return parse_json(raw[0], raw[1:]) if raw else None

    return _prefixed_reader(column.length_size, parse)


# --- ENUM, SET, BIT -------------------------------------------------------------------------


def _enum_reader(column: Any) -> Reader | None:
    members, size = column.enum_values, column.size
    if size not in (1, 2):
        return None
    if not members:
        return _skip_reader(size)

    def read(data: bytes, pos: int) -> tuple[str, int]:
        end = pos + size
        return members[int.from_bytes(data[pos:end], "little")], end

    return read


def _skip_reader(size: int) -> Reader:
    """An ENUM without member names: the library reads its index and returns None."""

    def read(data: bytes, pos: int) -> tuple[None, int]:
        return None, pos + size

    return read


def _set_reader(column: Any) -> Reader | None:
    size = column.size
    if not 1 <= size <= 8:
        return None
    members = tuple((1 << i, value) for i, value in enumerate(column.set_values or ()))

    def read(data: bytes, pos: int) -> tuple[frozenset[str], int]:
        end = pos + size
        mask = int.from_bytes(data[pos:end], "little")
        return frozenset(value for bit, value in members if mask & bit), end

    return read


def _bit_reader(column: Any) -> Reader:
    size, width = column.bytes, column.bits

    def read(data: bytes, pos: int) -> tuple[Bit, int]:
        end = pos + size
        return Bit(int.from_bytes(data[pos:end], "big"), width), end

    return read


# --- temporal types -------------------------------------------------------------------------


def _fsp_reader(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """(bytes, micro(data, pos)): the library's __read_fsp, signed big-endian like it."""
    size = (fsp + 1) // 2 if 1 <= fsp <= 6 else 0
    odd, scale = fsp % 2 == 1, 10 ** (6 - fsp) if size else 0

    def micro(data: bytes, pos: int) -> int:
        if not size:
            return 0
        value = int.from_bytes(data[pos : pos + size], "big", signed=True)
        if odd:
            value = int(value / 10)
        return value * scale

    return size, micro


def _read_date(data: bytes, pos: int) -> tuple[Any, int]:
    raw = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
    year, month, day = raw >> 9, (raw >> 5) & 15, raw & 31
    try:
        return dt.date(year, month, day), pos + 3
    except ValueError:
        return ZeroDate(f"{year:04d}-{month:02d}-{day:02d}"), pos + 3


def _datetime2_reader(fsp: int) -> Reader:
    """5 bytes: 1 sign bit, 17 bits year*13+month, 5 day, 5 hour, 6 minute, 6 second."""
    size, micro = _fsp_reader(fsp)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        raw = int.from_bytes(data[pos : pos + 5], "big")
        year_month = raw >> 22 & 0x1FFFF
        value = _datetime_or_zero(
            year_month // 13, year_month % 13, raw >> 17 & 31, raw >> 12 & 31, raw >> 6 & 63,
            raw & 63, micro(data, pos + 5), fsp,
        )  # fmt: skip
        return value, pos + 5 + size

    return read


def _timestamp2_reader(fsp: int) -> Reader:
    size, micro = _fsp_reader(fsp)
    zero = ZeroDate("0000-00-00 00:00:00" + _fraction_text(0, fsp))
    unpack_from = struct.Struct(">i").unpack_from

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        seconds, micros = unpack_from(data, pos)[0], micro(data, pos + 4)
        if seconds == 0 and micros == 0:
            return zero, pos + 4 + size
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=micros), pos + 4 + size

    return read


def _time2_reader(fsp: int) -> Reader:
    """3 + 0..3 bytes, one big-endian number: decoding.time2, the reference's own decoder."""
    frac_bytes, unit = time2_layout(fsp)
    size = 3 + frac_bytes

    def read(data: bytes, pos: int) -> tuple[dt.timedelta, int]:
        end = pos + size  # a short slice is caught after the row, as for every reader
        return time2(data[pos:end], frac_bytes, unit), end

    return read


def _read_time_v1(data: bytes, pos: int) -> tuple[dt.timedelta, int]:
    time = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
    value = dt.timedelta(
        hours=int(time / 10000), minutes=int((time % 10000) / 100), seconds=int(time % 100)
    )
    return value, pos + 3


def _read_datetime_v1(data: bytes, pos: int) -> tuple[Any, int]:
    date, time = divmod(struct.unpack_from("<Q", data, pos)[0], 1_000_000)
    value = _datetime_or_zero(
        date // 10000, (date // 100) % 100, date % 100, time // 10000, (time // 100) % 100,
        time % 100, 0, 0,
    )  # fmt: skip
    return value, pos + 8


def _read_timestamp_v1(data: bytes, pos: int) -> tuple[Any, int]:
    seconds = struct.unpack_from("<I", data, pos)[0]
    if seconds == 0:
        return ZeroDate("0000-00-00 00:00:00"), pos + 4
    return _EPOCH + dt.timedelta(seconds=seconds), pos + 4


# --- plans ----------------------------------------------------------------------------------


_FACTORIES: dict[int, Callable[[Any, str], Reader | None]] = {
    FIELD_TYPE.INT24: lambda c, _: _int_reader(3, signed=not c.unsigned),
    FIELD_TYPE.FLOAT: lambda c, _: _read_float,
    FIELD_TYPE.DOUBLE: lambda c, _: _struct_reader("<d"),
    FIELD_TYPE.YEAR: lambda c, _: _read_year,
    FIELD_TYPE.NEWDECIMAL: lambda c, _: _decimal_reader(c.precision, c.decimals),
    FIELD_TYPE.VARCHAR: _string_reader,
    FIELD_TYPE.STRING: _string_reader,
    FIELD_TYPE.BLOB: _blob_reader,
    FIELD_TYPE.GEOMETRY: lambda c, _: _prefixed_reader(c.length_size, None),
    FIELD_TYPE.JSON: lambda c, _: _json_reader(c),
    FIELD_TYPE.ENUM: lambda c, _: _enum_reader(c),
    FIELD_TYPE.SET: lambda c, _: _set_reader(c),
    FIELD_TYPE.BIT: lambda c, _: _bit_reader(c),
    FIELD_TYPE.DATE: lambda c, _: _read_date,
    FIELD_TYPE.DATETIME2: lambda c, _: _datetime2_reader(c.fsp),
    FIELD_TYPE.TIMESTAMP2: lambda c, _: _timestamp2_reader(c.fsp),
    FIELD_TYPE.TIME2: lambda c, _: _time2_reader(c.fsp),
    FIELD_TYPE.TIME: lambda c, _: _read_time_v1,
    FIELD_TYPE.DATETIME: lambda c, _: _read_datetime_v1,
    FIELD_TYPE.TIMESTAMP: lambda c, _: _read_timestamp_v1,
}


def reader_for(column: Any, errors: str = "strict") -> Reader | None:
    """The reader for one column, or None when only the original method knows the type."""
    if column.type in _INTS:
        return _struct_reader(_INTS[column.type][1 if column.unsigned else 0])
    build = _FACTORIES.get(column.type)
    return build(column, errors) if build is not None else None


def full_bitmap(count: int) -> bytes:
    """The columns-present bitmap of a FULL image of ``count`` columns."""
    return ((1 << count) - 1).to_bytes((count + 7) // 8, "little")


def build_plan(columns: Sequence[Any], ignore_decode_errors: bool = False) -> Plan | None:
    """The table's plan, or None if any column needs the original method."""
    errors = "ignore" if ignore_decode_errors else "strict"
    steps = []
    for column in columns:
        reader = reader_for(column, errors) if column.name else None
        if reader is None:
            return None
        steps.append((column.name, reader))
    count = len(columns)
    return Plan(
        steps=tuple(steps),
        present=full_bitmap(count),
        null_bytes=(count + 7) // 8,
        null_mask=(1 << count) - 1,
        ignore_decode_errors=ignore_decode_errors,
    )


def decode_row(plan: Plan, data: bytes, pos: int) -> tuple[dict[str, Any], int, int]:
    """(values, null mask, next position) of the row image at ``pos``."""
    start = pos + plan.null_bytes
    nulls = int.from_bytes(data[pos:start], "little") & plan.null_mask
    pos = start
    values: dict[str, Any] = {}
    if nulls:
        bit = 1
        for name, read in plan.steps:
            if nulls & bit:
                values[name] = None
            else:
                values[name], pos = read(data, pos)
            bit <<= 1
    else:
        for name, read in plan.steps:
            values[name], pos = read(data, pos)
    return values, nulls, pos


# --- the override ---------------------------------------------------------------------------


def plan_of(table: Any, ignore_decode_errors: bool = False) -> Plan | None:
    """The plan of a library Table (built once, kept on it), or None without one."""
    plan = table.__dict__.get(_PLAN, _MISSING)
    if plan is _MISSING or (plan is not None and plan.ignore_decode_errors != ignore_decode_errors):
        plan = table.__dict__[_PLAN] = build_plan(table.columns, ignore_decode_errors)
    return plan  # type: ignore[no-any-return]


def _plan_for(event: Any) -> Plan | None:
    return plan_of(event.table_map[event.table_id], bool(event._ignore_decode_errors))


def _read_column_data(self: Any, cols_bitmap: bytes, row_image_type: Any = None) -> Any:
    plan = _plan_for(self)
    wrapper = self.packet
    if (
        plan is None
        or cols_bitmap != plan.present
        or self.event_type == BINLOG.PARTIAL_UPDATE_ROWS_EVENT
        or wrapper._BinLogPacketWrapper__data_buffer
    ):
        return _ORIGINAL(self, cols_bitmap, row_image_type)
    packet = wrapper.packet
    data, start = packet._data, packet._position
    if type(data) is not bytes:  # slices of anything else would not be the library's bytes
        return _ORIGINAL(self, cols_bitmap, row_image_type)
    try:
        values, nulls, end = decode_row(plan, data, start)
    except Exception:  # the original re-reads the row from ``start`` and has the last word
        return _ORIGINAL(self, cols_bitmap, row_image_type)
    if end > len(data):  # a short slice: the original raises the library's error
        return _ORIGINAL(self, cols_bitmap, row_image_type)
    packet._position = end
    wrapper.read_bytes += end - start
    self.is_partial_json_update = False
    if nulls:
        _record_nulls(self, plan, nulls)
    return values


def _record_nulls(event: Any, plan: Plan, nulls: int) -> None:
    """Keep the library's per-event none_sources as its own decoding would."""
    sources = event._RowsEvent__none_sources
    for i, (name, _) in enumerate(plan.steps):
        if nulls >> i & 1:
            sources[name] = NONE_SOURCE.NULL


def install() -> None:
    """Decode FULL row images through per-table plans (idempotent)."""
    RowsEvent._read_column_data = _read_column_data  # type: ignore[method-assign]


def uninstall() -> None:
    """Back to the library's row loop (with decoding.py's per-value override, if installed)."""
    RowsEvent._read_column_data = _ORIGINAL  # type: ignore[method-assign]
