"""Fakes shared by the apply unit tests: a scripted target speaking just enough
of pymysql's connection API, a subscriber that hands out prepared batches, and a harness that
runs a channel on them."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from drc.apply import checkpoint
from drc.apply.channel import ApplyChannel
from drc.apply.service import build_channel
from drc.client import ApiUnavailableError, Batch
from drc.config_channels import ChannelConfig
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.scn import SCN
from drc.mysql.driver import TargetSettings

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
    lost_after_commit: int = 0  # checkpoint COMMITs that land, then lose their reply
    journal: dict[tuple[str, str, int], str] = field(default_factory=dict)  # -> state
    # The channel's catch-up lease and run (drc.apply.catchup_journal.channel_state); None: no row.
    catchup: Callable[[], tuple[Any, ...] | None] = lambda: None
    # drc.channel_audit: the details of the channel's rewinds, newest first.
    rewinds: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tables.setdefault(("drc", "checkpoint"), (tuple(checkpoint.COLUMNS), ("channel",)))

    def connect(self, **kwargs: Any) -> FakeConnection:
        assert kwargs["autocommit"] is False and kwargs["charset"] == "utf8mb4"
        assert not kwargs["client_flag"] & CLIENT.MULTI_STATEMENTS, "one statement per command"
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


@dataclass
class FakeResult:
    """A reply as drc.mysql.protocol.Wire reads it (Reply)."""

    affected_rows: int
    rows: tuple[tuple[Any, ...], ...]
    names: tuple[str, ...]


LOST = frozenset({0, 2006, 2013})  # after these the client can read nothing more


class FakeConnection:
    """Runs one statement per command, like a server without multi-statements. Commands can
    be pipelined (drc.mysql.driver.Link's ``send``, then ``receive`` per reply); a statement
    after a failed one still runs, and a deadlock rolls the transaction back."""

    def __init__(self, target: FakeTarget) -> None:
        self.target = target
        self.pending: list[str] = []  # the open transaction's writes
        self.savepoints: dict[str, int] = {}  # name -> pending statements before it
        self.closed = False
        self.session: list[str] = []
        self.unread: list[str] = []  # sent, reply not read (pipelined)
        self.replies: list[FakeResult | BaseException] = []  # the server's replies, unread
        self.sent: list[str] = []  # every command, in order
        self.events: list[str] = []  # "send X" (no wait), "read", "run X" (a round trip)

    @property
    def open(self) -> bool:
        return not self.closed

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)

    def in_sync(self) -> None:
        """Like the client protocol: a command and its answer, nothing unread in between."""
        if self.unread:
            raise pymysql.err.InterfaceError(0, "commands out of sync: an answer is unread")

    # drc.mysql.driver.Link's pipeline: commands sent back to back, replies read in order
    def send(self, texts: list[str]) -> None:
        if self.closed:
            raise pymysql.err.InterfaceError(0, "")
        for text in texts:
            self.sent.append(text)
            self.events.append("send " + text.split(" ")[0])
            self.unread.append(text)
            self.replies.append(self._reply(text))  # the server runs commands as they arrive

    def receive(self) -> FakeResult | BaseException:
        """The next reply, or the server's error for that statement; a lost connection's
        error is raised (nothing more can be read)."""
        assert self.unread, "nothing was sent"
        self.events.append("read")
        self.unread.pop(0)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException) and reply.args and reply.args[0] in LOST:
            self.closed = True
            raise reply
        return reply

    def _reply(self, text: str) -> FakeResult | BaseException:
        cursor = FakeCursor(self)
        try:
            affected = cursor._one(text)
        except pymysql.MySQLError as exc:
            return exc
        return FakeResult(affected, tuple(cursor.rows), tuple(d[0] for d in cursor.description))

    def run(self, text: str, cursor: FakeCursor) -> int:
        self.in_sync()
        self.sent.append(text)
        self.events.append("run " + text.split(" ")[0])
        if self.closed:
            raise pymysql.err.InterfaceError(0, "")
        try:
            return cursor._one(text)
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in LOST:
                self.closed = True
            raise

    def escape(self, value: Any) -> str:
        return pymysql.converters.escape_item(value, "utf8mb4")

    def commit(self) -> None:
        self.in_sync()
        self.sent.append("COMMIT")
        self.events.append("run COMMIT")
        self.target.fail("COMMIT")
        for statement in self.pending:
            values = checkpoint_values(statement)
            if values is not None:
                channel, scn_text, epoch, origin, pending = values
                self.target.checkpoints[channel] = (scn_text, origin, epoch, pending)
        wrote = any(checkpoint_values(statement) for statement in self.pending)
        if self.pending:
            self.target.committed.append(self.pending)
        self.pending, self.savepoints = [], {}
        if wrote and self.target.lost_after_commit:  # died once a checkpoint was durable
            self.target.lost_after_commit -= 1
            self.closed = True
            raise pymysql.err.OperationalError(2013, "Lost connection to server during query")

    def rollback(self) -> None:
        self.in_sync()
        self.sent.append("ROLLBACK")
        self.events.append("run ROLLBACK")
        self.target.rollbacks += 1
        self.pending, self.savepoints = [], {}

    def close(self) -> None:
        self.closed = True


class FakeCursor:
    """Runs one statement per execute(); the whole text is one statement."""

    def __init__(self, conn: FakeConnection) -> None:
        self.conn = conn
        self.rows: list[tuple[Any, ...]] = []
        self.rowcount = 0
        self.description: list[tuple[str]] = []

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, statement: str, params: tuple[Any, ...] | None = None) -> int:
        if params is not None:
            statement = statement % tuple(self.conn.escape(v) for v in params)
        self.rowcount = self.conn.run(statement, self)
        return self.rowcount

    def _one(self, sql: str) -> int:
        target, conn = self.conn.target, self.conn
        self.rows, self.description = [], []
        try:
            target.fail(sql)
        except pymysql.MySQLError as exc:
            if exc.args and exc.args[0] in (1213,):  # a deadlock rolls back the transaction
                conn.pending, conn.savepoints = [], {}
            raise
        if sql.startswith(("SET SESSION", "USE ")):
            conn.session.append(sql)
            return 0
        if sql.startswith("SAVEPOINT "):
            conn.savepoints[sql.split()[1]] = len(conn.pending)
            return 0
        if sql.startswith("ROLLBACK TO SAVEPOINT "):
            name = sql.split()[3]
            if name not in conn.savepoints:
                raise pymysql.err.OperationalError(1305, f"SAVEPOINT {name} does not exist")
            at = conn.savepoints[name]
            del conn.pending[at:]  # like MariaDB: the savepoints set after it are gone too
            conn.savepoints = {n: p for n, p in conn.savepoints.items() if p <= at}
            return 0
        if sql.startswith("SELECT GET_LOCK"):
            self.rows = [(1,)]
            return 1
        if "`ddl_journal`" in sql:
            return self._journal(sql)
        if "`catchup_lease`" in sql:
            found = target.catchup()  # None: no catch-up ever took the channel
            self.rows = [] if found is None else [found]
            return len(self.rows)
        if sql.startswith("SELECT `detail` FROM `drc`.`channel_audit`"):
            self.rows = [(detail,) for detail in target.rewinds]
            return len(self.rows)
        if "`snapshot_tables`" in sql:
            return 0  # no snapshot joined a table
        if sql.startswith("SELECT") and "`applied_parts`" in sql:
            return 0  # no parallel group left parts beyond the checkpoint
        if sql.startswith("SHOW CREATE TABLE"):
            schema, table = (n.replace("``", "`") for n in re.findall(r"`((?:[^`]|``)*)`", sql))
            columns, key = target.tables[(schema, table)]
            self.rows = [(table, f"CREATE TABLE {table} {columns} KEY {key}")]
            return 1
        if sql.startswith("SELECT 1 FROM") and sql.endswith(" LIMIT 0"):  # opening a table
            schema, table = (n.replace("``", "`") for n in re.findall(r"`((?:[^`]|``)*)`", sql))
            if (schema, table) not in target.tables:
                raise pymysql.err.ProgrammingError(1146, f"Table '{schema}.{table}' doesn't exist")
            return 0
        if "information_schema.SCHEMATA" in sql:
            return 0  # the fake has no databases to describe
        if "_PRIVILEGES" in sql:
            self.rows = [(1,)]  # the apply user holds TRIGGER, as documented
            return 1
        if "NON_UNIQUE" in sql or "TRIGGERS" in sql or "REFERENTIAL_CONSTRAINTS" in sql:
            self.rows = []  # no UNIQUE keys, triggers nor foreign keys
            return 0
        if "information_schema" in sql:
            schema, table = re.findall(r"'((?:[^']|'')*)'", sql)[:2]
            columns, key = target.tables.get((schema, table), ((), ()))
            self.rows = [(c,) for c in (columns if "COLUMNS" in sql else key)]
            if sql.startswith("SELECT COLUMN_NAME, DATA_TYPE"):
                self.rows = [(c, "int", "int(11)") for c in columns]
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

    def _journal(self, sql: str) -> int:
        """drc.ddl_journal, kept as (channel, scn, seq) -> state; writes count at once."""
        journal = self.conn.target.journal
        if sql.startswith("SELECT"):
            channel, scn = re.findall(r"'((?:[^']|'')*)'", sql)[:2]
            seq = int(sql.rsplit("=", 1)[1])
            state = journal.get((channel, scn, seq))
            self.rows = [] if state is None else [(state, "{}")]
            return len(self.rows)
        if sql.startswith("INSERT"):
            values = re.search(r"VALUES \('((?:[^']|'')*)', '([^']*)', (\d+), '(\w+)'", sql)
            assert values is not None, sql
            channel, scn, seq, state = values.groups()
            journal[(channel, scn, int(seq))] = state
        return 0

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
    newest: SCN | None = None, within: int = 0,
) -> Batch:  # fmt: skip
    """``within`` > 0: the batch ends inside the transaction at ``next_scn`` (split pages)."""
    last = next_scn or (txns[-1].scn if txns else after or SCN.zero())
    return Batch(
        number, after or SCN.zero(), last, tuple(txns), "epoch-1", "http://x", newest, within
    )


TABLES = {("db", "t"): (("id", "v"), ("id",)), ("db", "n"): (("a",), ())}
SETTINGS = TargetSettings("127.0.0.1", 3306, "apply", "secret")


class Harness:
    """A channel (built by build_channel) on ``target`` and a FakeSubscriber of ``batches``, with
    a clock the test sets (``now``), a fixed wall clock, and sleeps recorded, not slept (or
    given to ``sleep``)."""

    def __init__(
        self,
        target: FakeTarget,
        batches: list[Batch],
        *,
        finish: Callable[[Callable[[], bool]], object] | None = None,
        hold_on_error: bool = False,
        sleep: Callable[[float], None] | None = None,
        **config: Any,
    ) -> None:
        self.target = target
        self.stop = threading.Event()
        self.subscriber = FakeSubscriber(batches, self.stop)
        self.slept: list[float] = []
        self.started_after: SCN | None = None
        self.now = 1000.0
        options = {"name": "from-dc1", "origin": "dc1", "remote": ("http://x",), **config}
        self.channel = build_channel(
            ChannelConfig(**options),
            SETTINGS,
            subscriber_factory=self._subscribe,
            connect=target.connect,
            clock=lambda: self.now,
            wall_clock=lambda: 1_700_000_100.0,
            sleep=sleep or self.slept.append,
            finish=finish,
            hold_on_error=hold_on_error,
        )

    def _subscribe(self, channel: ChannelConfig, after: SCN) -> FakeSubscriber:
        self.started_after = after
        return self.subscriber

    def run(self) -> ApplyChannel:
        self.channel.run(self.stop)
        return self.channel


def target(**kw: Any) -> FakeTarget:
    """A FakeTarget holding db.t (id, v; keyed by id) and the keyless db.n (a)."""
    return FakeTarget(tables=dict(TABLES), **kw)
