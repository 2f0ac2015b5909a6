"""Binlog event packets -> DRC source events, decoded from their bytes.

    packet   [0x00 OK][timestamp 4][type 1][server_id 4][size 4][log_pos 4][flags 2][body][crc 4]
             (the crc only when the stream carries checksums; ``size`` counts header, body, crc)

    MariaDB GTID (162)  body: seq_no u64, domain_id u32, flags u8         -> Begin
    XID (16)                                                              -> Commit
    rows (23/24/25, and MySQL's v2 30/31/32)
                        post-header: table_id u48, flags u16 (v2: extra data length u16),
                        then the rows body (drc.replicator.binlog.rows)   -> Rows
                        (of a transaction capture stores without rows:
                        only the table id is read)                        -> SkippedRows
    TABLE_MAP (19)      a body seen before: the table id's layout from now on
    ROTATE (4)          position u64, next file name: where positions count from; a real
                        rotation (timestamp not 0) forgets the table ids, which a restarted
                        server reuses
    HEARTBEAT (27)                                                        -> Heartbeat
    XA_PREPARE (38)     body: one_phase u8, formatID u32, gtrid length u32, bqual length
                        u32, gtrid, bqual                                 -> XaPrepare

:data:`FOR_LIBRARY` asks the caller to have python-mysql-replication parse the packet: a
TABLE_MAP not seen before (the caller hands its parse back through :meth:`remember`), QUERY,
FORMAT_DESCRIPTION (its post-header lengths come back through ``post_header_lengths``) and
MariaDB's GTID list. Every other event type is of no use to capture and decodes to None, as
the library's reader filtered them for DRC before. Rows of a table id no TABLE_MAP announced
decode to None too (the library dropped them the same way; a stream that starts at a
transaction boundary never has them).
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

from drc.core.events import Op, TableSchema
from drc.core.scn import split_binlog_name
from drc.replicator.binlog.columns import RowLayout
from drc.replicator.binlog.rows import RowDecodeError, decode_rows
from drc.replicator.source_events import (
    Begin,
    Commit,
    Heartbeat,
    Rows,
    SkippedRows,
    SourceEvent,
    XaPrepare,
)

HEADER = struct.Struct("<xIBIIIH")  # the OK byte, then the 19-byte event header
HEADER_SIZE = 20
_GTID = struct.Struct("<QIB")
_XA = struct.Struct("<BIII")
QUERY, ROTATE, FORMAT_DESCRIPTION, XID, TABLE_MAP, HEARTBEAT = 2, 4, 15, 16, 19, 27
XA_PREPARE = 38
MARIADB_GTID, MARIADB_GTID_LIST = 162, 163
ROWS: Final = {23: Op.INSERT, 24: Op.UPDATE, 25: Op.DELETE}  # MariaDB writes these
ROWS.update({30: Op.INSERT, 31: Op.UPDATE, 32: Op.DELETE})  # MySQL's v2
ROWS_V2: Final = frozenset({30, 31, 32})
# Types decoded here from their body, with the least body they have.
_WITH_BODY: Final = {
    XID: 8, MARIADB_GTID: 13, TABLE_MAP: 8, ROTATE: 8, XA_PREPARE: 13, **dict.fromkeys(ROWS, 8)
}  # fmt: skip
_PARSED_BY_LIBRARY = frozenset({QUERY, FORMAT_DESCRIPTION, MARIADB_GTID_LIST})
# Header flag MariaDB sets on every event of a session with skip_replication=1. Apply sessions set
# it, so DDL (which has no transaction to carry the checkpoint write) is recognised as DRC's too.
SKIP_REPLICATION = 0x8000
_GTID_STANDALONE = 0x01


class Handoff(Enum):
    FOR_LIBRARY = "python-mysql-replication parses this packet"


FOR_LIBRARY: Final = Handoff.FOR_LIBRARY
Decoded = SourceEvent | Literal[Handoff.FOR_LIBRARY] | None


@dataclass(frozen=True, slots=True)
class TableEntry:
    """What one TABLE_MAP says: its table id, the table's schema and its row layout."""

    table_id: int
    schema: TableSchema
    layout: RowLayout


