"""DRC's own decoding of the binlog events every captured transaction is made of.

python-mysql-replication turns each binlog packet into an event object through a wrapper and
a class hierarchy (a dozen keyword arguments, a dict of the table's attributes per rows event,
several small reads per field): on small transactions that per-event work, not the row
values, was most of capture's CPU. Four event types make up a transaction, and they are
decoded here straight from the packet's bytes into :mod:`drc.replicator.source_events`:

    packet   [0x00 OK][timestamp 4][type 1][server_id 4][size 4][log_pos 4][flags 2][body][crc 4]

    MariaDB GTID (162)   body: seq_no u64, domain_id u32, flags u8      -> Begin
    XID (16)                                                            -> Commit
    TABLE_MAP (19)       a body tablemap_cache has parsed before        -> remembered, no event
    rows v1 (23/24/25)   table_id u48, flags u16, columns (packed int),
                         columns-present bitmap (two for updates), row images
                         of a table with a fast_rows plan, FULL images  -> Rows
                         (of a transaction capture stores without rows:
                         only the table id is read)                     -> SkippedRows

Everything else (QUERY, ROTATE, GTID list, format description, a TABLE_MAP seen for the first
time, rows of a table without a plan or not FULL, anything that does not decode to the exact
end of the event) is :data:`NOT_MINE`: the caller hands the same packet to the library, whose
answer is the reference. The values come from the same fast_rows plans and so are exactly the
library path's (tests/integration/test_decoding_equivalence.py compares the two on one binlog).
"""

from __future__ import annotations

import struct
from typing import Any

from drc.core.events import Op, TableSchema
from drc.replicator import fast_rows, tablemap_cache
from drc.replicator.source_events import Begin, Commit, Rows, SkippedRows, SourceEvent

HEADER = struct.Struct("<xIBIIIH")  # the OK byte, then the 19-byte event header
HEADER_SIZE = 20
_GTID = struct.Struct("<QIB")
_XID, _TABLE_MAP, _MARIADB_GTID = 16, 19, 162
_ROWS = {23: Op.INSERT, 24: Op.UPDATE, 25: Op.DELETE}  # MariaDB's v1 rows events
_SKIP_REPLICATION = 0x8000
_GTID_STANDALONE = 0x01
# Post-header lengths this decoder assumes (the format description event declares them).
_POST_HEADER = {_TABLE_MAP: 8, 23: 8, 24: 8, 25: 8, _MARIADB_GTID: 19}
NOT_MINE = object()


class FastDecoder:
    """Decodes one connection's packets; keeps what TABLE_MAPs said, by table id."""

    def __init__(
        self,
        checksum: bool,
        post_header_lengths: Any = None,
        schemas: dict[int, TableSchema] | None = None,
    ) -> None:
        """``schemas``: the caller's table id -> schema map, kept current here too."""
        self._trailer = 4 if checksum else 0
        self.schemas = {} if schemas is None else schemas
        self._types = {
            t for t, length in _POST_HEADER.items() if _declared(post_header_lengths, t, length)
        }
        self.tables: dict[int, tuple[Any, TableSchema, fast_rows.Plan | None]] = {}

    def remember(self, table_id: int, table: Any, schema: TableSchema) -> None:
        """A TABLE_MAP the library decoded: its rows can be decoded here from now on."""
        self.tables[table_id] = (table, schema, fast_rows.plan_of(table))

    def decode(self, data: bytes, log_index: int, table_map: dict[int, Any]) -> Any:
        """The source event of one packet, None for a TABLE_MAP taken in, or NOT_MINE."""
        if len(data) < HEADER_SIZE or data[0] != 0:
            return NOT_MINE
        timestamp, kind, server_id, size, log_pos, flags = HEADER.unpack_from(data)
        if kind not in self._types and kind != _XID:
            return NOT_MINE
        end = HEADER_SIZE + size - 19 - self._trailer
        if end > len(data):
            return NOT_MINE
        if kind == _XID:
            return Commit(server_id, timestamp, log_index, log_pos)
        if kind == _MARIADB_GTID:
            seq_no, domain, gtid_flags = _GTID.unpack_from(data, HEADER_SIZE)
            return Begin(
                f"{domain}-{server_id}-{seq_no}",
                server_id,
                bool(gtid_flags & _GTID_STANDALONE),
                bool(flags & _SKIP_REPLICATION),
            )
        if kind == _TABLE_MAP:
            return self._table_map(data, end, table_map)
        try:
            return self._rows(data, end, _ROWS[kind])
        except (IndexError, ValueError, struct.error, UnicodeDecodeError, OverflowError):
            return NOT_MINE  # the library gives its own value or error for these bytes

    def skipped(self, data: bytes) -> Any:
        """A rows event as :class:`SkippedRows`, its row images not even looked at;
        NOT_MINE for any other packet, or rows of a table whose TABLE_MAP was not seen."""
        if len(data) < HEADER_SIZE + 6 or data[0] != 0:
            return NOT_MINE
        kind = data[5]  # the header's type byte
        if kind not in _ROWS or kind not in self._types:
            return NOT_MINE
        schema = self.schemas.get(int.from_bytes(data[HEADER_SIZE : HEADER_SIZE + 6], "little"))
        return NOT_MINE if schema is None else SkippedRows(schema)

    def _table_map(self, data: bytes, end: int, table_map: dict[int, Any]) -> Any:
        hit = tablemap_cache.lookup(data[HEADER_SIZE:end])
        if hit is None:
            return NOT_MINE
        table_id, table = hit["table_id"], hit["table_obj"]
        known = self.tables.get(table_id)
        if known is None or known[0] is not table:
            schema = table.__dict__.get("_drc_schema")
            if schema is None:  # converted only by the library path so far
                return NOT_MINE
            self.remember(table_id, table, schema)
        table_map[table_id] = table  # the library's rows decoding relies on it too
        self.schemas[table_id] = self.tables[table_id][1]
        return None

    def _rows(self, data: bytes, end: int, op: Op) -> SourceEvent | object:
        pos = HEADER_SIZE
        known = self.tables.get(int.from_bytes(data[pos : pos + 6], "little"))
        if known is None:
            return NOT_MINE
        _table, schema, plan = known
        if plan is None:
            return NOT_MINE
        columns, pos = _packed_int(data, pos + 8)
        width = (columns + 7) // 8
        if data[pos : pos + width] != plan.present:
            return NOT_MINE
        pos += width
        if op is Op.UPDATE:
            if data[pos : pos + width] != plan.present:
                return NOT_MINE
            pos += width
        decode = fast_rows.decode_row
        images: list[tuple[Any, Any]] = []
        while pos < end:
            row, _nulls, pos = decode(plan, data, pos)
            if op is Op.UPDATE:
                after, _nulls, pos = decode(plan, data, pos)
                images.append((row, after))
            elif op is Op.INSERT:
                images.append((None, row))
            else:
                images.append((row, None))
        if pos != end or not images:
            return NOT_MINE
        return Rows(schema, op, tuple(images), end - HEADER_SIZE)  # the library's event_size


def _packed_int(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos]
    if first < 251:
        return first, pos + 1
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None:
        raise ValueError(f"bad packed integer prefix {first}")
    return int.from_bytes(data[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def _declared(lengths: Any, kind: int, expected: int) -> bool:
    """Whether the stream declares the post-header length this decoder assumes."""
    if not lengths or kind - 1 >= len(lengths):
        return True  # not declared: the standard length (the library assumes it too)
    return int(lengths[kind - 1]) == expected
