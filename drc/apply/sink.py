"""The target adapter: one apply connection to the local MariaDB, and what runs through it.

Only this module of drc.apply imports pymysql. Every session is set up the same way::

    connect: charset utf8mb4, autocommit off, CLIENT.FOUND_ROWS (affected rows = matched rows,
             which the idempotent writes of drc.apply.plan rely on), _binary'' for bytes
    SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION',
                time_zone = '+00:00', skip_replication = 1, @drc_apply = 1

``skip_replication = 1`` makes MariaDB flag every event this session writes, DDL included, so
the local replicator recognises it as DRC-originated even where no checkpoint row rides along.
``@drc_apply = 1`` tells DRC's tombstone triggers (drc.apply.tombstones) that the channel records
its deletes itself.

Round trips (the target executing is the apply's main wait, so Python work overlaps it)::

    WriteBatch chunk k     SAVEPOINT; w1; w2; ...   sent, results left unread ("in flight")
    render chunk k+1       while the server executes chunk k
    settle chunk k         read its counts; a fallback rolls back to the savepoint and runs
                           chunk k's writes one by one, before chunk k+1 is sent
    checkpoint + COMMIT    one round trip: ``upsert checkpoint;\nCOMMIT`` (the server stops a
                           multi-statement at its first error, so a failed checkpoint write
                           never commits)

Every other use of the connection settles the chunk in flight first (:meth:`_ready`), so
statements still reach the server in the order they were issued and every read sees every
earlier write; a failed attempt with a chunk in flight drops the connection.

Driver errors are translated here, once (:func:`translate`): lock conflicts, an unreachable or
read-only target become the retriable errors of drc.apply.errors, a duplicate key becomes
plan.DuplicateKey (the idempotent writes handle it), anything else a fatal ApplyError naming the
table. A connection that failed is dropped and reopened on next use.

DDL runs on a fresh connection of its own (same session settings), so each statement starts
with exactly the default database the source used (``USE`` it, or none).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pymysql
from pymysql.constants import CLIENT, COMMAND
from pymysql.converters import escape_string

from drc.apply import checkpoint, plan, sql
from drc.apply.errors import (
    ApplyError,
    LockConflictError,
    MissingTableError,
    TargetReadOnlyError,
    TargetTlsError,
    TargetUnavailableError,
)
from drc.apply.plan import DuplicateKey, Effects, TargetTable
from drc.apply.retry import Kind, classify
from drc.core.errors import DrcError
from drc.core.events import SchemaChange
from drc.tls import MysqlTls, tls_failure

log = logging.getLogger(__name__)

DDL_LOCK_WAIT_S = 60  # a DDL waiting on a metadata lock fails (1205) and is retried, not hung
SELECTS_PER_ROUND_TRIP = 200


@dataclass(frozen=True)
class TargetSettings:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    connect_timeout_s: float = 10.0
    tls: MysqlTls = MysqlTls(section="target")

    def __repr__(self) -> str:  # never print the password
        return f"TargetSettings({self.user}@{self.host}:{self.port})"


def translate(exc: BaseException, what: str) -> BaseException:
    """The DRC error for a driver error met while doing ``what``."""
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    text = exc.args[1] if len(exc.args) > 1 else str(exc)
    if code == 1062:
        return DuplicateKey(f"{what}: {text}")
    if isinstance(exc, OSError | EOFError) and not isinstance(exc, pymysql.MySQLError):
        return TargetUnavailableError(f"target connection failed while {what}: {exc}")
    kind = classify(code)
    if kind is Kind.LOCK_CONFLICT:
        return LockConflictError(f"target aborted {what}: ({code}) {text}", code or 0)
    if kind is Kind.READ_ONLY:
        return TargetReadOnlyError(f"target is read-only, refused {what}: ({code}) {text}")
    if kind is Kind.UNAVAILABLE:
        return TargetUnavailableError(f"target unavailable while {what}: ({code}) {text}")
    return ApplyError(f"target rejected {what}: ({code}) {text}", code)


_DRIVER_ERRORS = (pymysql.MySQLError, OSError, EOFError)


def _tls_refused(settings: TargetSettings, exc: BaseException) -> TargetTlsError | None:
    refused = tls_failure(exc)
    if refused is None:
        return None
    section = settings.tls.section
    return TargetTlsError(
        f"connecting to {settings!r} over TLS ({section}.tls = {settings.tls.mode!r}) was "
        f"refused: {refused}; check the {section}.tls keys against the server's certificate"
    )


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    data_type: str  # e.g. "datetime"
    definition: str  # COLUMN_TYPE with character set and collation: "varchar(20) CHARACTER .."
    datetime_precision: int | None


class TargetSession:
    """The channel's connection to the target (opened lazily, reopened after a failure)."""

    def __init__(
        self, settings: TargetSettings, connect: Callable[..., Any] = pymysql.connect
    ) -> None:
        self.settings = settings
        self._connect = connect
        self._conn: Any = None
        self._cursor: Any = None
        self._inflight: _InFlight | None = None  # a chunk sent, its results not read yet
        self._checkpoint: str | None = None  # a checkpoint write that rides with COMMIT
        self._tables: dict[tuple[str, str], TargetTable] = {}

    # ------------------------------------------------------------------ connection

    def open(self) -> None:
        if self._conn is None:
            conn = self._new_connection("connecting to the target", CLIENT.MULTI_STATEMENTS)
            self._conn, self._cursor = conn, conn.cursor()

    def _ready(self) -> None:
        """Open, with no chunk in flight and the deferred checkpoint write sent: the
        connection is free for the next statement, and every earlier write is done."""
        self.open()
        if self._inflight is not None:
            self.settle()
        if self._checkpoint is not None:
            text, self._checkpoint = self._checkpoint, None
            with _translated("writing the checkpoint"):
                self._cursor.execute(text)

    def close(self) -> None:
        conn, self._conn, self._cursor = self._conn, None, None
        self._inflight, self._checkpoint = None, None
        if conn is not None:
            try:
                conn.close()
            except _DRIVER_ERRORS:
                pass  # already gone

    def _new_connection(self, what: str, flags: int = 0) -> Any:
        s = self.settings
        tls = s.tls.pymysql_options()  # reads the TLS files: a ConfigError, not a retry
        with _translated(what):
            try:
                conn = self._connect(
                    host=s.host, port=s.port, user=s.user, password=s.password,
                    charset="utf8mb4", autocommit=False, client_flag=CLIENT.FOUND_ROWS | flags,
                    binary_prefix=True, connect_timeout=s.connect_timeout_s, **tls,
                )  # fmt: skip
            except _DRIVER_ERRORS as exc:
                refused = _tls_refused(s, exc)
                if refused is None:
                    raise
                raise refused from exc
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SET SESSION sql_mode = %s, time_zone = %s, skip_replication = 1, "
                        "@drc_apply = 1",
                        (sql.SESSION_SQL_MODE, sql.SESSION_TIME_ZONE),
                    )
            except BaseException:
                conn.close()
                raise
        return conn

    def recover(self, exc: BaseException) -> None:
        """After a failed attempt: roll back, or drop a connection that may be broken."""
        busy = self._inflight is not None  # results unread: the protocol is mid-exchange
        if isinstance(exc, TargetUnavailableError) or self._conn is None or busy:
            self.close()
            return
        self._checkpoint = None
        try:
            self._conn.rollback()
        except _DRIVER_ERRORS:
            self.close()

    # ------------------------------------------------------------------ statements

    def execute(self, statement: sql.Statement, what: str = "a statement") -> int:
        """Run one statement in the open transaction; returns matched/affected rows."""
        self._ready()
        with _translated(what):
            return int(self._cursor.execute(self.text(statement)))

    def executor(self, what: str) -> Callable[[sql.Statement], int]:
        return lambda statement: self.execute(statement, what)

    def text(self, statement: sql.Statement) -> str:
        """The statement with its values as literals, rendered exactly as pymysql would, with
        fast paths for the common types (the pinned sql_mode has no NO_BACKSLASH_ESCAPES)."""
        escape = self._conn.escape
        return statement.sql % tuple(_literal(v, escape) for v in statement.params)

    def batch(self) -> WriteBatch:
        self._ready()
        return WriteBatch(self)

    def run_batch(self, writes: Sequence[plan.Write]) -> Effects:
        """Run writes in one round trip; if one needs a fallback (a missing row, a duplicate
        key), roll back to before the batch and run them one by one (:func:`plan.run`)."""
        effects = Effects()
        self.send_batch(writes, effects)
        self.settle()
        return effects

    def send_batch(self, writes: Sequence[plan.Write], into: Effects) -> None:
        """Send writes as one multi-statement and return without waiting for the server;
        their effects are added to ``into`` when the chunk is settled (:meth:`settle`, or
        before the connection is next used). The text is rendered before the chunk already
        in flight is waited for, so rendering overlaps the server's work."""
        self.open()  # rendering needs the connection's escaping
        text = ";\n".join(["SAVEPOINT drc_batch", *(self.text(w.statement()) for w in writes)])
        self._ready()
        with _translated(f"a write to {writes[0].table.name}"):
            self._send(text)
        self._inflight = _InFlight(tuple(writes), into)

    def settle(self) -> None:
        """Wait for the chunk in flight, if any, and settle it (fallbacks included)."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        writes = inflight.writes
        try:
            with _translated(f"a write to {writes[0].table.name}"):
                counts = self._receive()[1:]
            settled = [plan.settled(w, n) for w, n in zip(writes, counts, strict=True)]
        except (DuplicateKey, ApplyError):
            settled = [None]
        if any(e is None for e in settled):
            self.execute(sql.Statement("ROLLBACK TO SAVEPOINT drc_batch", ()), "rolling back")
            settled = [plan.run(w, self.executor(f"a write to {w.table.name}")) for w in writes]
        for effects in settled:
            assert effects is not None
            inflight.into.add(effects)

    def _send(self, text: str) -> None:
        """COM_QUERY without reading the answer. pymysql has no public split of execute()
        into send and read, so this uses the two halves Connection.query() itself calls."""
        self._cursor._clear_result()
        self._conn._execute_command(COMMAND.COM_QUERY, text)

    def _receive(self) -> list[int]:
        """The affected-row count of every statement of the multi-statement just sent."""
        cursor, conn = self._cursor, self._conn
        conn._affected_rows = conn._read_query_result()
        cursor._do_get_result()
        counts = [cursor.rowcount]
        while cursor.nextset():
            counts.append(cursor.rowcount)
        return counts

    def query(self, statement: sql.Statement, what: str) -> list[tuple[Any, ...]]:
        self._ready()
        with _translated(what):
            self._cursor.execute(statement.sql, statement.params)
            return list(self._cursor.fetchall())

    def select_many(
        self, statements: Sequence[sql.Statement], what: str
    ) -> list[tuple[list[str], list[tuple[Any, ...]]]]:
        """Run SELECTs in few round trips; each one's column names and rows, in order."""
        self._ready()
        results: list[tuple[list[str], list[tuple[Any, ...]]]] = []
        cursor = self._cursor
        for start in range(0, len(statements), SELECTS_PER_ROUND_TRIP):
            chunk = statements[start : start + SELECTS_PER_ROUND_TRIP]
            with _translated(what):
                cursor.execute(";\n".join(self.text(s) for s in chunk))
                while True:
                    names = [d[0] for d in cursor.description or ()]
                    results.append((names, list(cursor.fetchall())))
                    if not cursor.nextset():
                        break
        return results

    def columns(self, schema: str, table: str) -> dict[str, ColumnInfo]:
        """The table's columns in order, as information_schema describes them."""
        rows = self.query(sql.Statement(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, "
            "DATETIME_PRECISION FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND "
            "TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table)), f"reading the columns of {schema}.{table}")  # fmt: skip
        out = {}
        for name, data_type, column_type, charset, collation, precision in rows:
            definition = column_type
            if charset:
                definition += f" CHARACTER SET {charset} COLLATE {collation}"
            out[name] = ColumnInfo(data_type, definition, precision)
        return out

    def base_tables(self) -> list[tuple[str, str]]:
        """Every application table on the target (system schemas and drc left out)."""
        rows = self.query(sql.Statement(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = "
            "'BASE TABLE' AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', "
            "'performance_schema', 'sys', 'drc')", ()), "listing the tables")  # fmt: skip
        return [(r[0], r[1]) for r in rows]

    def run_setup(self, statements: Sequence[str], what: str) -> None:
        """Schema statements of DRC's own (drc.* tables, triggers), committed."""
        self._ready()
        with _translated(what):
            for statement in statements:
                self._cursor.execute(statement)
            self._conn.commit()

    def commit(self) -> None:
        """Commit; a deferred checkpoint write goes in the same round trip, just before."""
        self.open()
        if self._inflight is not None:
            self.settle()
        text, self._checkpoint = self._checkpoint, None
        if text is None:
            with _translated("committing"):
                self._conn.commit()
            return
        with _translated("writing the checkpoint and committing"):
            self._cursor.execute(text + ";\nCOMMIT")
            while self._cursor.nextset():
                pass

    # ------------------------------------------------------------------ tables

    def table(self, schema: str, table: str, refresh: bool = False) -> TargetTable:
        """The target table's columns and primary key, cached (``refresh``: read again, e.g.
        when a column seems missing: someone may have altered the table); MissingTableError
        if there is no such table."""
        key = (schema, table)
        found = self._tables.get(key)
        if found is None or refresh:
            found = self._tables[key] = self._describe(schema, table)
        return found

    def forget_tables(self) -> None:
        """After DDL: table definitions are read again on next use."""
        self._tables.clear()

    def _describe(self, schema: str, table: str) -> TargetTable:
        what = f"reading the definition of {schema}.{table}"
        columns = self.query(sql.Statement(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table)), what)  # fmt: skip
        if not columns:
            raise MissingTableError(
                f"the target has no table {schema}.{table} for the changes the source makes to "
                "it: create it on the target (or map the source table with map_tables); "
                "nothing after the last checkpoint was applied"
            )
        key = self.query(sql.Statement(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (schema, table)), what)  # fmt: skip
        return TargetTable(schema, table, tuple(r[0] for r in columns), tuple(r[0] for r in key))

    def local_row(
        self, schema: str, table: str, key: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """The target's row for ``key`` as the open transaction sees it (conflict checks)."""
        where = sql.by_keys(list(key), [list(key.values())])
        statement = sql.Statement(
            f"SELECT * FROM {sql.table_name(schema, table)} WHERE {where.sql}", where.params
        )
        self._ready()
        with _translated(f"reading a row of {schema}.{table}"):
            self._cursor.execute(statement.sql, statement.params)
            row = self._cursor.fetchone()
            names = [d[0] for d in self._cursor.description]
        return None if row is None else dict(zip(names, row, strict=True))

    # ------------------------------------------------------------------ checkpoint and DDL

    def ensure_checkpoint_table(self) -> None:
        self._ready()
        with _translated("creating the checkpoint table"):
            for statement in checkpoint.create_statements():
                self._cursor.execute(statement)
            existing = self.table("drc", "checkpoint").columns
            for statement in checkpoint.add_missing_columns(set(existing)):
                log.info("upgrading the checkpoint table: %s", statement)
                self._cursor.execute(statement)
            self._conn.commit()
        self.forget_tables()

    def read_checkpoint(self, channel: str) -> checkpoint.CheckpointRow | None:
        rows = self.query(checkpoint.select(channel), "reading the checkpoint")
        self.commit()  # start the first apply transaction with a fresh snapshot
        return checkpoint.parse(channel, rows[0]) if rows else None

    def write_checkpoint(self, row: checkpoint.CheckpointRow) -> None:
        """Write the checkpoint row in the open transaction. The statement is sent with the
        next COMMIT (one round trip fewer per group), or before any other statement."""
        self._ready()
        self._checkpoint = self.text(checkpoint.upsert(row))

    def run_ddl(self, change: SchemaChange, tolerate: frozenset[int]) -> bool:
        """Run a DDL statement as the source did; False if it failed with a tolerated code."""
        what = f"DDL {change.statement[:200]!r}"
        conn = self._new_connection(what)
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = %s", (DDL_LOCK_WAIT_S,))
                if change.schema:
                    _use(cur, change.schema)
                cur.execute(change.statement)  # no parameters: the text runs as written
            return True
        except pymysql.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            if code in tolerate:
                log.info("DDL already applied before a restart (%s): %s", code, what)
                return False
            raise translate(exc, what) from exc
        except (OSError, EOFError) as exc:
            raise translate(exc, what) from exc
        finally:
            try:
                conn.close()
            except _DRIVER_ERRORS:
                pass


def _literal(value: Any, escape: Callable[[Any], str]) -> str:
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is str:
        return "'" + escape_string(value) + "'"
    if value is None:
        return "NULL"
    if kind is Decimal:
        return format(value, "f") if value.is_finite() else escape(value)
    if kind is dt.datetime and value.tzinfo is None:
        return "'" + value.isoformat(" ") + "'"
    return escape(value)


class WriteBatch:
    """Writes collected into multi-statement round trips of bounded size."""

    MAX_STATEMENTS = 200
    MAX_BYTES = 2 << 20

    def __init__(self, session: TargetSession) -> None:
        self._session = session
        self._writes: list[plan.Write] = []
        self._bytes = 0
        self.effects = Effects()

    def extend(self, writes: Sequence[plan.Write]) -> None:
        for write in writes:
            self._writes.append(write)
            self._bytes += _size(write)
            if len(self._writes) >= self.MAX_STATEMENTS or self._bytes >= self.MAX_BYTES:
                self.flush()

    def flush(self) -> None:
        writes, self._writes, self._bytes = self._writes, [], 0
        if len(writes) == 1:
            what = f"a write to {writes[0].table.name}"
            self.effects.add(plan.run(writes[0], self._session.executor(what)))
        elif writes:
            self._session.send_batch(writes, self.effects)  # settled before the next use

    def finish(self) -> Effects:
        self.flush()
        self._session.settle()
        return self.effects


@dataclass(frozen=True, slots=True)
class _InFlight:
    writes: tuple[plan.Write, ...]
    into: Effects  # where the chunk's effects are added once settled


def _size(write: plan.Write) -> int:
    rows = len(write.rows) if isinstance(write, plan.Upsert) else 1
    return 64 * rows * len(getattr(write, "columns", ())) + 64


def _use(cursor: Any, schema: str) -> None:
    try:
        cursor.execute(f"USE {sql.quote(schema)}")
    except pymysql.MySQLError as exc:
        if not exc.args or exc.args[0] != 1049:  # unknown database: run without a default one
            raise


@contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except DrcError:
        raise
    except _DRIVER_ERRORS as exc:
        raise translate(exc, what) from exc