class TableMaps:
    """Parsed TABLE_MAPs, keyed by the event body's exact bytes (at most ``limit``, least
    recently used dropped first).

    Every transaction re-sends a TABLE_MAP for each table it touches, and parsing one (optional
    metadata, charsets, names) costs more than decoding a small transaction's rows. Keyed by
    the whole body (table id, names, types, metadata), a hit can only ever be the parse of
    identical bytes, and an ALTER simply misses (the library's own ``freeze_schema`` keys by
    table id, which a server reuses). Shared by connections in several threads (capture and
    a back-to-source read), hence the lock."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._entries: OrderedDict[bytes, TableEntry] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, body: bytes) -> TableEntry | None:
        with self._lock:
            entry = self._entries.get(body)
            if entry is not None:
                self._entries.move_to_end(body)
            return entry

    def put(self, body: bytes, entry: TableEntry) -> None:
        with self._lock:
            self._entries[body] = entry
            if len(self._entries) > self._limit:
                self._entries.popitem(last=False)


class EventDecoder:
    """Decodes one connection's event packets; keeps what TABLE_MAPs said, by table id, and
    which binlog file positions are in."""

    def __init__(self, table_maps: TableMaps, log_file: str | None = None) -> None:
        self.table_maps = table_maps
        self.tables: dict[int, TableEntry] = {}
        self.checksum = False  # events end with a 4-byte CRC32
        self.post_header_lengths: Sequence[int] = ()  # from the FORMAT_DESCRIPTION event
        self.log_file = log_file
        self.log_index = split_binlog_name(log_file)[1] if log_file else 0

    def decode(self, data: bytes, skip_rows: bool = False) -> Decoded:
        """The source event of one packet, None for nothing to report, or FOR_LIBRARY.
        ``skip_rows``: a rows event comes as :class:`SkippedRows`, its images unread."""
        if len(data) < HEADER_SIZE or data[0] != 0:
            raise RowDecodeError(f"binlog packet of {len(data)} bytes is not an event")
        timestamp, kind, server_id, size, log_pos, flags = HEADER.unpack_from(data)
        end = HEADER_SIZE + size - 19 - (4 if self.checksum else 0)
        if kind in _WITH_BODY and not HEADER_SIZE + _WITH_BODY[kind] <= end <= len(data):
            raise RowDecodeError(
                f"binlog event of type {kind} at {self.log_file}:{log_pos} declares {size} "
                f"bytes, the packet has {len(data) - 1}"
            )
        if kind in ROWS:
            return self._rows(data, end, kind, skip_rows)
        if kind == XID:
            return Commit(server_id, timestamp, self.log_index, log_pos)
        if kind == MARIADB_GTID:
            seq_no, domain, gtid_flags = _GTID.unpack_from(data, HEADER_SIZE)
            return Begin(
                f"{domain}-{server_id}-{seq_no}",
                server_id,
                bool(gtid_flags & _GTID_STANDALONE),
                bool(flags & SKIP_REPLICATION),
            )
        if kind == TABLE_MAP:
            entry = self.table_maps.get(data[HEADER_SIZE:end])
            if entry is None:
                return FOR_LIBRARY
            self.tables[entry.table_id] = entry
            return None
        if kind == HEARTBEAT:
            return Heartbeat(self.log_index, log_pos)
        if kind == XA_PREPARE:
            one_phase, xid = self._xid(data, end)
            return XaPrepare(
                xid, one_phase, server_id, timestamp, self.log_file, self.log_index, log_pos
            )
        if kind == ROTATE:
            self._rotate(data[HEADER_SIZE + 8 : end].decode(), timestamp)
            return None
        return FOR_LIBRARY if kind in _PARSED_BY_LIBRARY else None

    def remember(self, body: bytes, entry: TableEntry) -> None:
        """A TABLE_MAP (``body``: its bytes after the header) the library parsed."""
        self.table_maps.put(body, entry)
        self.tables[entry.table_id] = entry

    def _rotate(self, next_file: str, timestamp: int) -> None:
        self.log_file = next_file
        self.log_index = split_binlog_name(next_file)[1]
        if timestamp != 0:  # a real rotation, maybe a restart: table ids mean nothing now
            self.tables.clear()

    def _rows(self, data: bytes, end: int, kind: int, skip: bool) -> SourceEvent | None:
        pos = HEADER_SIZE
        entry = self.tables.get(int.from_bytes(data[pos : pos + 6], "little"))
        if entry is None:
            return None
        if skip:
            return SkippedRows(entry.schema)
        v2 = kind in ROWS_V2
        standard = 10 if v2 else 8
        declared = self._post_header(kind, standard)
        if declared < standard:
            raise RowDecodeError(
                f"rows event type {kind} declares a post-header of {declared} bytes, "
                f"shorter than the {standard} its format has"
            )
        body = pos + declared
        if v2:  # MySQL's extra row data: its length counts its own 2 bytes
            body += max(int.from_bytes(data[pos + 8 : pos + 10], "little") - 2, 0)
        op = ROWS.get(kind, Op.DELETE)
        images = decode_rows(entry.layout, op, data, body, end)
        return Rows(entry.schema, op, images, end - HEADER_SIZE)

    def _xid(self, data: bytes, end: int) -> tuple[bool, str]:
        """An XA_PREPARE event's one_phase flag and XA id, written as ``XA COMMIT`` writes it."""
        pos = HEADER_SIZE + self._post_header(XA_PREPARE, 0)
        if pos + _XA.size > end:
            raise RowDecodeError(f"XA_PREPARE event at {self.log_file} is too short")
        one_phase, format_id, gtrid_length, bqual_length = _XA.unpack_from(data, pos)
        pos += _XA.size
        if pos + gtrid_length + bqual_length > end:
            raise RowDecodeError(
                f"XA_PREPARE event at {self.log_file} declares an XA id of "
                f"{gtrid_length + bqual_length} bytes, longer than the event"
            )
        gtrid = data[pos : pos + gtrid_length].hex()
        bqual = data[pos + gtrid_length : pos + gtrid_length + bqual_length].hex()
        return bool(one_phase), f"X'{gtrid}',X'{bqual}',{format_id}"

    def _post_header(self, kind: int, default: int) -> int:
        """The post-header length the FORMAT_DESCRIPTION declared for ``kind``."""
        lengths = self.post_header_lengths
        if not lengths or not 0 < kind <= len(lengths):
            return default
        return int(lengths[kind - 1])
