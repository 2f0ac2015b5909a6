"""Binary record codec for a Transaction: the unit the EventBuffer stores and the API serves.

Record layout (all integers big-endian)::

    offset  size  field
    0       2     magic      b"DX"
    2       1     version    1
    3       1     flags      bit 0 ROWS_OMITTED (below); the other bits are reserved and a
                             record with one set is rejected (no silent feature skew)
    4       4     length     payload length in bytes, u32
    8       4     crc        zlib.crc32 over bytes 0..7 of the header, then the payload
    12      n     payload    msgpack, see below

:data:`HEADER_SIZE` is 12. The CRC covers the length field too, so a flipped length bit fails
the CRC even when the shorter or longer span happens to parse. A record is accepted only if the
magic, version and flags match, the whole payload is present, the CRC matches, and the payload
has the exact structure below; anything else raises CorruptRecordError(message, offset) naming
the check that failed. A decoder never returns a partial or guessed Transaction.

Payload (version 1): one msgpack array of 9 (or 10) items::

    [scn: bin(20)  (SCN.to_bytes, order-preserving),
     server_id: uint32, gtid: str | nil, timestamp: uint (unix seconds),
     drc_originated: bool, fragment: uint, last_fragment: bool,
     changes: [[schema: str, table: str, op: "i" | "u" | "d", before: map | nil,
                after: map | nil], ...],
     ddl: [[schema: str, statement: str], ...]
     (gtid_position: str)]

ROWS_OMITTED marks a DRC-originated transaction stored without its row changes (a replicator
with ``[replicator] drc_applied = "marker"``): its payload has ``drc_originated`` true and no
changes (DDL is kept), and a record with the flag and anything else is corrupt. A reader that
does not know the flag rejects the record instead of taking it for a transaction that wrote
nothing.

``gtid_position`` (the source's GTID position after the transaction, drc.core.gtid) is a 10th
item present only when it says more than ``gtid`` (a source with several GTID domains), so a
record of a single-domain source is the same 9 items as before it existed.

A row image is a msgpack map of column name (str) -> value, in table column order; decoding
keeps that order. Its values are encoded as drc.core.value_codec specifies.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, NamedTuple

import msgpack

from drc.core.errors import CorruptRecordError, UnsupportedValueError
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.scn import SCN, U32_MAX
from drc.core.value_codec import (
    DECODE_ERRORS,
    Malformed,
    check_wire_row,
    pack,
    row_to_wire,
    unpack,
)

MAGIC = b"DX"
VERSION = 1
HEADER_SIZE = 12
MAX_PAYLOAD = 2**32 - 1
FLAG_ROWS_OMITTED = 0x01
_KNOWN_FLAGS = FLAG_ROWS_OMITTED

_HEAD = struct.Struct(">2sBBI")  # the CRC-covered first 8 bytes
_CRC = struct.Struct(">I")

_OP_CODES = {Op.INSERT: "i", Op.UPDATE: "u", Op.DELETE: "d"}


# ---------------------------------------------------------------- transactions


def _txn_to_wire(txn: Transaction) -> list[Any]:
    if type(txn.server_id) is not int or not 0 <= txn.server_id <= U32_MAX:
        raise UnsupportedValueError(f"server_id {txn.server_id!r} is not a uint32")
    if txn.gtid is not None and type(txn.gtid) is not str:
        raise UnsupportedValueError(f"gtid {txn.gtid!r} is not a str")
    if txn.gtid_position is not None and type(txn.gtid_position) is not str:
        raise UnsupportedValueError(f"gtid_position {txn.gtid_position!r} is not a str")
    if type(txn.timestamp) is not int or type(txn.fragment) is not int:
        raise UnsupportedValueError("timestamp and fragment must be ints")
    changes = [
        [c.schema, c.table, _OP_CODES[c.op], row_to_wire(c.before), row_to_wire(c.after)]
        for c in txn.changes
    ]
    ddl = [[d.schema, d.statement] for d in txn.ddl]
    for schema, table, *_ in changes + ddl:
        if type(schema) is not str or type(table) is not str:
            raise UnsupportedValueError(f"schema/table/statement {schema!r}, {table!r} not str")
    return [
        txn.scn.to_bytes(),
        txn.server_id,
        txn.gtid,
        txn.timestamp,
        bool(txn.drc_originated),
        txn.fragment,
        bool(txn.last_fragment),
        changes,
        ddl,
        *(() if txn.gtid_position is None else (txn.gtid_position,)),
    ]


def _change_from_wire(item: Any) -> RowChange:
    schema, table, op, before, after = _checked_change(item)
    return RowChange(schema, table, op, before, after)


def _checked_change(item: Any) -> tuple[str, str, Op, Any, Any]:
    if type(item) is not list or len(item) != 5:
        raise Malformed("a row change is not a 5-element array")
    schema, table, code, before, after = item
    # One lookup checks the op code and that it carries exactly the images it needs.
    op = _SHAPES.get((code, type(before), type(after))) if type(code) is str else None
    if op is None or type(schema) is not str or type(table) is not str:
        raise Malformed(
            f"row change ({_kind(schema)} schema, {_kind(table)} table, op {code!r}, "
            f"{_kind(before)} before, {_kind(after)} after) is not a valid "
            "insert (i, nil, map), update (u, map, map) or delete (d, map, nil)"
        )
    if before is not None:
        check_wire_row(before)
    if after is not None:
        check_wire_row(after)
    return schema, table, op, before, after


_SHAPES = {
    ("i", type(None), dict): Op.INSERT,
    ("u", dict, dict): Op.UPDATE,
    ("d", dict, type(None)): Op.DELETE,
}


def _ddl_from_wire(item: Any) -> SchemaChange:
    if type(item) is not list or len(item) != 2 or _kinds(item) != (str, str):
        raise Malformed("a DDL entry is not a [schema: str, statement: str] array")
    return SchemaChange(item[0], item[1])


# The payload's item types, in order; gtid may be str or nil; gtid_position (a str) optional.
_WIRE_TYPES = frozenset(
    (bytes, int, gtid, int, bool, int, bool, list, list, *position)
    for gtid in (str, type(None))
    for position in ((), (str,))
)
_WIRE_NAMES = "scn server_id gtid timestamp drc_originated fragment last_fragment changes ddl"


def _check_wire(wire: Any) -> None:
    if type(wire) is not list or _kinds(wire) not in _WIRE_TYPES:
        raise Malformed(
            f"payload is not a [{', '.join(_WIRE_NAMES.split())}] array; "
            f"item types are {[_kind(v) for v in wire] if type(wire) is list else _kind(wire)}"
        )
    if not 0 <= wire[1] <= U32_MAX:
        raise Malformed(f"server_id {wire[1]} is not a uint32")


def _txn_from_wire(wire: Any, rows_omitted: bool = False) -> Transaction:
    _check_wire(wire)
    scn, server_id, gtid, timestamp, drc, fragment, last, changes, ddl = wire[:9]
    return Transaction(
        scn=SCN.from_bytes(scn),
        server_id=server_id,
        gtid=gtid,
        timestamp=timestamp,
        changes=tuple(map(_change_from_wire, changes)),
        ddl=tuple(map(_ddl_from_wire, ddl)),
        drc_originated=drc,
        fragment=fragment,
        last_fragment=last,
        gtid_position=wire[9] if len(wire) > 9 else None,
        rows_omitted=rows_omitted,
    )


def _kinds(items: list[Any]) -> tuple[type, ...]:
    return tuple(map(type, items))


def _kind(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


# ---------------------------------------------------------------- framing


def encode_transaction(txn: Transaction) -> bytes:
    """One framed record; raises UnsupportedValueError for a value it cannot encode exactly."""
    payload = pack(_txn_to_wire(txn))
    if len(payload) > MAX_PAYLOAD:
        raise UnsupportedValueError(
            f"transaction at {txn.scn} encodes to {len(payload)} bytes, over the 4 GiB record "
            "limit; store it as several fragments"
        )
    head = _HEAD.pack(MAGIC, VERSION, FLAG_ROWS_OMITTED if txn.rows_omitted else 0, len(payload))
    crc = zlib.crc32(payload, zlib.crc32(head))
    return b"".join((head, _CRC.pack(crc), payload))


def peek_length(buf: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """Total size (header + payload) of the record at ``offset``, from its header alone.

    Checks magic, version and flags, not the CRC or whether the payload is all present; raises
    CorruptRecordError for a truncated or bad header.
    """
    _check_offset(buf, offset)
    available = len(buf) - offset
    if available < HEADER_SIZE:
        raise CorruptRecordError(
            f"truncated record header at offset {offset}: {available} of {HEADER_SIZE} bytes",
            offset,
        )
    magic, version, flags, length = _HEAD.unpack_from(buf, offset)
    if magic != MAGIC:
        raise CorruptRecordError(f"bad magic {bytes(magic)!r} at offset {offset}", offset)
    if version != VERSION:
        raise CorruptRecordError(
            f"record version {version} at offset {offset} is not {VERSION}; "
            "written by a newer DRC? upgrade the reader",
            offset,
        )
    if flags & ~_KNOWN_FLAGS:
        raise CorruptRecordError(
            f"reserved flags {flags:#04x} set at offset {offset}; written by a newer DRC? "
            "upgrade the reader",
            offset,
        )
    return HEADER_SIZE + length


def decode_transaction(
    buf: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[Transaction, int]:
    """Decode the record at ``offset``; returns it and the offset just after it.

    Raises CorruptRecordError (with ``offset``) for any framing, CRC or structure failure.
    """
    payload, end = _checked_payload(buf, offset)
    try:
        return _txn_from_wire(unpack(payload), rows_omitted(buf, offset)), end
    except DECODE_ERRORS as exc:
        raise _undecodable(exc, offset) from exc


def rows_omitted(buf: bytes | bytearray | memoryview, offset: int = 0) -> bool:
    """Whether the record at ``offset`` is stored without its row changes (ROWS_OMITTED),
    from its header's flags alone (unchecked, like :func:`peek_tables`)."""
    return bool(buf[offset + 3] & FLAG_ROWS_OMITTED)


