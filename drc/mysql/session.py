"""A session on a server DRC writes into: one connection, set up the same way every time.

    connect: charset utf8mb4, autocommit off, CLIENT.FOUND_ROWS (affected rows = matched rows,
             which the idempotent writes of drc.apply.plan rely on), _binary'' for bytes
    SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION',
                time_zone = '+00:00', skip_replication = 1, @drc_apply = 1

``skip_replication = 1`` makes MariaDB flag every event this session writes, DDL included, so
the local replicator recognises it as DRC-originated even where no checkpoint row rides along.
``@drc_apply = 1`` tells DRC's tombstone triggers (drc.conflicts.tombstones) that the channel
records its deletes itself.

One statement per command, never a multi-statement: the connection is opened without
CLIENT.MULTI_STATEMENTS, so a ``;`` that got into a statement's text is a syntax error, never
a second statement. Speed comes from pipelining instead (:meth:`Session.send`, then
:meth:`Session.receive`: drc.mysql.protocol's Wire): several commands sent back to back, every
reply read afterwards in order (the server runs one command at a time, in the order received).
A pipelined statement goes out as text: its values are written by drc.mysql.sql.literal with
the connection's escaping, which follows the server's NO_BACKSLASH_ESCAPES status flag (the
session pins a sql_mode without it anyway). :meth:`Session.select_many` pipelines SELECTs, at
most :data:`SELECT_BYTES_PER_ROUND_TRIP` of text at a time (the server may block writing a large
answer before it reads the next command, so every command must fit in the socket buffers
meanwhile). drc.apply.sink pipelines writes.

Every other statement first settles what is in flight (:meth:`Session.ready`), so statements
reach the server in the order they were issued. Driver errors are translated once, here and in
drc.mysql.driver (lock conflicts, an unreachable or read-only server become retriable errors, a
duplicate key DuplicateKey, anything else a fatal ApplyError naming what was being done); a
connection that failed is dropped and reopened on next use.

DDL runs on a fresh connection of its own (same session settings; drc.mysql.ddl), so each
statement starts with exactly the default database the source used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from drc.core.target_errors import TargetTlsError, TargetUnavailableError
from drc.mysql import sql
from drc.mysql.ddl import DDL_LOCK_WAIT_S, DdlSession
from drc.mysql.driver import DRIVER_ERRORS, FOUND_ROWS, TargetSettings, open_link, translated
from drc.mysql.errors import translate
from drc.tls import tls_failure

SELECTS_PER_ROUND_TRIP = 200
SELECT_BYTES_PER_ROUND_TRIP = 64 << 10  # characters of pipelined SELECT text per round trip


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    data_type: str  # e.g. "datetime"
    definition: str  # COLUMN_TYPE with character set and collation: "varchar(20) CHARACTER .."
    datetime_precision: int | None
    nullable: bool = True


class Session:
    """A connection to a server (opened lazily, reopened after a failure). ``connect`` makes
    it: drc.mysql.driver.open_link, or a fake in unit tests."""

    def __init__(self, settings: TargetSettings, connect: Callable[..., Any] = open_link) -> None:
        self.settings = settings
        self._connect = connect
        self._conn: Any = None
        self._cursor: Any = None
        self._unread = 0  # commands sent whose replies were not read yet

    @property
    def connect(self) -> Callable[..., Any]:
        """How this session makes its connections (another session of it makes them alike)."""
        return self._connect

    # ------------------------------------------------------------------ connection

    def open(self) -> None:
        if self._conn is None:
            conn = self._new_connection("connecting to the target")
            self._conn, self._cursor = conn, conn.cursor()

    def ready(self) -> None:
        """Open, with nothing in flight: the connection is free for the next statement, and
        every earlier statement is done and its reply checked."""
        self.open()
        if self._unread:
            self.settle()

    def settle(self) -> None:
        """Read every reply in flight and act on it: what a session that pipelines does; a
        plain one reads all it sends at once and has nothing to settle."""

    def close(self) -> None:
        conn, self._conn, self._cursor = self._conn, None, None
        self._unread = 0
        if conn is not None:
            try:
                conn.close()
            except DRIVER_ERRORS:
                pass  # already gone

    def recover(self, exc: BaseException) -> None:
        """After a failed attempt: roll back, or drop a connection that may be broken (or that
        has replies unread: the protocol is mid-exchange)."""
        if isinstance(exc, TargetUnavailableError) or self._conn is None or self._unread:
            self.close()
            return
        try:
            self._conn.rollback()
        except DRIVER_ERRORS:
            self.close()

    def _new_connection(self, what: str) -> Any:
        s = self.settings
        with translated(what):
            try:
                conn = self._connect(
                    host=s.host, port=s.port, user=s.user, password=s.password,
                    charset="utf8mb4", autocommit=False, client_flag=FOUND_ROWS,
                    binary_prefix=True, connect_timeout=s.connect_timeout_s, tls=s.tls,
                )  # fmt: skip
            except DRIVER_ERRORS as exc:
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

    # ------------------------------------------------------------------ statements

    def text(self, statement: sql.Statement) -> str:
        """The statement with its values written in (drc.mysql.sql.literal), exactly as
        pymysql would render it; the session must be open."""
        return sql.render(statement, self._conn.escape)

    def execute(self, statement: sql.Statement, what: str = "a statement") -> int:
        """Run one statement in the open transaction; returns matched/affected rows."""
        self.ready()
        return self.execute_sql(self.text(statement), what)

    def execute_sql(self, text: str, what: str) -> int:
        """Run SQL text that holds its values as literals already (the rows a snapshot's origin
        rendered, drc.snapshot.rows; a statement rendered by :meth:`text`)."""
        self.ready()
        with translated(what):
            return int(self._cursor.execute(text))

    def executor(self, what: str) -> Callable[[sql.Statement], int]:
        return lambda statement: self.execute(statement, what)

    def query(self, statement: sql.Statement, what: str) -> list[tuple[Any, ...]]:
        return self.read(statement, what)[1]

    def read(self, statement: sql.Statement, what: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A SELECT's column names and rows, in the open transaction."""
        self.ready()
        with translated(what):
            self._cursor.execute(statement.sql, statement.params)
            rows = list(self._cursor.fetchall())
            return [d[0] for d in self._cursor.description or ()], rows

    def commit(self) -> None:
        """Commit, once every reply in flight was read and checked: COMMIT is never pipelined
        behind a statement that might have failed."""
        self.ready()
        with translated("committing"):
            self._conn.commit()

    def run_setup(self, statements: Sequence[str], what: str) -> None:
        """Schema statements of DRC's own (drc.* tables, triggers), committed."""
        self.ready()
        with translated(what):
            for statement in statements:
                self._cursor.execute(statement)
            self._conn.commit()

    # ------------------------------------------------------------------ pipelining

    def send(self, texts: Sequence[str], what: str) -> None:
        """Send every text as a command of its own, back to back, replies left unread (read
        them with :meth:`receive`, in order). A failed send leaves the protocol mid-exchange:
        the connection is dropped."""
        with self._dropped_on_failure(what):
            self._conn.send(texts)
        self._unread += len(texts)

    def receive(self, count: int, what: str) -> list[Any]:
        """The next ``count`` replies, in order: each a reply (``affected_rows``, ``rows``,
        ``names``) or the server's error for that statement, kept in its place while the rest
        are still read. A broken connection (nothing more can be read), or anything else that
        stops the reading half-way, drops the connection."""
        conn, replies = self._conn, []
        with self._dropped_on_failure(what):
            for _ in range(count):
                replies.append(conn.receive())
                self._unread -= 1
        return replies

    @contextmanager
    def _dropped_on_failure(self, what: str) -> Iterator[None]:
        """Pipelining stopped half-way leaves the protocol mid-exchange: whatever stopped it,
        the connection is dropped (a driver error is translated)."""
        try:
            with translated(what):
                yield
        except BaseException:
            self.close()
            raise

    def select_many(
        self, statements: Sequence[sql.Statement], what: str
    ) -> list[tuple[list[str], list[tuple[Any, ...]]]]:
        """Run SELECTs in few round trips (pipelined); each one's column names and rows, in
        order. A failed one is raised once every reply of its round trip was read."""
        self.ready()
        results: list[tuple[list[str], list[tuple[Any, ...]]]] = []
        for texts in select_rounds([self.text(s) for s in statements]):
            self.send(texts, what)
            for reply in self.receive(len(texts), what):
                if failed(reply):
                    raise translate(reply, what) from reply
                results.append((list(reply.names), list(reply.rows)))
        return results

    # ------------------------------------------------------------------ definitions and DDL

    def columns(self, schema: str, table: str) -> dict[str, ColumnInfo]:
        """The table's columns in order, as information_schema describes them."""
        rows = self.query(sql.Statement(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, "
            "DATETIME_PRECISION, IS_NULLABLE FROM information_schema.COLUMNS WHERE "
            "TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table)), f"reading the columns of {schema}.{table}")  # fmt: skip
        out = {}
        for name, data_type, column_type, charset, collation, precision, nullable in rows:
            definition = column_type
            if charset:
                definition += f" CHARACTER SET {charset} COLLATE {collation}"
            out[name] = ColumnInfo(data_type, definition, precision, nullable == "YES")
        return out

    def base_tables(self) -> list[tuple[str, str]]:
        """Every application table on the server (system schemas and drc left out)."""
        rows = self.query(sql.Statement(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = "
            "'BASE TABLE' AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', "
            "'performance_schema', 'sys', 'drc')", ()), "listing the tables")  # fmt: skip
        return [(r[0], r[1]) for r in rows]

    @contextmanager
    def ddl_session(self, what: str) -> Iterator[DdlSession]:
        """A connection of its own for one replicated DDL (same session settings; each
        statement starts with exactly the default database the source used)."""
        conn = self._new_connection(what)
        try:
            with translated(what), conn.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = %s", (DDL_LOCK_WAIT_S,))
            yield DdlSession(conn, what)
        finally:
            try:
                conn.close()
            except DRIVER_ERRORS:
                pass


def failed(reply: Any) -> bool:
    """Whether a reply :meth:`Session.receive` read is the server's error."""
    return isinstance(reply, BaseException)


def select_rounds(texts: list[str]) -> Iterator[list[str]]:
    """The texts in runs of at most SELECTS_PER_ROUND_TRIP and SELECT_BYTES_PER_ROUND_TRIP."""
    run: list[str] = []
    size = 0
    for text in texts:
        full = len(run) >= SELECTS_PER_ROUND_TRIP or size + len(text) > SELECT_BYTES_PER_ROUND_TRIP
        if run and full:
            yield run
            run, size = [], 0
        run.append(text)
        size += len(text)
    if run:
        yield run


def _tls_refused(settings: TargetSettings, exc: BaseException) -> TargetTlsError | None:
    refused = tls_failure(exc)
    if refused is None:
        return None
    section = settings.tls.section
    return TargetTlsError(
        f"connecting to {settings!r} over TLS ({section}.tls = {settings.tls.mode!r}) was "
        f"refused: {refused}; check the {section}.tls keys against the server's certificate"
    )
