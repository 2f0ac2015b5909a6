"""PROTOTYPE (issue 26 item 1, docs/compiled.md): a FULL row image's bytes -> the msgpack bytes
of its row map in a record, in one pass, without the row dict or its values.

``pack_full_row(layout, keys, data, pos)`` gives exactly ``value_codec.pack(full_row(...)[0])``
(the bytes drc.core.codec writes for a row image) and the position after the row. The kinds
capture sees most are written straight from the binlog bytes: integers, doubles, UTF-8 text
and binary strings, DATETIME2; every other kind is read as a value (drc.replicator.binlog.values)
and packed by drc.core.value_codec, so its bytes are the codec's by construction. Not wired
into capture: bench/bench_compiled.py measures it against decode + pack, pure and compiled, and
checks the bytes are the same.
"""

from __future__ import annotations

import struct

from drc.core.events import Op
from drc.core.value_codec import encode_value, pack
from drc.mysql.protocol import lenenc_int
from drc.replicator.binlog.columns import (
    R_BYTES,
    R_DATETIME2,
    R_DECIMAL,
    R_NUMBER,
    R_TEXT,
    DecimalLayout,
    RowLayout,
)
from drc.replicator.binlog.values import (
    datetime2,
    decimal_parts,
    micros,
    read_decimal,
    read_prefixed,
    read_value,
)

_FIXINT = tuple(bytes((n,)) for n in range(128))
_NEGFIX = tuple(bytes((256 + n,)) for n in range(-32, 0))  # -32 .. -1
_DOUBLE = struct.Struct(">d").pack
_NIL = b"\xc0"
_UTF8 = frozenset({"utf8", "utf-8", "utf8mb4", "utf8mb3"})
_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_DATETIME_EXT = b"\xc7\x0b\x02"  # ext 8, 11 bytes, type 2 (naive datetime)


def keys_of(layout: RowLayout) -> tuple[bytes, ...]:
    """Each column name as msgpack (once per layout)."""
    return tuple(pack(spec.name) for spec in layout.columns)


def pack_int(value: int) -> bytes:
    """An int as msgpack-python packs it: the shortest form."""
    if value >= 0:
        if value < 128:
            return _FIXINT[value]
        if value < 0x100:
            return b"\xcc" + value.to_bytes(1, "big")
        if value < 0x10000:
            return b"\xcd" + value.to_bytes(2, "big")
        if value < 0x100000000:
            return b"\xce" + value.to_bytes(4, "big")
        return b"\xcf" + value.to_bytes(8, "big")
    if value >= -32:
        return _NEGFIX[value + 32]
    if value >= -0x80:
        return b"\xd0" + value.to_bytes(1, "big", signed=True)
    if value >= -0x8000:
        return b"\xd1" + value.to_bytes(2, "big", signed=True)
    if value >= -0x80000000:
        return b"\xd2" + value.to_bytes(4, "big", signed=True)
    return b"\xd3" + value.to_bytes(8, "big", signed=True)


def str_header(size: int) -> bytes:
    if size < 32:
        return bytes((0xA0 | size,))
    if size < 0x100:
        return b"\xd9" + size.to_bytes(1, "big")
    if size < 0x10000:
        return b"\xda" + size.to_bytes(2, "big")
    return b"\xdb" + size.to_bytes(4, "big")


def bin_header(size: int) -> bytes:
    if size < 0x100:
        return b"\xc4" + size.to_bytes(1, "big")
    if size < 0x10000:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


def map_header(size: int) -> bytes:
    if size < 16:
        return bytes((0x80 | size,))
    if size < 0x10000:
        return b"\xde" + size.to_bytes(2, "big")
    return b"\xdf" + size.to_bytes(4, "big")


