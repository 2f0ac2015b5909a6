"""The binlog adapter: check the source, and read its binlog as DRC source events.

Only this module talks to python-mysql-replication. It owns positions: every connection starts
at a transaction boundary the caller gives (a position from the buffer), and the library's own
reconnect-and-resume, which can resume mid-transaction and duplicate or drop events, is switched
off so a dropped connection surfaces as SourceUnavailableError and the caller restarts cleanly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader, binlogstream
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from drc.core.errors import (
    BinlogPurgedError,
    SourceConfigError,
    SourceDivergedError,
    SourceUnavailableError,
)
from drc.core.events import Op
from drc.core.scn import split_binlog_name
from drc.replicator import decoding, tablemap_cache
from drc.replicator.fast_events import NOT_MINE, FastDecoder
from drc.replicator.schema_types import table_schema_from_map
from drc.replicator.source_events import (
    Begin,
    Commit,
    GtidList,
    Heartbeat,
    Rows,
    SkippedRows,
    SourceEvent,
    Statement,
)
from drc.tls import MysqlTls, tls_failure

log = logging.getLogger(__name__)

# Errors in this list make the library silently reconnect at its own (possibly mid-transaction)
# position. Emptied, they reach us and we resume from the buffer's last SCN instead.
binlogstream.MYSQL_EXPECTED_ERROR_CODES = []
decoding.install()
tablemap_cache.install()

_GTID_STANDALONE = 0x01
_ER_MASTER_FATAL_READING_BINLOG = 1236
# Header flag MariaDB sets on every event of a session with skip_replication=1. Apply sessions set
# it, so DDL (which has no transaction to carry the checkpoint write) is recognised as DRC's too.
SKIP_REPLICATION_FLAG = 0x8000
_TRANSACTION_CONTROL = {"BEGIN", "XA START", "SAVEPOINT"}


@dataclass(frozen=True)
class SourceSettings:
    host: str
    port: int
    user: str
    password: str
    replica_server_id: int = 1_000_001
    heartbeat_s: float = 0.5
    connect_timeout_s: float = 10.0
    tls: MysqlTls = MysqlTls()

    def pymysql_kwargs(self) -> dict[str, Any]:
        """Connection arguments (the TLS files are read here: ConfigError if unreadable)."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "connect_timeout": self.connect_timeout_s,
            **self.tls.pymysql_options(),
        }

    def __repr__(self) -> str:  # never print the password
        return f"SourceSettings({self.user}@{self.host}:{self.port})"


@dataclass(frozen=True)
class SourceInfo:
    server_id: int
    basename: str
    binlogs: tuple[str, ...]
    current_file: str
    current_pos: int
    read_only: bool = False
    gtid_binlog_pos: str = ""
    gtid_binlog_state: str = ""

    def file_name(self, log_index: int) -> str:
        return f"{self.basename}.{log_index:06d}"


_REQUIRED = (
    ("log_bin", "1", "start the server with --log-bin"),
    ("binlog_format", "ROW", "set binlog_format=ROW in the server config and restart"),
    ("binlog_row_image", "FULL", "set binlog_row_image=FULL in the server config and restart"),
    (
        "binlog_row_metadata",
        "FULL",
        "set binlog_row_metadata=FULL in the server config and restart",
    ),
)


def unavailable(settings: SourceSettings, failed: str, exc: BaseException) -> Exception:
    """The error for a failed connection: fatal if TLS refused it (retrying cannot help)."""
    refused = tls_failure(exc)
    if refused is not None:
        section = settings.tls.section
        return SourceConfigError(
            f"TLS to source {settings!r} ({section}.tls = {settings.tls.mode!r}) refused: "
            f"{refused}; check the {section}.tls keys against the server's certificate"
        )
    return SourceUnavailableError(f"{failed}: {exc}")


def inspect_source(settings: SourceSettings) -> SourceInfo:
    """Check the source's binlog settings and read its identity and binlog files."""
    options = settings.pymysql_kwargs()
    try:
        conn = pymysql.connect(**options)
    except pymysql.MySQLError as exc:
        raise unavailable(settings, f"cannot connect to source {settings!r}", exc) from exc
    try:
        with conn.cursor() as cur:
            names = ", ".join(f"@@{name}" for name, _, _ in _REQUIRED)
            cur.execute(f"SELECT @@server_id, {names}")
            server_id, *values = cur.fetchone()
            for (name, wanted, fix), found in zip(_REQUIRED, values, strict=True):
                if str(found).upper() != wanted:
                    raise SourceConfigError(
                        f"source {settings!r} has {name}={found}; DRC needs {name}={wanted}: {fix}"
                    )
            cur.execute("SELECT @@read_only, @@gtid_binlog_pos, @@gtid_binlog_state")
            read_only, gtid_pos, gtid_state = cur.fetchone()
            cur.execute("SHOW BINARY LOGS")
            binlogs = tuple(row[0] for row in cur.fetchall())
            cur.execute("SHOW MASTER STATUS")
            current_file, current_pos = cur.fetchone()[:2]
    except pymysql.MySQLError as exc:
        raise SourceUnavailableError(f"cannot inspect source {settings!r}: {exc}") from exc
    finally:
        conn.close()
    basename, _ = split_binlog_name(current_file)
    return SourceInfo(
        int(server_id),
        basename,
        binlogs,
        current_file,
        int(current_pos),
        bool(int(read_only)),
        gtid_pos or "",
        gtid_state or "",
    )