def decode_rows(buf: bytes | bytearray | memoryview, offset: int = 0) -> RowsRecord:
    """The record at ``offset`` checked exactly as :func:`decode_transaction` checks it, without
    building the Transaction (a bulk reader's fast path: drc.catchup). Its row changes are the
    payload's own ``[schema, table, op, before, after]`` arrays, the op as :class:`Op`."""
    payload, _ = _checked_payload(buf, offset)
    try:
        wire = unpack(payload)
        _check_wire(wire)
        changes = [_checked_change(item) for item in wire[7]]
        ddl = [_ddl_from_wire(item) for item in wire[8]]
    except DECODE_ERRORS as exc:
        raise _undecodable(exc, offset) from exc
    return RowsRecord(wire[0], wire[3], wire[4], wire[5], changes, bool(ddl))


class RowsRecord(NamedTuple):
    """What :func:`decode_rows` returns."""

    scn: bytes  # SCN.to_bytes()
    timestamp: int
    drc_originated: bool
    fragment: int
    changes: list[tuple[str, str, Op, Any, Any]]  # schema, table, op, before, after
    ddl: bool  # whether it carries DDL


def encode_rows(rows: list[Any]) -> bytes:
    """Decoded rows and values (lists of them, as :func:`decode_rows` gives) packed again, no
    frame: a bulk reader ships them between its own processes (drc.catchup)."""
    return pack(rows)


