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

One statement per command, never a multi-statement: the connection is opened without
CLIENT.MULTI_STATEMENTS, so a ``;`` that got into a statement's text is a syntax error, never
a second statement. Speed comes from pipelining instead: several COM_QUERY packets are sent
back to back without reading, then every reply is read in order (the server runs one command
at a time, in the order received). Round trips (the target executing is the apply's main wait,
so Python work overlaps it)::

    WriteBatch chunk k     SAVEPOINT, w1, w2, ...   sent, replies left unread ("in flight")
    render chunk k+1       while the server executes chunk k
    send chunk k+1         before chunk k is read: the server always has the next chunk
                           queued, and never waits while the replies are read
    settle chunk k         read every reply while the server executes chunk k+1; a fallback
                           reads chunk k+1's replies too, rolls back to chunk k's savepoint
                           (undoing both), runs chunk k's writes one by one and sends chunk
                           k+1 again (the two chunks' savepoints have different names)
    checkpoint             sent behind the last chunk, unread
    COMMIT                 sent only once every reply, the checkpoint's included, was read and
                           checked: a failed write or checkpoint never commits

Unlike a multi-statement, a pipeline does not stop at its first error: the statements after a
failed one still run. So every reply is always read (a connection with replies unread is
dropped, never reused), a failed write is undone by the chunk's ROLLBACK TO SAVEPOINT, and a
deadlock or lock wait timeout anywhere in the chunk fails the whole attempt: the server rolled
back the transaction (deadlock), the statements after it ran in a new one, and the channel's
retry (:meth:`TargetSession.recover`) rolls that back too. Only small OK and error packets come
back for writes, so a chunk of megabytes cannot stall on full socket buffers; SELECTs, whose
answers may be large, are pipelined in at most :data:`SELECT_BYTES_PER_ROUND_TRIP` of text.

Every other use of the connection settles the chunk in flight first (:meth:`_ready`), so
statements still reach the server in the order they were issued and every read sees every
earlier write.

Values are rendered client-side by :meth:`TargetSession.text` with pymysql's escaping, which
follows the server's NO_BACKSLASH_ESCAPES status flag (the session pins a sql_mode without it
anyway); the only value DRC writes into SQL text by itself is drc.apply.sql.text_literal's.

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
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import pymysql
from pymysql.constants import CLIENT, COMMAND

from drc.apply import checkpoint, plan, sql
from drc.apply.plan import DuplicateKey, Effects
from drc.apply.retry import Kind, classify
from drc.conflicts.probes import Observed, Probe, ProbePlan
from drc.core.errors import DrcError
from drc.core.events import SchemaChange
from drc.core.target_errors import (
    ApplyError,
    LockConflictError,
    MissingTableError,
    TargetReadOnlyError,
    TargetTlsError,
    TargetUnavailableError,
)
from drc.core.target_table import TargetTable
from drc.tls import MysqlTls, tls_failure

log = logging.getLogger(__name__)

