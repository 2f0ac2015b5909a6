"""The apply sink: a channel's writes into its target, pipelined, and the Target calls on top.

TargetSession is a drc.mysql.session.Session (the connection, its session settings, statements,
pipelining, DDL sessions, error translation) plus what apply asks of its target
(drc.apply.target.Target): table definitions, conflict probes, one transaction of writes with
its checkpoint row. Round trips (the target executing is the apply's main wait, so Python work
overlaps it)::

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
back for writes, so a chunk of megabytes cannot stall on full socket buffers.

Every other use of the connection settles the chunks in flight first (Session.ready calls
:meth:`TargetSession.settle`), so statements still reach the server in the order they were
issued and every read sees every earlier write. A duplicate key becomes DuplicateKey, which the
idempotent writes of drc.apply.plan handle; a missing table MissingTableError.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from drc.apply import checkpoint, plan
from drc.apply.applied_set import PartRow
from drc.apply.plan import Effects
from drc.conflicts import tombstones
from drc.conflicts.probes import Observed, Probe, ProbePlan
from drc.core import schema_objects
from drc.core.online_schema_change import missing_shadow_hint
from drc.core.target_errors import ApplyError, MissingTableError, TargetUnavailableError
from drc.core.target_table import TargetTable
from drc.mysql import sql
from drc.mysql.driver import TargetSettings, open_link
from drc.mysql.errors import DuplicateKey, translate
from drc.mysql.session import Session, failed

log = logging.getLogger(__name__)

# Chunks of writes sent and not read yet: two keep the server busy while the apply reads one.
CHUNKS_IN_FLIGHT = 2
_SAVEPOINTS = ("drc_batch", "drc_batch_b")  # chunks in flight at once never share a name


class TargetSession(Session):
    """A channel's connection to its target (opened lazily, reopened after a failure)."""

    def __init__(self, settings: TargetSettings, connect: Callable[..., Any] = open_link) -> None:
        super().__init__(settings, connect)
        self._inflight: deque[_InFlight] = deque()  # sent, replies not read yet; oldest first
        self._tables: dict[tuple[str, str], TargetTable] = {}
        self.forgotten = 0  # how often the definitions were forgotten (drc.apply.parallel)

    def close(self) -> None:
        self._inflight.clear()
        super().close()

    # ------------------------------------------------------------------ writes

    def batch(self) -> WriteBatch:
        self.open()  # a read sent ahead (send_read) rides with the batch's first chunk
        return WriteBatch(self)

    def probe(self, probes: Sequence[Probe]) -> list[Observed]:
        """What the target holds for each probe, read and locked in the open transaction
        (batched: drc.conflicts.probes.ProbePlan), in probe order."""
        if not probes:
            return []
        planned = ProbePlan(probes)
        what = "reading target rows to check conflicts"
        return planned.observe(self.select_many(planned.statements, what))

    def write(
        self,
        writes: Iterable[plan.Write],
        extra: Sequence[sql.Statement],
        row: checkpoint.CheckpointRow | PartRow,
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
            self.ready()  # every reply read and checked: batch.effects is complete
            before_commit()
        self.commit()  # reads every reply first, so batch.effects is complete
        return batch.effects

    def write_open(self, writes: Iterable[plan.Write], extra: Sequence[sql.Statement]) -> Effects:
        """:meth:`write` without checkpoint or COMMIT, every reply read (drc.apply.streamed)."""
        batch = self.batch()
        batch.extend(writes)
        batch.flush()
        for statement in extra:
            self.execute(statement, "recording conflicts and tombstones")
        return batch.finish()

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
        self.send(texts, f"a write to {writes[0].table.name}")
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
        self.ready()
        self.send([self.text(statement)], "a read sent ahead of the writes")
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
        replies = self.receive(inflight.count, what)
        if inflight.lead is not None:
            read, replies = replies[0], replies[1:]
            if failed(read):
                raise translate(read, "a read sent ahead of the writes")
            inflight.lead(list(read.rows or ()))
        errors = _fallback_errors(replies, what, bool(writes))
        if inflight.checkpoint is not None and failed(replies[-1]):
            raise errors[-1]  # the checkpoint write: nothing to fall back to
        done = zip(writes, replies[1 : 1 + len(writes)], strict=True)
        settled = [None if failed(r) else plan.settled(w, r.affected_rows) for w, r in done]
        if any(e is None for e in settled):
            later = list(self._inflight)
            self._inflight.clear()
            for chunk in later:  # undone by the rollback below whatever they did
                _fallback_errors(
                    self.receive(chunk.count, chunk.what), chunk.what, bool(chunk.writes)
                )
            rollback = f"ROLLBACK TO SAVEPOINT {inflight.savepoint}"
            self.execute(sql.Statement(rollback, ()), "rolling back")
            settled = [plan.run(w, self.executor(f"a write to {w.table.name}")) for w in writes]
            if inflight.checkpoint is not None:
                self.execute_sql(inflight.checkpoint, "writing the checkpoint")
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
        self.send(texts, chunk.what)
        self._inflight.append(chunk)

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
        self.forgotten += 1

    def _describe(self, schema: str, table: str) -> TargetTable:
        """The table opened first, then read from information_schema. A session holding locks
        (a channel mid-transaction) gets no rows there, only a warning, for a table it would
        have to wait for (an ALTER in progress): no rows would be taken for "no table" or
        "no primary key". Opened, the table is locked for the session until it commits, so
        the reads that follow list it as it is."""
        what = f"reading the definition of {schema}.{table}"
        probe = sql.Statement(f"SELECT 1 FROM {sql.table_name(schema, table)} LIMIT 0", ())
        try:
            self.query(probe, what)
        except ApplyError as exc:
            if exc.code not in _NO_SUCH_TABLE:
                raise
            raise MissingTableError(
                f"the target has no table {schema}.{table} for the changes the source makes to "
                "it: create it on the target (or map the source table with map_tables); "
                "nothing after the last checkpoint was applied" + missing_shadow_hint(table)
            ) from None
        columns = self.query(sql.Statement(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE FROM information_schema.COLUMNS WHERE "
            "TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (schema, table)), what)  # fmt: skip
        if not columns:  # not expected once opened; a retry reads it again from scratch
            raise TargetUnavailableError(
                f"the target opens {schema}.{table} but does not list its columns: trying again"
            )
        key = self.query(sql.Statement(
            "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
            (schema, table)), what)  # fmt: skip
        names = tuple(r[0] for r in columns)
        floats = sql.float_columns(names, [r[1] for r in columns])
        bounds = tuple(
            (r[0].lower(), *found)
            for r in columns
            if (found := sql.value_bounds(r[1], r[2])) is not None
        )
        unique: dict[str, list[str]] = {}
        for index, column in self.query(sql.Statement(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS WHERE "
            "TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 AND INDEX_NAME <> "
            "'PRIMARY' ORDER BY INDEX_NAME, SEQ_IN_INDEX", (schema, table)), what):  # fmt: skip
            unique.setdefault(index, []).append(column)
        return TargetTable(
            schema, table, names, tuple(r[0] for r in key), floats,
            tuple(tuple(columns) for columns in unique.values()),
            self._keeps_order(schema, table, what), bounds,
        )  # fmt: skip

    def _keeps_order(self, schema: str, table: str, what: str) -> bool:
        """Whether a trigger fires for DRC's writes to the table (one not guarded by
        @drc_apply) or a foreign key refers to or from it (drc.apply.shapes)."""
        triggers = self.query(sql.Statement(
            "SELECT TRIGGER_NAME, ACTION_STATEMENT FROM information_schema.TRIGGERS WHERE "
            "EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = %s",
            (schema, table)), what)  # fmt: skip
        if not self.query(_may_see_triggers(schema, table), what):
            # information_schema shows triggers only to a user with TRIGGER on the table:
            # none seen then proves nothing, and the table's writes keep their order.
            return True
        own = set(tombstones.trigger_names(schema, table))
        if any(
            name not in own and not schema_objects.guarded_body(str(body))
            for name, body in triggers
        ):
            return True
        return bool(self.query(sql.Statement(
            "SELECT 1 FROM information_schema.REFERENTIAL_CONSTRAINTS WHERE (CONSTRAINT_SCHEMA = "
            "%s AND TABLE_NAME = %s) OR (UNIQUE_CONSTRAINT_SCHEMA = %s AND REFERENCED_TABLE_NAME "
            "= %s) LIMIT 1", (schema, table, schema, table)), what))  # fmt: skip

    def local_row(
        self, schema: str, table: str, key: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """The target's row for ``key`` as the open transaction sees it (conflict checks),
        looked up and read as the conflict probes do (drc.mysql.sql.row_values)."""
        described = self.table(schema, table)
        floats = described.float_columns
        where = sql.by_keys(list(key), [list(key.values())], floats)
        listed = sql.read_columns(described.columns, floats) if floats else "*"
        statement = sql.Statement(
            f"SELECT {listed} FROM {sql.table_name(schema, table)} WHERE {where.sql}",
            where.params,
        )
        names, rows = self.read(statement, f"reading a row of {schema}.{table}")
        if not rows:
            return None
        return dict(zip(names, sql.read_values(names, rows[0], floats), strict=True))

    # ------------------------------------------------------------------ checkpoint

    def ensure_checkpoint_table(self) -> None:
        what = "creating the checkpoint table"
        self.run_setup(checkpoint.create_statements(), what)
        existing = self.table("drc", "checkpoint").columns
        missing = checkpoint.add_missing_columns(set(existing))
        for statement in missing:
            log.info("upgrading the checkpoint table: %s", statement)
        self.run_setup(missing, what)
        self.forget_tables()

    def read_checkpoint(self, channel: str) -> checkpoint.CheckpointRow | None:
        rows = self.query(checkpoint.select(channel), "reading the checkpoint")
        self.commit()  # start the first apply transaction with a fresh snapshot
        return checkpoint.parse(channel, rows[0]) if rows else None

    def write_checkpoint(self, row: checkpoint.CheckpointRow | PartRow) -> None:
        """Write the checkpoint row (or a parallel part's row, drc.apply.applied_set) in the
        open transaction: sent now, pipelined behind the chunk in flight (if any) and read with
        it, so it costs no round trip of its own."""
        self.open()
        text = self.text(row.upsert())
        if not self._inflight or self._inflight[-1].checkpoint is not None:
            self.ready()
            self._inflight.append(_InFlight((), Effects()))
        self.send([text], "writing the checkpoint")
        self._inflight[-1] = replace(self._inflight[-1], checkpoint=text)


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


def _fallback_errors(replies: Sequence[Any], what: str, savepoint: bool) -> list[BaseException]:
    """The errors among a chunk's replies, each translated, once none of them rules out the
    fallback: a retriable one (the transaction may be gone) or a failed SAVEPOINT is raised."""
    errors: list[BaseException] = []
    for i, reply in enumerate(replies):
        if failed(reply):
            error = translate(reply, what)
            if not isinstance(error, DuplicateKey | ApplyError) or (i == 0 and savepoint):
                raise error
            errors.append(error)
    return errors


def _size(write: plan.Write) -> int:
    rows = len(write.rows) if isinstance(write, plan.Upsert) else 1
    return 64 * rows * len(getattr(write, "columns", ())) + 64


_NO_SUCH_TABLE = frozenset({1146, 1049})  # no such table, no such database


# The session's account and role as information_schema's privilege tables spell a grantee:
# 'user'@'host' and 'role'.
_GRANTEES = (
    "GRANTEE IN (CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', "
    "SUBSTRING_INDEX(CURRENT_USER(), '@', -1), ''''), CONCAT('''', CURRENT_ROLE(), ''''))"
)


def _may_see_triggers(schema: str, table: str) -> sql.Statement:
    """A row if the session's user (or its role) holds TRIGGER on the table: globally, on
    its database or on the table itself (a database grant with wildcards is not matched,
    which only keeps that table's writes in order)."""
    return sql.Statement(
        f"SELECT 1 FROM information_schema.USER_PRIVILEGES WHERE {_GRANTEES} AND "
        "PRIVILEGE_TYPE = 'TRIGGER' UNION ALL "
        f"SELECT 1 FROM information_schema.SCHEMA_PRIVILEGES WHERE {_GRANTEES} AND "
        "PRIVILEGE_TYPE = 'TRIGGER' AND TABLE_SCHEMA = %s UNION ALL "
        f"SELECT 1 FROM information_schema.TABLE_PRIVILEGES WHERE {_GRANTEES} AND "
        "PRIVILEGE_TYPE = 'TRIGGER' AND TABLE_SCHEMA = %s AND TABLE_NAME = %s LIMIT 1",
        (schema, schema, table),
    )
