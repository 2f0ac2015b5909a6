"""How each column of a table is read from a row image: one :class:`ColumnSpec` per column.

A TABLE_MAP event describes a table's columns (type code and type metadata: lengths, fsp,
precision, charset, ENUM/SET members); python-mysql-replication parses it into ``Column``
objects. :func:`layout_of` turns those, once per distinct TABLE_MAP, into a frozen
:class:`RowLayout`: for every column the way its bytes are read (``kind``, one of the read
kinds below, not MySQL's type code) and the few numbers that reading needs. The row decoder
(drc.replicator.binlog.rows) then works from the layout alone.

Only public attributes of the library's ``Column`` are read (``type``, ``name``, ``unsigned``,
``max_length``, ``length_size``, ``fsp``, ``precision``, ``decimals``, ``bits``, ``bytes``,
``size``, ``enum_values``, ``set_values``, ``character_set_name``); the contract test
(tests/unit/test_binlog_contract.py) checks they are there.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pymysql.charset import charset_by_name

# MySQL's column type codes, as a TABLE_MAP event carries them (include/field_types.h).
DECIMAL, TINY, SHORT, LONG, FLOAT, DOUBLE, NULL, TIMESTAMP, LONGLONG, INT24 = range(10)
DATE, TIME, DATETIME, YEAR, NEWDATE, VARCHAR, BIT, TIMESTAMP2, DATETIME2, TIME2 = range(10, 20)
JSON, NEWDECIMAL, ENUM, SET = 245, 246, 247, 248
TINY_BLOB, MEDIUM_BLOB, LONG_BLOB, BLOB, VAR_STRING, STRING, GEOMETRY = range(249, 256)

# Read kinds: how a value's bytes become its Python value (drc.replicator.binlog.values).
R_NUMBER = 1  # fixed-size little-endian number through ``unpack`` (TINYINT .. BIGINT, DOUBLE)
R_INT24 = 2  # MEDIUMINT
R_UINT24 = 3  # MEDIUMINT UNSIGNED
R_FLOAT = 4  # FLOAT: the shortest text naming the single, as SELECT shows it
R_YEAR = 5
R_DECIMAL = 6
R_TEXT = 7  # length-prefixed, decoded with ``encoding``
R_BYTES = 8  # length-prefixed bytes (binary strings, BLOB, GEOMETRY)
R_PADDED = 9  # BINARY(n): length-prefixed, padded back to ``pad`` bytes with 0x00
R_NO_CODEC = 10  # a charset Python has no codec for: bytes, but b'' reads as ''
R_JSON = 11  # MySQL's binary JSON
R_ENUM = 12
R_ENUM_NAMELESS = 13  # an ENUM without member names: None
R_SET = 14
R_BIT = 15
R_DATE = 16
R_DATETIME2 = 17
R_TIMESTAMP2 = 18
R_TIME2 = 19
R_TIME = 20  # the old TIME format
R_DATETIME = 21  # the old DATETIME format
R_TIMESTAMP = 22  # the old TIMESTAMP format
R_UNSUPPORTED = 23  # reading a value raises UnsupportedColumnError (``problem``)

_NUMBERS = {
    TINY: ("<b", "<B"),
    SHORT: ("<h", "<H"),
    LONG: ("<i", "<I"),
    LONGLONG: ("<q", "<Q"),
    DOUBLE: ("<d", "<d"),
}
_DIGITS_TO_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
# TIME2 fraction bytes and microseconds per stored fraction unit, by fsp (MySQL's TIMEF format).
_TIME2_FRACTION = {1: (1, 10_000), 2: (1, 10_000), 3: (2, 100), 4: (2, 100), 5: (3, 1), 6: (3, 1)}


@dataclass(frozen=True, slots=True)
class DecimalLayout:
    """MySQL's packed DECIMAL(precision, decimals): big-endian groups of 9 digits in 4 bytes
    (a shorter group first for the integer part, last for the fraction), the sign in the top
    bit, negative values with every bit inverted. ``whole`` and ``fraction`` are (shift, mask,
    10**digits) per group of the integer part and of the fraction, most significant first."""

    size: int
    whole: tuple[tuple[int, int, int], ...]
    fraction: tuple[tuple[int, int, int], ...]
    top: int  # the sign bit
    invert: int  # every bit but the sign
    text: str  # format of sign, integer part and fraction
    scale: int = 0  # the number of decimals


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """How one column's value is read: ``kind`` and what that kind needs."""

    name: str
    kind: int
    size: int = 0  # fixed size in bytes; for length-prefixed kinds the prefix's size
    fsp: int = 0  # fractional seconds digits (temporal kinds)
    unit: int = 0  # TIME2: microseconds per stored fraction unit
    width: int = 0  # BIT(width)
    pad: int = 0  # R_PADDED: the column's length in bytes
    encoding: str = ""  # R_TEXT: Python codec
    members: tuple[str, ...] = ()  # ENUM (index 0 is '') or SET members
    unpack: Callable[[bytes, int], tuple[Any, ...]] | None = None  # R_NUMBER
    decimal: DecimalLayout | None = None
    problem: str = ""  # R_UNSUPPORTED: the error's message