DDL_LOCK_WAIT_S = 60  # a DDL waiting on a metadata lock fails (1205) and is retried, not hung
SELECTS_PER_ROUND_TRIP = 200
# Chunks of writes sent and not read yet: two keep the server busy while the apply reads one.
CHUNKS_IN_FLIGHT = 2
_SAVEPOINTS = ("drc_batch", "drc_batch_b")  # chunks in flight at once never share a name
# Pipelined SELECT text per round trip (characters): the server may block writing a large answer
# before it reads the next command, so every command must fit in the socket buffers meanwhile.
SELECT_BYTES_PER_ROUND_TRIP = 64 << 10


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
        self._inflight: deque[_InFlight] = deque()  # sent, replies not read yet; oldest first
        self._reply_seq: deque[int] = deque()  # the packet number each unread reply starts at
        self._tables: dict[tuple[str, str], TargetTable] = {}

    # ------------------------------------------------------------------ connection

    def open(self) -> None:
        if self._conn is None:
            conn = self._new_connection("connecting to the target")
            self._conn, self._cursor = conn, conn.cursor()

    def _ready(self) -> None:
        """Open, with nothing in flight: the connection is free for the next statement, and
        every earlier statement is done and its reply checked."""
        self.open()
        if self._inflight:
            self.settle()

    def close(self) -> None:
        conn, self._conn, self._cursor = self._conn, None, None
        self._inflight.clear()
        self._reply_seq.clear()
        if conn is not None:
            try:
                conn.close()
            except _DRIVER_ERRORS:
                pass  # already gone

    def _new_connection(self, what: str) -> Any:
        s = self.settings
        tls = s.tls.pymysql_options()  # reads the TLS files: a ConfigError, not a retry
        with _translated(what):
            try:
                conn = self._connect(
                    host=s.host, port=s.port, user=s.user, password=s.password,
                    charset="utf8mb4", autocommit=False, client_flag=CLIENT.FOUND_ROWS,
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
        busy = bool(self._inflight)  # replies unread: the protocol is mid-exchange
        if isinstance(exc, TargetUnavailableError) or self._conn is None or busy:
            self.close()
            return
        try:
            self._conn.rollback()
        except _DRIVER_ERRORS:
            self.close()

    # ------------------------------------------------------------------ statements

    def execute(self, statement: sql.Statement, what: str = "a statement") -> int:
        """Run one statement in the open transaction; returns matched/affected rows."""
        self._ready()
        return self._execute_text(self.text(statement), what)

    def execute_sql(self, text: str, what: str) -> int:
        """Run SQL text that holds its values as literals already (rows a snapshot's origin
        rendered: drc.snapshot.rows), in the open transaction."""
        return self._execute_text(text, what)

    def executor(self, what: str) -> Callable[[sql.Statement], int]:
        return lambda statement: self.execute(statement, what)

    def text(self, statement: sql.Statement) -> str:
        """The statement with its values as literals, rendered exactly as pymysql would (with
        fast paths for types whose literal has no quote or backslash to escape)."""
        escape = self._conn.escape
        return statement.sql % tuple(_literal(v, escape) for v in statement.params)

    def batch(self) -> WriteBatch:
        self.open()  # a read sent ahead (send_read) rides with the batch's first chunk
        return WriteBatch(self)

    def probe(self, probes: Sequence[Probe]) -> list[Observed]:
        """What the target holds for each probe, read and locked in the open transaction
        (batched: drc.apply.conflicts.ProbePlan), in probe order."""
        if not probes:
            return []
        planned = ProbePlan(probes)
        what = "reading target rows to check conflicts"
        return planned.observe(self.select_many(planned.statements, what))

    def write(
        self,
        writes: Iterable[plan.Write],
        extra: Sequence[sql.Statement],
        row: checkpoint.CheckpointRow,
        before_commit: Callable[[], None] | None = None,
    ) -> Effects:
        """Writes, then ``extra`` (conflict log, tombstones), then the checkpoint row, and
        COMMIT: one target transaction. The writes are pipelined in chunks (WriteBatch).
        ``before_commit`` runs once every reply was read, before COMMIT is sent: raising there
        leaves the transaction open for the caller to roll back."""
        batch = self.batch()
        batch.extend(writes)
        batch.flush()  # left in flight: the checkpoint write is pipelined behind it
        for statement in extra:
            self.execute(statement, "recording conflicts and tombstones")
        self.write_checkpoint(row)
        if before_commit is not None:
            self._ready()  # every reply read and checked: batch.effects is complete
            before_commit()
        self.commit()  # reads every reply first, so batch.effects is complete
        return batch.effects

    def run_batch(self, writes: Sequence[plan.Write]) -> Effects:
        """Run writes in one round trip; if one needs a fallback (a missing row, a duplicate
        key), roll back to before the batch and run them one by one (:func:`plan.run`)."""
        effects = Effects()
        self.send_batch(writes, effects)
        self.settle()
        return effects

    def send_batch(self, writes: Sequence[plan.Write], into: Effects) -> None:
        """Send a savepoint and the writes, pipelined, and return without waiting for the
        server; their effects are added to ``into`` when the chunk is settled (:meth:`settle`,
        or before the connection is next used). The text is rendered while the chunks already
        in flight run, and sent before the last of them is read: at most
        :data:`CHUNKS_IN_FLIGHT` chunks are unread at once."""
        self.open()  # rendering needs the connection's escaping
        lead = self._lead_alone()
        # Only the newest chunk in flight may still be unread once room is made for this one.
        newest = self._inflight[-1].savepoint if self._inflight else ""
        savepoint = _SAVEPOINTS[1] if newest == _SAVEPOINTS[0] else _SAVEPOINTS[0]
        texts = [f"SAVEPOINT {savepoint}", *(self.text(w.statement()) for w in writes)]
        self._make_room()
        self._send(texts, f"a write to {writes[0].table.name}")
        self._inflight.append(_InFlight(tuple(writes), into, lead=lead, savepoint=savepoint))

    def _make_room(self) -> None:
        """Settle what is in flight until one more chunk of writes may follow it: only plain
        chunks of writes (no checkpoint behind them) stay, and fewer than CHUNKS_IN_FLIGHT."""
        inflight = self._inflight
        while inflight and (
            len(inflight) >= CHUNKS_IN_FLIGHT
            or inflight[-1].checkpoint is not None
            or not inflight[-1].writes
        ):
            self._settle_oldest()

    def send_read(self, statement: sql.Statement, on_rows: Callable[[list[Any]], None]) -> None:
        """Send a read and return without waiting for it: the next chunk of writes and the
        checkpoint write are sent behind it, and ``on_rows`` gets its rows when their replies
        are read, so the read costs no round trip of its own. Nothing may be in flight."""
        self._ready()
        self._send([self.text(statement)], "a read sent ahead of the writes")
        self._inflight.append(_InFlight((), Effects(), lead=on_rows))

    def _lead_alone(self) -> Callable[[list[Any]], None] | None:
        """A read in flight alone (:meth:`send_read`), taken to ride with the next chunk."""
        if len(self._inflight) != 1:
            return None
        inflight = self._inflight[0]
        if inflight.lead is None or inflight.writes or inflight.checkpoint:
            return None
        self._inflight.clear()
        return inflight.lead

    def settle(self) -> None:
        """Read every reply in flight, if any, and settle the chunks (fallbacks included)."""
        while self._inflight:
            self._settle_oldest()

    def _settle_oldest(self) -> None:
        """Read the replies of the oldest chunk in flight and settle it.

        Lock conflicts win over any other error: the transaction may be gone, so the attempt
        is retried whole. Any other failed write takes the careful path: the replies of the
        chunk sent after it are read too, then a rollback to this chunk's savepoint undoes
        both (and the writes that ran after the failed one), this chunk's writes run one by
        one, the checkpoint write, undone with them, is written again, and the later chunk is
        sent again as it was."""
        inflight = self._inflight.popleft()
        writes, what = inflight.writes, inflight.what
        replies = self._receive(inflight.count, what)
        if inflight.lead is not None:
            read, replies = replies[0], replies[1:]
            if _failed(read):
                raise translate(read, "a read sent ahead of the writes")
            inflight.lead(list(read.rows or ()))
        errors = _fallback_errors(replies, what, bool(writes))
        if inflight.checkpoint is not None and _failed(replies[-1]):
            raise errors[-1]  # the checkpoint write: nothing to fall back to
        done = zip(writes, replies[1 : 1 + len(writes)], strict=True)
        settled = [None if _failed(r) else plan.settled(w, r.affected_rows) for w, r in done]
        if any(e is None for e in settled):
            later = list(self._inflight)
            self._inflight.clear()
            for chunk in later:  # undone by the rollback below whatever they did
                _fallback_errors(
                    self._receive(chunk.count, chunk.what), chunk.what, bool(chunk.writes)
                )
            rollback = f"ROLLBACK TO SAVEPOINT {inflight.savepoint}"
            self.execute(sql.Statement(rollback, ()), "rolling back")
            settled = [plan.run(w, self.executor(f"a write to {w.table.name}")) for w in writes]
            if inflight.checkpoint is not None:
                self._execute_text(inflight.checkpoint, "writing the checkpoint")
            for chunk in later:
                self._resend(chunk)
        for effects in settled:
            assert effects is not None
            inflight.into.add(effects)

    def _resend(self, chunk: _InFlight) -> None:
        """A chunk of writes (and its checkpoint write) sent again, after a rollback undid it."""
        texts = [f"SAVEPOINT {chunk.savepoint}", *(self.text(w.statement()) for w in chunk.writes)]
        if chunk.checkpoint is not None:
            texts.append(chunk.checkpoint)
        self._send(texts, chunk.what)
        self._inflight.append(chunk)

    def _send(self, texts: Sequence[str], what: str) -> None:
        """COM_QUERY packets back to back, replies left unread. pymysql has no public split
        of execute() into send and read, so this uses the two halves Connection.query() itself
        calls. pymysql expects the reply to the command it sent last, so the packet number each
        reply starts at (1, or more after a command of 16 MB or more) is kept for
        :meth:`_receive`. A failed send leaves the protocol mid-exchange: the connection is
        dropped."""
        conn = self._conn
        try:
            for text in texts:
                conn._execute_command(COMMAND.COM_QUERY, text)
                self._reply_seq.append(conn._next_seq_id)
        except _DRIVER_ERRORS as exc:
            self.close()
            raise translate(exc, what) from exc
        except BaseException:
            self.close()
            raise

    def _receive(self, count: int, what: str) -> list[Any]:
        """The next ``count`` replies, in order: a result (affected_rows, rows, description)
        or the server's error for that statement, kept in its place while the rest are still
        read. A broken connection (nothing more can be read), or anything else that stops the
        reading half-way, drops the connection."""
        conn, replies = self._conn, []
        try:
            for _ in range(count):
                conn._next_seq_id = self._reply_seq.popleft()
                try:
                    replies.append(_read_reply(conn))
                except pymysql.MySQLError as exc:
                    if not conn.open:
                        raise
                    replies.append(exc)  # the server's error: the connection is fine
        except _DRIVER_ERRORS as exc:
            self.close()
            raise translate(exc, what) from exc
        except BaseException:
            self.close()
            raise
        return replies

    def query(self, statement: sql.Statement, what: str) -> list[tuple[Any, ...]]:
        self._ready()
        with _translated(what):
            self._cursor.execute(statement.sql, statement.params)
            return list(self._cursor.fetchall())

    def select_many(
        self, statements: Sequence[sql.Statement], what: str
    ) -> list[tuple[list[str], list[tuple[Any, ...]]]]:
        """Run SELECTs in few round trips (pipelined); each one's column names and rows, in
        order. A failed one is raised once every reply of its round trip was read."""
        self._ready()
        results: list[tuple[list[str], list[tuple[Any, ...]]]] = []
        for texts in _select_rounds([self.text(s) for s in statements]):
            self._send(texts, what)
            for reply in self._receive(len(texts), what):
                if _failed(reply):
                    raise translate(reply, what) from reply
                names = [d[0] for d in reply.description or ()]
                results.append((names, list(reply.rows or ())))
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
        """Commit, once every reply in flight (the checkpoint write's too) was read and
        checked: COMMIT is never pipelined behind a statement that might have failed."""
        self._ready()
        with _translated("committing"):
            self._conn.commit()

    def _execute_text(self, text: str, what: str) -> int:
        self._ready()
        with _translated(what):
            return int(self._cursor.execute(text))

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
            "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE "
            "TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table)), what)  # fmt: skip
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
        names = tuple(r[0] for r in columns)
        floats = sql.float_columns(names, [r[1] for r in columns])
        return TargetTable(schema, table, names, tuple(r[0] for r in key), floats)

    def local_row(
        self, schema: str, table: str, key: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """The target's row for ``key`` as the open transaction sees it (conflict checks),
        looked up and read as the conflict probes do (drc.apply.sql.row_values)."""
        described = self.table(schema, table)
        floats = described.float_columns
        where = sql.by_keys(list(key), [list(key.values())], floats)
        listed = sql.read_columns(described.columns, floats) if floats else "*"
        statement = sql.Statement(
            f"SELECT {listed} FROM {sql.table_name(schema, table)} WHERE {where.sql}",
            where.params,
        )
        self._ready()
        with _translated(f"reading a row of {schema}.{table}"):
            self._cursor.execute(statement.sql, statement.params)
            row = self._cursor.fetchone()
            names = [d[0] for d in self._cursor.description]
        if row is None:
            return None
        return dict(zip(names, sql.read_values(names, row, floats), strict=True))

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
        """Write the checkpoint row in the open transaction: sent now, pipelined behind the
        chunk in flight (if any) and read with it, so it costs no round trip of its own."""
        self.open()
        text = self.text(checkpoint.upsert(row))
        if not self._inflight or self._inflight[-1].checkpoint is not None:
            self._ready()
            self._inflight.append(_InFlight((), Effects()))
        self._send([text], "writing the checkpoint")
        self._inflight[-1] = replace(self._inflight[-1], checkpoint=text)

    @contextmanager
    def ddl_session(self, what: str) -> Iterator[DdlSession]:
        """A connection of its own for one replicated DDL (same session settings; each
        statement starts with exactly the default database the source used)."""
        conn = self._new_connection(what)
        try:
            with _translated(what), conn.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = %s", (DDL_LOCK_WAIT_S,))
            yield DdlSession(conn, what)
        finally:
            try:
                conn.close()
            except _DRIVER_ERRORS:
                pass


# kind -> (existence query, SHOW CREATE statement, column of the definition in its answer)
_SHOW: dict[str, tuple[str, str, int]] = {
    "database": ("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                 "SHOW CREATE DATABASE", 1),
    "table": ("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
              "AND TABLE_NAME = %s", "SHOW CREATE TABLE", 1),
    "function": ("SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s "
                 "AND ROUTINE_NAME = %s AND ROUTINE_TYPE = 'FUNCTION'", "SHOW CREATE FUNCTION", 2),
    "procedure": ("SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s "
                  "AND ROUTINE_NAME = %s AND ROUTINE_TYPE = 'PROCEDURE'",
                  "SHOW CREATE PROCEDURE", 2),
    "trigger": ("SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s "
                "AND TRIGGER_NAME = %s", "SHOW CREATE TRIGGER", 2),
    "event": ("SELECT 1 FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s "
              "AND EVENT_NAME = %s", "SHOW CREATE EVENT", 3),
}  # fmt: skip


class DdlSession:
    """One replicated DDL statement's connection: its advisory lock, the definitions of the
    objects it names (drc.apply.ddl_journal), and the statement itself."""

    def __init__(self, conn: Any, what: str) -> None:
        self._conn, self._what = conn, what

    def try_lock(self, name: str, wait_s: float) -> bool:
        """GET_LOCK: held until this connection closes (or its server thread ends)."""
        with _translated(self._what), self._conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, %s)", (name, wait_s))
            row = cur.fetchone()
        return bool(row and row[0] == 1)

    def definition(self, kind: str, db: str, name: str | None) -> str | None:
        """SHOW CREATE text of a table (views included), database, routine, trigger or event,
        or None when there is no such object."""
        exists, show, column = _SHOW[kind]
        with _translated(self._what), self._conn.cursor() as cur:
            cur.execute(exists, (db,) if name is None else (db, name))
            if cur.fetchone() is None:
                return None
            target = sql.quote(db) if name is None else f"{sql.quote(db)}.{sql.quote(name)}"
            cur.execute(f"{show} {target}")
            row = cur.fetchone()
        return None if row is None or row[column] is None else str(row[column])

    def account_exists(self, user: str, host: str) -> bool:
        """Whether the target has the account (a definer must exist to be used)."""
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT 1 FROM mysql.user WHERE User = %s AND Host = %s", (user, host))
                return cur.fetchone() is not None
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in (1142, 1044):  # no SELECT on mysql.user
                raise ApplyError(
                    f"cannot check whether the definer {user!r}@{host!r} of {self._what} exists "
                    "on the target: grant the apply user SELECT ON mysql.user",
                    exc.args[0],
                ) from exc
            raise translate(exc, self._what) from exc

    def run(self, change: SchemaChange, timestamp: int = 0) -> None:
        """Run the statement as the source did: its default database, its text as written, and
        (like native replication) the source's statement time as NOW(), so an event's STARTS
        or a column's DEFAULT CURRENT_TIMESTAMP gets the source's value."""
        with _translated(self._what), self._conn.cursor() as cur:
            if timestamp > 0:
                cur.execute("SET SESSION timestamp = %s", (timestamp,))
            if change.schema:
                _use(cur, change.schema)
            cur.execute(change.statement)  # no parameters: the text runs as written


def _literal(value: Any, escape: Callable[[Any], str]) -> str:
    """pymysql's literal of ``value``. Strings and bytes always go to ``escape``
    (Connection.escape, which follows the server's NO_BACKSLASH_ESCAPES flag); the fast paths
    are for values whose text has no quote or backslash in it."""
    kind = type(value)
    if kind is int:
        return str(value)
    if value is None:
        return "NULL"
    if kind is Decimal:
        return format(value, "f") if value.is_finite() else escape(value)
    if kind is dt.datetime and value.tzinfo is None:
        return "'" + value.isoformat(" ") + "'"  # digits, '-', ':', '.', ' ' only
    return escape(value)


class WriteBatch:
    """Writes collected into pipelined round trips of bounded size."""

    MAX_STATEMENTS = 200
    MAX_BYTES = 2 << 20

    def __init__(self, session: TargetSession) -> None:
        self._session = session
        self._writes: list[plan.Write] = []
        self._bytes = 0
        self.effects = Effects()

    def extend(self, writes: Iterable[plan.Write]) -> None:
        for write in writes:
            self._writes.append(write)
            self._bytes += _size(write)
            if len(self._writes) >= self.MAX_STATEMENTS or self._bytes >= self.MAX_BYTES:
                self.flush()

    def flush(self) -> None:
        """Send the writes collected; :attr:`effects` has theirs once the session settles
        them (before its next statement, or at commit)."""
        writes, self._writes, self._bytes = self._writes, [], 0
        if writes:
            self._session.send_batch(writes, self.effects)

    def finish(self) -> Effects:
        self.flush()
        self._session.settle()
        return self.effects


@dataclass(frozen=True, slots=True)
class _InFlight:
    """Statements sent, replies unread: a read if any (TargetSession.send_read), then
    [SAVEPOINT, *writes] if any writes, then the checkpoint write if any."""

    writes: tuple[plan.Write, ...]
    into: Effects  # where the chunk's effects are added once settled
    checkpoint: str | None = None  # its text, to write again after a fallback
    lead: Callable[[list[Any]], None] | None = None  # a read sent first; given its rows
    savepoint: str = ""  # the name of the SAVEPOINT sent before the writes

    @property
    def count(self) -> int:
        chunk = 1 + len(self.writes) if self.writes else 0
        return (self.lead is not None) + chunk + (self.checkpoint is not None)

    @property
    def what(self) -> str:
        return f"a write to {self.writes[0].table.name}" if self.writes else "the checkpoint"


@dataclass(frozen=True, slots=True)
class _Ok:
    """An OK reply (every write's): all the sink reads of it."""

    affected_rows: int
    rows: tuple[()] = ()


def _read_reply(conn: Any) -> Any:
    """The next reply: an OK packet, peeked at in the read buffer, is read here with the
    packet's own readers (pymysql's MySQLResult and OKPacketWrapper around them were a quarter
    of a grouped apply's Python time); any other reply (a result set, an error) by pymysql."""
    head = conn._rfile.peek(5)
    if len(head) < 5 or head[4] != 0 or head[:3] == b"\xff\xff\xff":
        conn._read_query_result()
        return conn._result
    conn._result = None
    packet = conn._read_packet()
    packet.advance(1)
    affected = packet.read_length_encoded_integer()
    packet.read_length_encoded_integer()  # the insert id, unused
    conn.server_status = packet.read_uint16()
    return _Ok(affected)


def _failed(reply: Any) -> bool:
    return isinstance(reply, BaseException)


def _fallback_errors(replies: Sequence[Any], what: str, savepoint: bool) -> list[BaseException]:
    """The errors among a chunk's replies, each translated, once none of them rules out the
    fallback: a retriable one (the transaction may be gone) or a failed SAVEPOINT is raised."""
    errors: list[BaseException] = []
    for i, reply in enumerate(replies):
        if _failed(reply):
            error = translate(reply, what)
            if not isinstance(error, DuplicateKey | ApplyError) or (i == 0 and savepoint):
                raise error
            errors.append(error)
    return errors


def _select_rounds(texts: list[str]) -> Iterator[list[str]]:
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
