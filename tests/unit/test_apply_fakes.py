"""Fakes shared by the apply unit tests (no tests here): a scripted target speaking just enough
of pymysql's connection API, and a subscriber that hands out prepared batches."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from drc.apply import checkpoint
from drc.client import ApiUnavailableError, Batch
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.scn import SCN

Failure = tuple[Callable[[str], bool], BaseException]


def scn(pos: int, index: int = 1) -> SCN:
    return SCN(1, 11, index, pos)


def txn(
    pos: int, *changes: RowChange, ddl: tuple[SchemaChange, ...] = (), **kw: Any
) -> Transaction:
    return Transaction(scn(pos), 11, None, 1_700_000_000 + pos, tuple(changes), ddl=ddl, **kw)


def ins(table: str, **row: Any) -> RowChange:
    return RowChange("db", table, Op.INSERT, None, row)


def upd(table: str, before: dict[str, Any], **after: Any) -> RowChange:
    return RowChange("db", table, Op.UPDATE, before, after)


def dele(table: str, **row: Any) -> RowChange:
    return RowChange("db", table, Op.DELETE, row, None)


_CHECKPOINT = re.compile(
    r"INSERT INTO `drc`.`checkpoint` .*? VALUES \('(.*?)', '(.*?)', (NULL|'.*?'), '(.*?)', "
    r"(NULL|'.*?'), UTC_TIMESTAMP"
)


def checkpoint_values(statement: str) -> tuple[str, ...] | None:
    """(channel, scn, epoch, origin, pending_ddl_scn) of a checkpoint upsert's text."""
    match = _CHECKPOINT.match(statement)
    if match is None:
        return None
    return tuple(None if v == "NULL" else v.strip("'") for v in match.groups())  # type: ignore[return-value]