@dataclass(frozen=True, slots=True)
class RowLayout:
    """Every column of a table as one TABLE_MAP event describes it, in column order."""

    schema: str
    table: str
    columns: tuple[ColumnSpec, ...]
    full: bytes  # the columns-present bitmap of a FULL row image: exactly n bits set
    null_bytes: int  # length of a FULL image's null bitmap
    null_mask: int  # its bits that are columns (MariaDB sets the unused high bits)


def layout_of(schema: str, table: str, columns: Sequence[Any]) -> RowLayout:
    """The layout of a table from the library's TABLE_MAP ``Column`` objects."""
    count = len(columns)
    return RowLayout(
        schema,
        table,
        tuple(spec_of(column, schema, table) for column in columns),
        full_bitmap(count),
        (count + 7) // 8,
        (1 << count) - 1,
    )


def full_bitmap(count: int) -> bytes:
    """The columns-present bitmap of a FULL image of ``count`` columns."""
    return ((1 << count) - 1).to_bytes((count + 7) // 8, "little")


def spec_of(column: Any, schema: str = "", table: str = "") -> ColumnSpec:
    """How to read one column (``schema``, ``table``: for the message of a type DRC lacks)."""
    name, kind = column.name, column.type
    if kind in _NUMBERS:
        fmt = _NUMBERS[kind][1 if column.unsigned else 0]
        return ColumnSpec(
            name, R_NUMBER, struct.calcsize(fmt), unpack=struct.Struct(fmt).unpack_from
        )
    if kind in (VARCHAR, STRING):
        prefix = 2 if column.max_length > 255 else 1
        pad = column.max_length if kind == STRING else 0
        return _sized(_text(name, prefix, column, pad), column, schema, table)
    if kind == BLOB:
        return _sized(_text(name, column.length_size, column), column, schema, table)
    if kind == GEOMETRY:
        return _sized(ColumnSpec(name, R_BYTES, column.length_size), column, schema, table)
    if kind == JSON:
        return _sized(ColumnSpec(name, R_JSON, column.length_size), column, schema, table)
    if kind == NEWDECIMAL:
        layout = decimal_layout(column.precision, column.decimals)
        if layout is not None:
            return ColumnSpec(name, R_DECIMAL, layout.size, decimal=layout)
    elif kind in (ENUM, SET):
        return _members(name, column, schema, table)
    elif kind == INT24:
        return ColumnSpec(name, R_UINT24 if column.unsigned else R_INT24, 3)
    elif kind in _SIMPLE:
        return ColumnSpec(name, *_SIMPLE[kind])
    elif kind in (DATETIME2, TIMESTAMP2):
        fsp = column.fsp
        return ColumnSpec(name, _TEMPORAL[kind], fsp=fsp, size=fraction_bytes(fsp))
    elif kind == TIME2:
        frac_bytes, unit = time2_layout(column.fsp)
        return ColumnSpec(name, R_TIME2, 3 + frac_bytes, fsp=column.fsp, unit=unit)
    elif kind == BIT:
        return ColumnSpec(name, R_BIT, column.bytes, width=column.bits)
    return unsupported(name, kind, schema, table)


_SIMPLE = {
    FLOAT: (R_FLOAT, 4),
    YEAR: (R_YEAR, 1),
    DATE: (R_DATE, 3),
    TIME: (R_TIME, 3),
    DATETIME: (R_DATETIME, 8),
    TIMESTAMP: (R_TIMESTAMP, 4),
}
_TEMPORAL = {DATETIME2: R_DATETIME2, TIMESTAMP2: R_TIMESTAMP2}


def unsupported(name: str, kind: int, schema: str, table: str) -> ColumnSpec:
    return ColumnSpec(
        name,
        R_UNSUPPORTED,
        problem=(
            f"column {name!r} of {schema}.{table} has binlog type {kind}, which DRC cannot "
            "decode exactly; exclude the table from capture or change the column type"
        ),
    )


def _text(name: str, prefix: int, column: Any, pad: int = 0) -> ColumnSpec:
    """A string or BLOB: how its bytes become a value depends on the charset."""
    charset = column.character_set_name
    if charset is None:  # no charset in the metadata: UTF-8, as the library decodes it
        return ColumnSpec(name, R_TEXT, prefix, encoding="utf-8")
    if charset == "binary":
        return ColumnSpec(name, R_PADDED if pad else R_BYTES, prefix, pad=pad)
    encoding = text_encoding(charset)
    if encoding is None:
        return ColumnSpec(name, R_NO_CODEC, prefix)
    return ColumnSpec(name, R_TEXT, prefix, encoding=encoding)


def text_encoding(charset: str) -> str | None:
    """The Python codec of a MySQL charset name, or None if Python has none."""
    known = charset_by_name(charset)
    encoding = known.encoding if known else charset
    try:
        b"a".decode(encoding, "ignore")
    except LookupError:
        return None
    return encoding


def _sized(spec: ColumnSpec, column: Any, schema: str, table: str) -> ColumnSpec:
    if spec.size in (1, 2, 3, 4):
        return spec
    return unsupported(spec.name, column.type, schema, table)


def _members(name: str, column: Any, schema: str, table: str) -> ColumnSpec:
    size = column.size  # 1 or 2 for an ENUM, 1..4 or 8 for a SET: a little-endian number
    if not 1 <= size <= 8:
        return unsupported(name, column.type, schema, table)
    if column.type == SET:
        return ColumnSpec(name, R_SET, size, members=tuple(column.set_values or ()))
    members = column.enum_values
    if not members:
        return ColumnSpec(name, R_ENUM_NAMELESS, size)
    return ColumnSpec(name, R_ENUM, size, members=tuple(members))


def fraction_bytes(fsp: int) -> int:
    """Bytes of the fractional seconds of DATETIME2/TIMESTAMP2(fsp)."""
    return (fsp + 1) // 2 if 1 <= fsp <= 6 else 0


def time2_layout(fsp: int) -> tuple[int, int]:
    """(fraction bytes, microseconds per fraction unit) of a TIME(fsp) value; (0, 0) for fsp 0."""
    return _TIME2_FRACTION.get(fsp, (0, 0))


def decimal_layout(precision: int, decimals: int) -> DecimalLayout | None:
    """The packed layout of DECIMAL(precision, decimals), None for impossible metadata."""
    if not 0 <= decimals <= precision:
        return None
    int_groups = _decimal_groups(precision - decimals, leading_partial=True)
    frac_groups = _decimal_groups(decimals, leading_partial=False)
    size = sum(size for size, _ in int_groups + frac_groups)
    fields, shift = [], 8 * size
    for group_size, digits in int_groups + frac_groups:
        shift -= 8 * group_size
        fields.append((shift, (1 << 8 * group_size) - 1, 10**digits))
    top = 1 << (8 * size - 1)
    return DecimalLayout(
        size=size,
        whole=tuple(fields[: len(int_groups)]),
        fraction=tuple(fields[len(int_groups) :]),
        top=top,
        invert=((1 << 8 * size) - 1) ^ top,
        text=f"{{}}{{}}.{{:0{decimals}d}}" if decimals else "{}{}",
        scale=decimals,
    )


def _decimal_groups(digits: int, leading_partial: bool) -> list[tuple[int, int]]:
    """(bytes, digits) of each group, most significant first: 9 digits per 4 bytes."""
    full, rest = divmod(digits, 9)
    partial = [(_DIGITS_TO_BYTES[rest], rest)] if rest else []
    return partial + [(4, 9)] * full if leading_partial else [(4, 9)] * full + partial
