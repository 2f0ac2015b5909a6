"""python-mysql-replication's parse of the few packets DRC does not decode itself.

TABLE_MAP (the first time its bytes are seen), QUERY, FORMAT_DESCRIPTION and MariaDB's GTID
list are rare next to rows, GTID and XID events, and their formats are the library's business:
each such packet goes through the library's public ``BinLogPacketWrapper`` as its own reader
would wrap it, with the control connection the library opened (the tap kept it).
"""

from __future__ import annotations

from typing import Any

from pymysql.protocol import MysqlPacket
from pymysqlreplication.event import FormatDescriptionEvent, MariadbGtidListEvent, QueryEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import TableMapEvent

from drc.replicator.binlog.columns import layout_of
from drc.replicator.binlog.events import HEADER_SIZE, EventDecoder, TableEntry
from drc.replicator.schema_types import table_schema_from_map

PARSED = frozenset({FormatDescriptionEvent, TableMapEvent, QueryEvent, MariadbGtidListEvent})
# The wrapper's arguments that are the same for every packet: the library reader's defaults
# (no filters, no checks of its own) but no logging, and the full row metadata (the source was
# checked for binlog_row_metadata=FULL).
_FIXED: dict[str, Any] = {
    "only_tables": None,
    "ignored_tables": None,
    "only_schemas": None,
    "ignored_schemas": None,
    "freeze_schema": False,
    "ignore_decode_errors": False,
    "verify_checksum": False,
    "optional_meta_data": True,
    "enable_logging": False,
    "use_column_name_cache": False,
}


class LibraryParser:
    """Parses packets as the library's reader would on this connection."""

    def __init__(self, control: Any, decoder: EventDecoder) -> None:
        self._control = control
        self._decoder = decoder
        self.mysql_version: tuple[int, ...] = (0, 0, 0)  # from the FORMAT_DESCRIPTION event

    def parse(self, data: bytes) -> Any:
        """The library's event for one packet (an event of :data:`PARSED`, or None).

        A FORMAT_DESCRIPTION updates the decoder's post-header lengths; a TABLE_MAP is
        handed to the decoder (and its cache) as a :class:`TableEntry`."""
        wrapper = BinLogPacketWrapper(
            from_packet=MysqlPacket(data, "utf8"),
            table_map={},
            ctl_connection=self._control,
            mysql_version=self.mysql_version,
            use_checksum=self._decoder.checksum,
            allowed_events=PARSED,
            post_header_lengths=self._decoder.post_header_lengths or None,
            **_FIXED,
        )
        event = wrapper.event
        if isinstance(event, FormatDescriptionEvent):
            self.mysql_version = event.mysql_version
            self._decoder.post_header_lengths = tuple(event.post_header_len)
        elif isinstance(event, TableMapEvent):
            self._decoder.remember(data[HEADER_SIZE : HEADER_SIZE + event.event_size], entry(event))
        return event


def entry(event: Any) -> TableEntry:
    """What DRC keeps of a library TableMapEvent (SourceConfigError without column names)."""
    schema = table_schema_from_map(event)
    return TableEntry(event.table_id, schema, layout_of(event.schema, event.table, event.columns))