def pack_full_row(
    layout: RowLayout, keys: tuple[bytes, ...], data: bytes, pos: int
) -> tuple[bytes, int]:
    """The msgpack map of a FULL image at ``pos`` and the position after it."""
    start = pos + layout.null_bytes
    nulls = int.from_bytes(data[pos:start], "little") & layout.null_mask
    pos = start
    columns = layout.columns
    parts: list[bytes] = [map_header(len(columns))]
    bit = 1
    for i in range(len(columns)):
        spec = columns[i]
        parts.append(keys[i])
        if nulls & bit:
            parts.append(_NIL)
        else:
            kind = spec.kind
            if kind == R_NUMBER:
                assert spec.unpack is not None
                number = spec.unpack(data, pos)[0]
                parts.append(pack_int(number) if type(number) is int else b"\xcb" + _DOUBLE(number))
                pos += spec.size
            elif (kind == R_TEXT and spec.encoding in _UTF8) or kind == R_BYTES:
                size = spec.size
                if size == 1:
                    begin = pos + 1
                    end = begin + data[pos]
                else:
                    begin = pos + size
                    end = begin + int.from_bytes(data[pos:begin], "little")
                raw = data[begin:end]
                if kind == R_BYTES:
                    parts.append(bin_header(len(raw)))
                else:
                    raw.decode("utf-8")  # checked as the codec would: not UTF-8 raises
                    parts.append(str_header(len(raw)))
                parts.append(raw)
                pos = end
            elif kind == R_DATETIME2:
                parts.append(_datetime2(data, pos, spec.fsp, spec.size))
                pos += 5 + spec.size
            elif kind == R_DECIMAL:
                assert spec.decimal is not None
                packed, pos = _decimal(spec.decimal, data, pos)
                parts.append(packed)
            elif kind == R_TEXT:
                text, pos = read_prefixed(spec, data, pos)
                parts.append(pack(text))
            else:
                value, pos = read_value(spec, data, pos)
                parts.append(encode_value(value))
        bit <<= 1
    return b"".join(parts), pos


def pack_rows(
    layout: RowLayout, keys: tuple[bytes, ...], op: Op, data: bytes, pos: int, end: int
) -> list[tuple[bytes | None, bytes | None]]:
    """The (before, after) row maps of a rows event body of FULL images, packed (the
    prototype reads no other image: ValueError)."""
    update = op is Op.UPDATE
    count, pos = lenenc_int(data, pos)
    width = (count + 7) // 8
    if data[pos : pos + width] != layout.full:
        raise ValueError("not a FULL image")
    pos += width
    if update:
        if data[pos : pos + width] != layout.full:
            raise ValueError("not a FULL image")
        pos += width
    images: list[tuple[bytes | None, bytes | None]] = []
    while pos < end:
        row, pos = pack_full_row(layout, keys, data, pos)
        if update:
            after, pos = pack_full_row(layout, keys, data, pos)
            images.append((row, after))
        elif op is Op.INSERT:
            images.append((None, row))
        else:
            images.append((row, None))
    if pos != end:
        raise IndexError(f"the last row ends {pos - end} bytes past the event")
    return images


def _decimal(layout: DecimalLayout, data: bytes, pos: int) -> tuple[bytes, int]:
    """DECIMAL as the codec's ext 1: the text str(Decimal) gives, which is the layout's text
    unless Decimal writes it with an exponent (a zero or tiny value of over 6 decimals)."""
    sign, whole, fraction, end = decimal_parts(layout, data, pos)
    if whole == 0 and (len(str(fraction)) if fraction else 1) - 1 - layout.scale < -6:
        return encode_value(read_decimal(layout, data, pos)[0]), end
    text = layout.text.format(sign, whole, fraction).encode("ascii")
    return ext_header(len(text), 1) + text, end


def ext_header(size: int, code: int) -> bytes:
    """The header of an ext value of ``size`` bytes and type ``code``, as msgpack packs it."""
    fixed = _FIXEXT.get(size)
    if fixed is not None:
        return bytes((fixed, code))
    if size < 0x100:
        return bytes((0xC7, size, code))
    if size < 0x10000:
        return b"\xc8" + size.to_bytes(2, "big") + bytes((code,))
    return b"\xc9" + size.to_bytes(4, "big") + bytes((code,))


_FIXEXT = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}


def _datetime2(data: bytes, pos: int, fsp: int, size: int) -> bytes:
    """DATETIME2 as the codec's ext 2, or (a zero or impossible date) as the value packs."""
    raw = int.from_bytes(data[pos : pos + 5], "big")
    year_month = raw >> 22 & 0x1FFFF
    year, month, day = year_month // 13, year_month % 13, raw >> 17 & 31
    hour, minute, second = raw >> 12 & 31, raw >> 6 & 63, raw & 63
    micro = micros(data, pos + 5, fsp, size) if size else 0
    valid = 1 <= year <= 9999 and 1 <= month <= 12 and 1 <= day <= _DAYS[month]
    if valid and month == 2 and day == 29:
        valid = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not valid or hour > 23 or minute > 59 or second > 59 or not 0 <= micro < 1_000_000:
        return encode_value(datetime2(data, pos, fsp, size))
    return (
        _DATETIME_EXT
        + year.to_bytes(2, "big")
        + bytes((month, day, hour, minute, second))
        + micro.to_bytes(4, "big")
    )
