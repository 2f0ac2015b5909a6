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
import zlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import msgpack

from drc.core.errors import CorruptRecordError, UnsupportedValueError
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.scn import SCN, U32_MAX
from drc.core.values import Bit, ZeroDate

MAGIC = b"DX"
VERSION = 1
HEADER_SIZE = 12
MAX_PAYLOAD = 2**32 - 1
FLAG_ROWS_OMITTED = 0x01
_KNOWN_FLAGS = FLAG_ROWS_OMITTED

EXT_DECIMAL = 1
EXT_DATETIME = 2
EXT_DATETIME_TZ = 3
EXT_DATE = 4
EXT_TIMEDELTA = 5
EXT_ZERO_DATE = 6
EXT_BIT = 7
EXT_SET = 8

_HEAD = struct.Struct(">2sBBI")  # the CRC-covered first 8 bytes
_CRC = struct.Struct(">I")
_DATETIME = struct.Struct(">HBBBBBI")
_DATETIME_TZ = struct.Struct(">HBBBBBIq")
_DATE = struct.Struct(">HBB")
_TIMEDELTA = struct.Struct(">iII")
_BIT = struct.Struct(">BQ")
_ONE_US = dt.timedelta(microseconds=1)

_OP_CODES = {Op.INSERT: "i", Op.UPDATE: "u", Op.DELETE: "d"}


class _Malformed(ValueError):
    """A payload that parsed but does not have the record structure; becomes CorruptRecordError."""


# Errors that decoding untrusted bytes can raise; all mean "this record is corrupt".
_DECODE_ERRORS = (
    ValueError,  # msgpack format errors, _Malformed, bad dates, UnicodeDecodeError
    TypeError,  # unhashable map keys, wrong argument types
    ArithmeticError,  # decimal.InvalidOperation, OverflowError
    struct.error,
    msgpack.UnpackException,
    KeyError,
    RecursionError,
)


# ---------------------------------------------------------------- values: encode


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


def _pack(obj: Any) -> bytes:
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
    return _pack(value)


def encode_key(values: list[Any]) -> bytes:
    """``encode_value(values)`` for a row key's values, decoded from a record (hashed per key
    by catch-up's routing): key columns never hold JSON documents, so their object keys are
    not walked again."""
    return _pack(values)


# ---------------------------------------------------------------- values: decode


def _dec_decimal(data: bytes) -> decimal.Decimal:
    text = data.decode("ascii")
    value = decimal.Decimal(text)
    if value.is_finite() and str(value) == text:
        return value
    raise _Malformed(f"decimal ext holds {text!r}, not a canonical finite decimal")


def _dec_datetime_tz(data: bytes) -> dt.datetime:
    year, month, day, hour, minute, second, micro, offset = _DATETIME_TZ.unpack(data)
    tz = dt.timezone(offset * _ONE_US)
    return dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


def _dec_timedelta(data: bytes) -> dt.timedelta:
    days, seconds, micros = _TIMEDELTA.unpack(data)
    if seconds >= 86400 or micros >= 1_000_000:
        raise _Malformed(f"timedelta ext holds unnormalized {days}d {seconds}s {micros}us")
    return dt.timedelta(days, seconds, micros)


def _dec_bit(data: bytes) -> Bit:
    width, value = _BIT.unpack(data)
    return Bit(value, width)


def _dec_set(data: bytes) -> frozenset[str]:
    members = msgpack.unpackb(data, raw=False, use_list=True)
    if type(members) is not list or any(type(m) is not str for m in members):
        raise _Malformed("SET ext does not hold an array of str")
    if any(a >= b for a, b in zip(members, members[1:], strict=False)):
        raise _Malformed("SET ext members are not sorted and unique")
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
        raise _Malformed(f"unknown ext type code {code}")
    return decoder(data)


