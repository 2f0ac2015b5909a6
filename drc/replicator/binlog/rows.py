"""Row images -> row dicts: the body of a rows event, decoded from its bytes.

    rows event body   [columns: length-encoded int][columns-present bitmap]([bitmap of the after
                      image: UPDATE only]) then row after row to the event's end:
    row image         [null bitmap, (present + 7) // 8 bytes][value][value]...
                      bit k set = the k-th PRESENT column is NULL; a NULL or absent column
                      has no bytes

With binlog_row_image=FULL (what DRC asks the source for) every column is present: such an
image is read by :func:`full_row`, the hot loop of capture. Any other image (MINIMAL or
NOBLOB, e.g. a session that changed binlog_row_image) is read by :func:`partial_row`, and the
columns it lacks are None, as python-mysql-replication returned them. A row dict has every
column of the table, in column order.

Corrupt input (a row past the event's end, a DECIMAL digit group out of range, text that is
not in its charset, an ENUM index past its members) raises :class:`RowDecodeError` naming
the table; a column of a type DRC cannot decode raises UnsupportedColumnError when a row has
a value in it (NULLs decode).
"""

from __future__ import annotations

import struct
from typing import Any

from drc.core.errors import FatalError, UnsupportedColumnError
from drc.core.events import Op
from drc.mysql.protocol import WireError, lenenc_int
from drc.replicator.binlog.columns import (
    R_DATETIME2,
    R_DECIMAL,
    R_NUMBER,
    R_TEXT,
    RowLayout,
)
from drc.replicator.binlog.values import datetime2, read_decimal, read_prefixed, read_value

Row = dict[str, Any]
Image = tuple[Row | None, Row | None]


class RowDecodeError(FatalError):
    """A rows event whose bytes do not decode as its TABLE_MAP describes the table: a corrupt
    binlog, or a server writing a format DRC does not know. Capture stops at that event;
    check the source's binlog (mariadb-binlog --verbose at the position) and report it."""


def decode_rows(layout: RowLayout, op: Op, data: bytes, pos: int, end: int) -> tuple[Image, ...]:
    """The (before, after) images of the rows event body at ``data[pos:end]``: (None, row)
    for an insert, (row, None) for a delete."""
    try:
        return _images(layout, op, data, pos, end)
    except UnsupportedColumnError:
        raise
    # WireError: a column count that is no length-encoded integer (the protocol's reader).
    except (IndexError, ValueError, struct.error, OverflowError, WireError) as exc:
        raise RowDecodeError(
            f"rows event of {layout.schema}.{layout.table} does not decode as its TABLE_MAP "
            f"describes it ({type(exc).__name__}: {exc}); the binlog is corrupt or written in "
            "a format DRC does not know: check it with mariadb-binlog --verbose"
        ) from exc


def _images(layout: RowLayout, op: Op, data: bytes, pos: int, end: int) -> tuple[Image, ...]:
    update = op is Op.UPDATE
    count, pos = lenenc_int(data, pos)
    width = (count + 7) // 8
    present = data[pos : pos + width]
    pos += width
    present_after = present
    if update:
        present_after = data[pos : pos + width]
        pos += width
    full = present == layout.full and present_after == layout.full  # the usual case
    images: list[Image] = []
    while pos < end:
        start = pos
        row, pos = full_row(layout, data, pos) if full else partial_row(layout, present, data, pos)
        if update:
            if full:
                after, pos = full_row(layout, data, pos)
            else:
                after, pos = partial_row(layout, present_after, data, pos)
            images.append((row, after))
        elif op is Op.INSERT:
            images.append((None, row))
        else:
            images.append((row, None))
        if pos == start:  # no column present: the loop would never end (a corrupt event)
            raise ValueError("a row image of no bytes (no column present)")
    if pos != end:
        raise IndexError(f"the last row ends {pos - end} bytes past the event")
    return tuple(images)


def full_row(layout: RowLayout, data: bytes, pos: int) -> tuple[Row, int]:
    """A FULL image: every column present. The usual kinds are read inline."""
    start = pos + layout.null_bytes
    nulls = int.from_bytes(data[pos:start], "little") & layout.null_mask
    pos = start
    row: Row = {}
    bit = 1
    for spec in layout.columns:
        if nulls & bit:
            row[spec.name] = None
        else:
            kind = spec.kind
            if kind == R_NUMBER:
                assert spec.unpack is not None
                row[spec.name] = spec.unpack(data, pos)[0]
                pos += spec.size
            elif kind == R_TEXT:
                row[spec.name], pos = read_prefixed(spec, data, pos)
            elif kind == R_DATETIME2:
                row[spec.name] = datetime2(data, pos, spec.fsp, spec.size)
                pos += 5 + spec.size
            elif kind == R_DECIMAL:
                assert spec.decimal is not None
                row[spec.name], pos = read_decimal(spec.decimal, data, pos)
            else:
                row[spec.name], pos = read_value(spec, data, pos)
        bit <<= 1
    return row, pos


def partial_row(layout: RowLayout, present: bytes, data: bytes, pos: int) -> tuple[Row, int]:
    """An image of only the columns set in ``present``; the others are None."""
    specs = layout.columns
    bits = int.from_bytes(present, "little")
    shown = [i for i in range(len(specs)) if bits >> i & 1]
    start = pos + (bits.bit_count() + 7) // 8  # every bit set counts, as in the library
    nulls = int.from_bytes(data[pos:start], "little")
    pos = start
    row: Row = {spec.name: None for spec in specs}
    for k, i in enumerate(shown):
        if not nulls >> k & 1:
            row[specs[i].name], pos = read_value(specs[i], data, pos)
    return row, pos