@dataclass
class FakeTarget:
    """Tables (columns, primary key), the checkpoint rows, and what was committed."""

    tables: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = field(
        default_factory=dict
    )
    checkpoints: dict[str, tuple[str, str, str | None, str | None]] = field(default_factory=dict)
    committed: list[list[str]] = field(default_factory=list)
    ddl: list[tuple[str | None, str]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    affected: Callable[[str], int | None] = lambda statement: None
    connects: int = 0
    rollbacks: int = 0
    down: bool = False

    def __post_init__(self) -> None:
        self.tables.setdefault(("drc", "checkpoint"), (tuple(checkpoint.COLUMNS), ("channel",)))

    def connect(self, **kwargs: Any) -> FakeConnection:
        assert kwargs["autocommit"] is False and kwargs["charset"] == "utf8mb4"
        if self.down:
            raise pymysql.err.OperationalError(2003, "Can't connect to server")
        self.connects += 1
        return FakeConnection(self)

    def fail_once(self, predicate: Callable[[str], bool], exc: BaseException) -> None:
        self.failures.append((predicate, exc))

    def writes(self) -> list[str]:
        """Every committed statement but checkpoint writes, in order."""
        return [s for txn in self.committed for s in txn if "`checkpoint`" not in s]

    def marks(self) -> list[tuple[str, ...]]:
        """Every committed checkpoint write (channel, scn, epoch, origin, pending), in order."""
        return [v for txn in self.committed for s in txn if (v := checkpoint_values(s))]

    def fail(self, statement: str) -> None:
        for i, (predicate, exc) in enumerate(self.failures):
            if predicate(statement):
                del self.failures[i]
                raise exc


class FakeConnection:
    def __init__(self, target: FakeTarget) -> None:
        self.target = target
        self.pending: list[str] = []
        self.savepoint = 0
        self.closed = False
        self.session: list[str] = []
        self.unread: tuple[FakeCursor, str] | None = None  # sent, answer not read (pipelined)
        self.sending: FakeCursor | None = None

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def in_sync(self) -> None:
        """Like the server protocol: nothing may be sent while an answer is unread."""
        if self.unread is not None:
            raise pymysql.err.InterfaceError(0, "commands out of sync: an answer is unread")

    # pymysql's two halves of Connection.query(), which the sink uses to pipeline
    def _execute_command(self, command: int, text: str) -> None:
        self.in_sync()
        assert self.sending is not None, "cursor._clear_result() comes first"
        self.unread, self.sending = (self.sending, text), None

    def _read_query_result(self) -> int:
        assert self.unread is not None, "nothing was sent"
        (cursor, text), self.unread = self.unread, None
        return cursor.execute(text)

    def escape(self, value: Any) -> str:
        return pymysql.converters.escape_item(value, "utf8mb4")

    def commit(self) -> None:
        self.in_sync()
        self.target.fail("COMMIT")
        for statement in self.pending:
            values = checkpoint_values(statement)
            if values is not None:
                channel, scn_text, epoch, origin, pending = values
                self.target.checkpoints[channel] = (scn_text, origin, epoch, pending)
        if self.pending:
            self.target.committed.append(self.pending)
        self.pending = []

    def rollback(self) -> None:
        self.in_sync()
        self.target.rollbacks += 1
        self.pending = []

    def close(self) -> None:
        self.closed = True


class FakeCursor:
    """Runs statements one by one, or ';\n'-separated batches with a result per statement."""

    def __init__(self, conn: FakeConnection) -> None:
        self.conn = conn
        self.rows: list[tuple[Any, ...]] = []
        self.results: list[int] = []
        self.rowcount = 0
        self.description: list[tuple[str]] = []

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _clear_result(self) -> None:
        self.conn.sending = self

    def _do_get_result(self) -> None:
        pass  # execute() already set rowcount and the results

    def execute(self, statement: str, params: tuple[Any, ...] | None = None) -> int:
        self.conn.in_sync()
        if params is not None:
            statement = statement % tuple(self.conn.escape(v) for v in params)
        parts = statement.split(";\n")
        self.results = []
        for part in parts:  # like the server: stop at the first error
            self.results.append(self._one(part))
        self.rowcount = self.results.pop(0)
        return self.rowcount

    def nextset(self) -> bool:
        if not self.results:
            return False
        self.rowcount = self.results.pop(0)
        return True

    def _one(self, sql: str) -> int:
        target, conn = self.conn.target, self.conn
        if sql == "COMMIT":  # inside a multi-statement
            conn.commit()
            return 0
        target.fail(sql)
        self.rows = []
        if sql.startswith(("SET SESSION", "USE ")):
            conn.session.append(sql)
            return 0
        if sql == "SAVEPOINT drc_batch":
            conn.savepoint = len(conn.pending)
            return 0
        if sql == "ROLLBACK TO SAVEPOINT drc_batch":
            del conn.pending[conn.savepoint :]
            return 0
        if "information_schema" in sql:
            schema, table = re.findall(r"'((?:[^']|'')*)'", sql)[:2]
            columns, key = target.tables.get((schema, table), ((), ()))
            self.rows = [(c,) for c in (columns if "COLUMNS" in sql else key)]
            if sql.startswith("SELECT COLUMN_NAME, DATA_TYPE"):
                self.rows = [(c, "int") for c in columns]
            return len(self.rows)
        if sql.startswith("SELECT `scn`"):
            channel = re.findall(r"'(.*?)'", sql)[-1]
            found = target.checkpoints.get(channel)
            self.rows = [] if found is None else [found]
            return len(self.rows)
        if sql.startswith(("CREATE DATABASE IF NOT EXISTS `drc`", "CREATE TABLE IF NOT EXISTS")):
            return 0
        if not sql.startswith(("INSERT", "UPDATE", "DELETE", "SELECT")):  # DDL autocommits
            target.ddl.append((conn.session[-1] if conn.session else None, sql))
            return 0
        conn.pending.append(sql)
        forced = target.affected(sql)
        if forced is not None:
            return forced
        if sql.startswith("INSERT") and " VALUES " in sql:
            return sql.split(" VALUES ", 1)[1].split(" ON DUPLICATE")[0].count("), (") + 1
        return 1

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None


class FakeSubscriber:
    """Hands out ``batches`` in order; then sets ``stop`` and raises a timeout-like error."""

    def __init__(self, batches: list[Batch], stop: threading.Event) -> None:
        self.batches = list(batches)
        self.stop = stop
        self.acked: list[int] = []
        self.closed = False
        self.after: SCN | None = None

    def get(self, timeout: float | None = None) -> Batch:
        if not self.batches:
            self.stop.set()
            raise ApiUnavailableError("no answer", {})
        return self.batches[0]

    def ack(self, batch: Batch) -> None:
        assert self.batches and batch is self.batches[0]
        self.batches.pop(0)
        self.acked.append(batch.id)

    def close(self) -> None:
        self.closed = True


def batch(
    number: int, *txns: Transaction, after: SCN | None = None, next_scn: SCN | None = None,
    newest: SCN | None = None,
) -> Batch:  # fmt: skip
    last = next_scn or (txns[-1].scn if txns else after or SCN.zero())
    return Batch(number, after or SCN.zero(), last, tuple(txns), "epoch-1", "http://x", newest)