def binlog_gtid_pos(settings: SourceSettings, log_file: str, log_pos: int) -> str:
    """The GTID position at a binlog coordinate (only the server that wrote it can answer)."""
    try:
        conn = pymysql.connect(**settings.pymysql_kwargs())
    except pymysql.MySQLError as exc:
        raise unavailable(settings, f"cannot connect to source {settings!r}", exc) from exc
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT BINLOG_GTID_POS(%s, %s)", (log_file, log_pos))
            (found,) = cur.fetchone()
    except pymysql.MySQLError as exc:
        raise SourceUnavailableError(f"cannot read GTID position from {settings!r}: {exc}") from exc
    finally:
        conn.close()
    return found or ""


def check_not_purged(info: SourceInfo, log_file: str, after: str) -> None:
    if log_file not in info.binlogs:
        oldest = info.binlogs[0] if info.binlogs else "none"
        raise BinlogPurgedError(
            f"binlog {log_file} needed to resume after {after} is no longer on the source "
            f"(oldest is {oldest}); DRC will not skip ahead. Rebuild this replicator's buffer "
            "from a fresh start position and reload the targets (catch-up), or restore the binlog"
        )


class BinlogStream:
    """One connection's events from (log_file, log_pos) on, until ``stop`` is set."""

    def __init__(
        self,
        settings: SourceSettings,
        log_file: str | None,
        log_pos: int | None,
        gtid: str | None = None,
        blocking: bool = True,
        server_id: int | None = None,
        fast: bool = True,
        skip_marked_rows: bool = False,
    ) -> None:
        """From (log_file, log_pos), or with ``gtid`` from that ``@slave_connect_state`` (the
        server then checks, strictly, that its binlog holds that position). ``blocking=False``
        ends at the binlog's current end; ``server_id`` overrides the replica id presented.
        ``fast``: decode a transaction's usual events itself (drc.replicator.fast_events)
        instead of through the library (False: the library alone, the reference).
        ``skip_marked_rows``: the rows events of a transaction whose GTID event carries the
        skip_replication flag (DRC's apply sessions) come as :class:`SkippedRows`, their row
        images never decoded (``[replicator] drc_applied = "marker"``)."""
        self._settings = settings
        self._gtid = gtid
        self._blocking = blocking
        self._reader = BinLogStreamReader(
            connection_settings={
                **settings.pymysql_kwargs(),
                "read_timeout": max(10.0, settings.heartbeat_s * 10),
            },
            server_id=server_id or settings.replica_server_id,
            log_file=None if gtid else log_file,
            log_pos=None if gtid else log_pos,
            resume_stream=True,
            blocking=blocking,
            # is_mariadb=True would make the library ignore log_file/log_pos without a GTID
            # (it sends position 4 and an empty file name: the server starts at its oldest
            # binlog). The plain COM_BINLOG_DUMP honours them, and MariaDB still sends its GTID
            # events because the library announces slave capability 4. With a GTID it sends
            # @slave_connect_state and @slave_gtid_strict_mode=1.
            is_mariadb=gtid is not None,
            auto_position=gtid,
            slave_heartbeat=settings.heartbeat_s,
            only_events=[
                MariadbGtidListEvent,
                MariadbGtidEvent,
                TableMapEvent,
                WriteRowsEvent,
                UpdateRowsEvent,
                DeleteRowsEvent,
                QueryEvent,
                XidEvent,
                RotateEvent,
                HeartbeatLogEvent,
            ],
        )
        self._schemas: dict[int, Any] = {}
        self._fast_wanted = fast
        self._fast: FastDecoder | None = None
        self._lengths: Any = None  # the post-header lengths the decoder was made for
        self._log_file: str | None = None
        self._log_index = 0
        self._skip_marked = skip_marked_rows
        self._skipping = False  # inside a skip_replication transaction, rows left undecoded

    def close(self) -> None:
        self._reader.close()

    def events(self, stop: threading.Event) -> Iterator[SourceEvent]:
        try:
            while not stop.is_set():
                packet = self._packet()
                if packet is not None:
                    decoded = self._fast_decode(packet)
                    if decoded is None:
                        continue
                    if decoded is not NOT_MINE:
                        yield self._track(decoded)
                        continue
                event = self._library_event(packet)
                if event is None:
                    if not self._blocking:
                        return  # a non-blocking read reached the end of the binlog
                    raise SourceUnavailableError(
                        f"source {self._settings!r} ended the binlog stream"
                    )
                converted = self._convert(event)
                if converted is not None:
                    yield self._track(converted)
        except (pymysql.MySQLError, OSError, EOFError) as exc:
            if self._gtid is not None and _error_code(exc) == _ER_MASTER_FATAL_READING_BINLOG:
                raise SourceDivergedError(
                    f"source {self._settings!r} refused to send its binlog from GTID position "
                    f"{self._gtid}: {exc}. It does not hold the transactions the buffer has "
                    "(diverged or purged); DRC will not continue from it"
                ) from exc
            failed = f"binlog stream from {self._settings!r} failed"
            raise unavailable(self._settings, failed, exc) from exc

    def _packet(self) -> Any:
        """The next raw packet, or None to let the library read it (not connected yet, or the
        fast path is off)."""
        reader = self._reader
        if self._fast is None or not reader._BinLogStreamReader__connected_stream:
            return None
        return reader._stream_connection._read_packet()

    def _fast_decode(self, packet: Any) -> Any:
        assert self._fast is not None
        if self._reader.log_file != self._log_file:
            self._log_file = self._reader.log_file
            self._log_index = split_binlog_name(self._log_file)[1]
        if self._skipping:
            skipped = self._fast.skipped(packet._data)
            if skipped is not NOT_MINE:
                return skipped
        return self._fast.decode(packet._data, self._log_index, self._reader.table_map)

    def _track(self, event: SourceEvent) -> SourceEvent:
        """Note where a skip_replication transaction starts and ends (``skip_marked_rows``)."""
        if self._skip_marked:
            if isinstance(event, Begin):
                self._skipping = event.skip_replication
            elif isinstance(event, Commit | Statement):
                self._skipping = False
        return event

    def _library_event(self, packet: Any) -> Any:
        """The library's next event; ``packet``, already read, is the first it reads."""
        reader = self._reader
        if packet is not None:
            connection = reader._stream_connection

            def once(*_args: Any, **_kwargs: Any) -> Any:
                del connection._read_packet  # the method again for any further read
                return packet

            connection._read_packet = once
        try:
            event = reader.fetchone()
        finally:
            if packet is not None:
                reader._stream_connection.__dict__.pop("_read_packet", None)
        if self._fast_wanted and reader._BinLogStreamReader__connected_stream:
            lengths = reader._BinLogStreamReader__post_header_lengths
            if self._fast is None or lengths is not self._lengths:  # a format description
                old = self._fast
                checksum = reader._BinLogStreamReader__use_checksum
                self._fast = FastDecoder(checksum, lengths, self._schemas)
                self._lengths = lengths
                if old is not None:
                    self._fast.tables = old.tables
        return event

    def _position(self, event: Any) -> tuple[int, int]:
        return split_binlog_name(self._reader.log_file)[1], int(event.packet.log_pos)

    def _convert(self, event: Any) -> SourceEvent | None:
        if isinstance(event, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            return self._rows(event)
        if isinstance(event, TableMapEvent):
            # Cached TABLE_MAPs share their Table object: convert it once.
            table = event.table_obj
            schema = table.__dict__.get("_drc_schema")
            if schema is None:
                schema = table.__dict__["_drc_schema"] = table_schema_from_map(event)
            self._schemas[event.table_id] = schema
            if self._fast is not None:
                self._fast.remember(event.table_id, table, schema)
            return None
        if isinstance(event, MariadbGtidListEvent):
            return GtidList(tuple(g.gtid for g in event.gtid_list))
        if isinstance(event, MariadbGtidEvent):
            standalone = bool(event.flags & _GTID_STANDALONE)
            marked = bool(event.packet.flags & SKIP_REPLICATION_FLAG)
            return Begin(event.gtid, event.server_id, standalone, marked)
        if isinstance(event, XidEvent):
            return Commit(event.packet.server_id, event.timestamp, *self._position(event))
        if isinstance(event, QueryEvent):
            return self._query(event)
        if isinstance(event, HeartbeatLogEvent):
            return Heartbeat(*self._position(event))
        return None

    def _query(self, event: Any) -> SourceEvent | None:
        sql = event.query.strip() if isinstance(event.query, str) else event.query.decode().strip()
        word = sql.upper()
        if word == "COMMIT":
            return Commit(event.packet.server_id, event.timestamp, *self._position(event))
        if word in _TRANSACTION_CONTROL or word.startswith(("SAVEPOINT", "ROLLBACK TO")):
            return None
        schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        marked = bool(event.packet.flags & SKIP_REPLICATION_FLAG)
        return Statement(
            schema, sql, event.packet.server_id, event.timestamp, *self._position(event), marked
        )

    def _rows(self, event: Any) -> Rows | SkippedRows:
        table = self._schemas[event.table_id]
        if self._skipping:
            return SkippedRows(table)  # event.rows (the library decodes lazily) never read
        if isinstance(event, WriteRowsEvent):
            op, images = Op.INSERT, tuple((None, row["values"]) for row in event.rows)
        elif isinstance(event, DeleteRowsEvent):
            op, images = Op.DELETE, tuple((row["values"], None) for row in event.rows)
        else:
            op = Op.UPDATE
            images = tuple((row["before_values"], row["after_values"]) for row in event.rows)
        return Rows(table, op, images, int(event.event_size))


def _error_code(exc: BaseException) -> int | None:
    code = exc.args[0] if isinstance(exc, pymysql.MySQLError) and exc.args else None
    return code if isinstance(code, int) else None
