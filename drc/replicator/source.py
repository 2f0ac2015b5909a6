"""The binlog adapter: check the source, and read its binlog as DRC source events.

python-mysql-replication opens the replication connection and starts the dump; the packets are
read and decoded in drc.replicator.binlog (the library still parses the rare TABLE_MAP, QUERY
and FORMAT_DESCRIPTION events there). This module owns positions: every connection starts
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
    FormatDescriptionEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    MariadbGtidListEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from drc.core.errors import (
    BinlogPurgedError,
    SourceConfigError,
    SourceDivergedError,
    SourceUnavailableError,
)
from drc.core.scn import split_binlog_name
from drc.replicator.binlog.events import FOR_LIBRARY, SKIP_REPLICATION, EventDecoder, TableMaps
from drc.replicator.binlog.library import PARSED, LibraryParser
from drc.replicator.binlog.wire import Tap
from drc.replicator.source_events import (
    Begin,
    Commit,
    GtidList,
    SourceEvent,
    Statement,
)
from drc.tls import MysqlTls, tls_failure

log = logging.getLogger(__name__)

# Errors in this list make the library silently reconnect at its own (possibly mid-transaction)
# position. Emptied, they reach us and we resume from the buffer's last SCN instead.
binlogstream.MYSQL_EXPECTED_ERROR_CODES = []
# Events DRC decodes itself (drc.replicator.binlog.events), should the library meet one first.
_DECODED = (
    MariadbGtidEvent, XidEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, HeartbeatLogEvent,
)  # fmt: skip
TABLE_MAPS = TableMaps()  # shared by every connection: the same bytes, the same parse
_ER_MASTER_FATAL_READING_BINLOG = 1236
_TRANSACTION_CONTROL = {"BEGIN", "XA START", "SAVEPOINT"}
_CONTROL_PREFIXES = ("SAVEPOINT", "ROLLBACK TO", "XA START", "XA END")
# The group that commits or rolls back a prepared XA transaction (whose rows were in the
# PREPARE's group, drc.replicator.assembler): it holds nothing else, so it ends here.
_XA_DECIDED = ("XA COMMIT", "XA ROLLBACK")


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


def check_not_purged(info: SourceInfo, log_file: str, log_pos: int, after: str) -> None:
    """Refuse to resume at ``log_file``:``log_pos`` when the source no longer holds that file:
    reading on from its oldest binlog would silently skip every change in between."""
    if log_file not in info.binlogs:
        oldest = info.binlogs[0] if info.binlogs else "none"
        raise BinlogPurgedError(
            f"binlog {log_file} (position {log_file}:{log_pos}), needed to resume after "
            f"{after}, is no longer on the source (its oldest binlog is {oldest}); DRC will "
            "not skip ahead, and retrying cannot help. Restore that binlog file to the source, "
            "or start this replicator again from a new position: move its buffer_dir aside, "
            'start it with [replicator] start_from = "current", then copy the tables again '
            "to every datacenter that applies this one with `drc snapshot --channel NAME` "
            "(docs/operations.md, Binlog purged)"
        )


class BinlogStream:
    """One connection's events from (log_file, log_pos) on, until ``stop`` is set.

    python-mysql-replication connects and starts the dump; DRC reads the packets after its
    first event (drc.replicator.binlog.wire) and decodes them (drc.replicator.binlog.events),
    handing the few it does not decode back to the library's parser."""

    def __init__(
        self,
        settings: SourceSettings,
        log_file: str | None,
        log_pos: int | None,
        gtid: str | None = None,
        blocking: bool = True,
        server_id: int | None = None,
        skip_marked_rows: bool = False,
    ) -> None:
        """From (log_file, log_pos), or with ``gtid`` from that ``@slave_connect_state`` (the
        server then checks, strictly, that its binlog holds that position). ``blocking=False``
        ends at the binlog's current end; ``server_id`` overrides the replica id presented.
        ``skip_marked_rows``: the rows events of a transaction whose GTID event carries the
        skip_replication flag (DRC's apply sessions) come as :class:`SkippedRows`, their row
        images never decoded (``[replicator] drc_applied = "marker"``)."""
        self._settings = settings
        self._gtid = gtid
        self._blocking = blocking
        self._tap = Tap()
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
            pymysql_wrapper=self._tap.connect,
            # The library reads only the first event: any of these ends its search.
            only_events=[RotateEvent, FormatDescriptionEvent, *PARSED, *_DECODED],
        )
        self._decoder = EventDecoder(TABLE_MAPS, None if gtid else log_file)
        self._skip_marked = skip_marked_rows
        self._skipping = False  # inside a skip_replication transaction, rows left undecoded

    def close(self) -> None:
        self._reader.close()

    def events(self, stop: threading.Event) -> Iterator[SourceEvent]:
        try:
            if stop.is_set():
                return
            first = self._reader.fetchone()  # connects and starts the dump
            if first is None:
                self._ended()
                return
            # The library's own size for the event says whether events end with a checksum.
            self._decoder.checksum = first.packet.event_size - first.event_size == 23
            library = LibraryParser(self._tap.control, self._decoder)
            frames = self._tap.frames()
            data: bytes | None = first.packet.packet.get_all_data()
            while data is not None:
                decoded = self._decoder.decode(data, self._skipping)
                if decoded is FOR_LIBRARY:
                    event = self._convert(library.parse(data))
                else:
                    event = decoded
                if event is not None:
                    yield self._track(event)
                if stop.is_set():
                    return
                data = frames.next()
            self._ended()
        except (pymysql.MySQLError, OSError, EOFError) as exc:
            if self._gtid is not None and _error_code(exc) == _ER_MASTER_FATAL_READING_BINLOG:
                raise SourceDivergedError(
                    f"source {self._settings!r} refused to send its binlog from GTID position "
                    f"{self._gtid}: {exc}. It does not hold the transactions the buffer has "
                    "(diverged or purged); DRC will not continue from it"
                ) from exc
            failed = f"binlog stream from {self._settings!r} failed"
            raise unavailable(self._settings, failed, exc) from exc

    def _ended(self) -> None:
        """The server ended the stream: the end of the binlog for a non-blocking read."""
        if self._blocking:
            raise SourceUnavailableError(f"source {self._settings!r} ended the binlog stream")

    def _track(self, event: SourceEvent) -> SourceEvent:
        """Note where a skip_replication transaction starts and ends (``skip_marked_rows``)."""
        if self._skip_marked:
            if isinstance(event, Begin):
                self._skipping = event.skip_replication
            elif isinstance(event, Commit | Statement):
                self._skipping = False
        return event

    def _convert(self, event: Any) -> SourceEvent | None:
        """The source event of a packet the library parsed (None for nothing to report)."""
        if isinstance(event, MariadbGtidListEvent):
            return GtidList(tuple(g.gtid for g in event.gtid_list))
        if isinstance(event, QueryEvent):
            return self._query(event)
        return None  # a FORMAT_DESCRIPTION or TABLE_MAP: the decoder took it in

    def _query(self, event: Any) -> SourceEvent | None:
        position = (self._decoder.log_index, int(event.packet.log_pos))
        server_id, timestamp = event.packet.server_id, event.timestamp
        sql = event.query.strip() if isinstance(event.query, str) else event.query.decode().strip()
        word = sql.upper()
        if word == "COMMIT" or word.startswith(_XA_DECIDED):
            return Commit(server_id, timestamp, *position)
        if word in _TRANSACTION_CONTROL or word.startswith(_CONTROL_PREFIXES):
            return None
        schema = event.schema.decode() if isinstance(event.schema, bytes) else event.schema
        marked = bool(event.packet.flags & SKIP_REPLICATION)
        return Statement(schema, sql, server_id, timestamp, *position, marked)


def _error_code(exc: BaseException) -> int | None:
    code = exc.args[0] if isinstance(exc, pymysql.MySQLError) and exc.args else None
    return code if isinstance(code, int) else None