def _unpack(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(
        data, raw=False, strict_map_key=True, ext_hook=_ext_hook, use_list=True, timestamp=0
    )


def decode_value(data: bytes | bytearray | memoryview) -> Any:
    """Inverse of :func:`encode_value`; bad bytes raise CorruptRecordError (offset 0)."""
    try:
        value = _unpack(data)
        _check_decoded([value])
    except _DECODE_ERRORS as exc:
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
                raise _Malformed("msgpack Timestamp (ext -1) found; DRC never writes it")
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


def _wire_row(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
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
        [c.schema, c.table, _OP_CODES[c.op], _wire_row(c.before), _wire_row(c.after)]
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
        raise _Malformed("a row change is not a 5-element array")
    schema, table, code, before, after = item
    # One lookup checks the op code and that it carries exactly the images it needs.
    op = _SHAPES.get((code, type(before), type(after))) if type(code) is str else None
    if op is None or type(schema) is not str or type(table) is not str:
        raise _Malformed(
            f"row change ({_kind(schema)} schema, {_kind(table)} table, op {code!r}, "
            f"{_kind(before)} before, {_kind(after)} after) is not a valid "
            "insert (i, nil, map), update (u, map, map) or delete (d, map, nil)"
        )
    if before is not None:
        _check_image(before)
    if after is not None:
        _check_image(after)
    return schema, table, op, before, after


_SHAPES = {
    ("i", type(None), dict): Op.INSERT,
    ("u", dict, dict): Op.UPDATE,
    ("d", dict, type(None)): Op.DELETE,
}


def _check_image(row: dict[Any, Any]) -> None:
    "".join(row)  # TypeError for a non-str column name (msgpack lets bytes keys through)
    if not _WALK.isdisjoint(map(type, row.values())):
        _check_decoded(row.values())


def _ddl_from_wire(item: Any) -> SchemaChange:
    if type(item) is not list or len(item) != 2 or _kinds(item) != (str, str):
        raise _Malformed("a DDL entry is not a [schema: str, statement: str] array")
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
        raise _Malformed(
            f"payload is not a [{', '.join(_WIRE_NAMES.split())}] array; "
            f"item types are {[_kind(v) for v in wire] if type(wire) is list else _kind(wire)}"
        )
    if not 0 <= wire[1] <= U32_MAX:
        raise _Malformed(f"server_id {wire[1]} is not a uint32")


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
    payload = _pack(_txn_to_wire(txn))
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
        return _txn_from_wire(_unpack(payload), rows_omitted(buf, offset)), end
    except _DECODE_ERRORS as exc:
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
        wire = _unpack(payload)
        _check_wire(wire)
        changes = [_checked_change(item) for item in wire[7]]
        ddl = [_ddl_from_wire(item) for item in wire[8]]
    except _DECODE_ERRORS as exc:
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
    return _pack(rows)


def decode_rows_packed(data: bytes) -> list[Any]:
    """Inverse of :func:`encode_rows`."""
    try:
        value = _unpack(data)
    except _DECODE_ERRORS as exc:
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
            raise _Malformed("payload is not a 9- or 10-item array")
        for _ in range(4):  # scn, server_id, gtid, timestamp
            unpacker.skip()
        drc_originated = unpacker.unpack()
        unpacker.skip()  # fragment
        unpacker.skip()  # last_fragment
        tables: set[tuple[str, str]] = set()
        for _ in range(unpacker.read_array_header()):
            if unpacker.read_array_header() != 5:
                raise _Malformed("a row change is not a 5-element array")
            schema, table = unpacker.unpack(), unpacker.unpack()
            if type(schema) is not str or type(table) is not str:
                raise _Malformed("a row change's schema or table is not a str")
            tables.add((schema, table))
            unpacker.skip()  # op
            unpacker.skip()  # before
            unpacker.skip()  # after
        ddl = unpacker.read_array_header()
    except _DECODE_ERRORS as exc:
        raise CorruptRecordError(f"record does not peek ({type(exc).__name__}: {exc})", 0) from exc
    if type(drc_originated) is not bool:
        raise CorruptRecordError("record's drc_originated is not a bool", 0)
    return drc_originated, tables, ddl


def _check_offset(buf: bytes | bytearray | memoryview, offset: int) -> None:
    # A bad offset is the caller's bug, not corrupt data: a plain ValueError.
    if type(offset) is not int or not 0 <= offset <= len(buf):
        raise ValueError(f"offset {offset!r} is outside the buffer of {len(buf)} bytes")