def decode_rows_packed(data: bytes) -> list[Any]:
    """Inverse of :func:`encode_rows`."""
    try:
        value = unpack(data)
    except DECODE_ERRORS as exc:
        raise CorruptRecordError(f"packed rows do not decode: {exc}", 0) from exc
    if type(value) is not list:
        raise CorruptRecordError("packed rows are not an array", 0)
    return value


def _undecodable(exc: BaseException, offset: int) -> CorruptRecordError:
    return CorruptRecordError(
        f"record at offset {offset} passed its CRC but does not decode "
        f"({type(exc).__name__}: {exc}); the writer is faulty",
        offset,
    )


def _checked_payload(buf: bytes | bytearray | memoryview, offset: int) -> tuple[memoryview, int]:
    """The payload of the record at ``offset`` once its frame and CRC are checked."""
    end = offset + peek_length(buf, offset)
    if end > len(buf):
        raise CorruptRecordError(
            f"truncated record at offset {offset}: needs {end - offset} bytes, "
            f"{len(buf) - offset} present",
            offset,
        )
    view = memoryview(buf)
    (stored,) = _CRC.unpack_from(buf, offset + 8)
    payload = view[offset + HEADER_SIZE : end]
    if zlib.crc32(payload, zlib.crc32(view[offset : offset + 8])) != stored:
        raise CorruptRecordError(f"CRC mismatch in record at offset {offset}", offset)
    return payload, end


def peek_tables(record: bytes | bytearray | memoryview) -> tuple[bool, set[tuple[str, str]], int]:
    """(drc_originated, the (schema, table) of every row change, number of DDL statements) of
    a record, read without building its row images (a server filtering by table needs no
    more). Unchecked: no CRC, and values it skips are not validated; anything unexpected
    raises CorruptRecordError, and a caller that must be sure decodes with
    :func:`decode_transaction`.
    """
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, use_list=True, timestamp=0)
    try:
        unpacker.feed(memoryview(record)[HEADER_SIZE:])
        if unpacker.read_array_header() not in (9, 10):
            raise Malformed("payload is not a 9- or 10-item array")
        for _ in range(4):  # scn, server_id, gtid, timestamp
            unpacker.skip()
        drc_originated = unpacker.unpack()
        unpacker.skip()  # fragment
        unpacker.skip()  # last_fragment
        tables: set[tuple[str, str]] = set()
        for _ in range(unpacker.read_array_header()):
            if unpacker.read_array_header() != 5:
                raise Malformed("a row change is not a 5-element array")
            schema, table = unpacker.unpack(), unpacker.unpack()
            if type(schema) is not str or type(table) is not str:
                raise Malformed("a row change's schema or table is not a str")
            tables.add((schema, table))
            unpacker.skip()  # op
            unpacker.skip()  # before
            unpacker.skip()  # after
        ddl = unpacker.read_array_header()
    except DECODE_ERRORS as exc:
        raise CorruptRecordError(f"record does not peek ({type(exc).__name__}: {exc})", 0) from exc
    if type(drc_originated) is not bool:
        raise CorruptRecordError("record's drc_originated is not a bool", 0)
    return drc_originated, tables, ddl


def _check_offset(buf: bytes | bytearray | memoryview, offset: int) -> None:
    # A bad offset is the caller's bug, not corrupt data: a plain ValueError.
    if type(offset) is not int or not 0 <= offset <= len(buf):
        raise ValueError(f"offset {offset!r} is outside the buffer of {len(buf)} bytes")
