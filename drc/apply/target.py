"""What apply needs from the database it writes into: the Target protocol.

drc.apply.sink.TargetSession (a drc.mysql session) implements it; unit tests drive the channel
through it with a scripted connection. A channel talks to its target only through these calls::

    definitions    table(schema, table, refresh) -> TargetTable; forget_tables() after DDL
    one group      probe(probes) -> Observed per probe: rows read and locked (FOR UPDATE)
                   write(writes, extra, checkpoint) -> Effects: the writes (their idempotent
                   fallbacks included), extra statements, the checkpoint row, COMMIT, as one
                   transaction; write_open(writes, extra): a piece of a large source
                   transaction in the open one, neither checkpoint nor COMMIT
    DDL            ddl_session(what): a connection of its own with the source's default
                   database, one statement at a time (drc.apply.ddl_journal decides whether
                   it already ran)
    bookkeeping    ensure_checkpoint_table / read_checkpoint; execute / query / commit for
                   DRC's own tables (the DDL journal, purges); run_setup, base_tables,
                   columns for conflict handling's tables and triggers
    failures       recover(exc) after a failed attempt (roll back, or drop the connection);
                   close()

Every call raises DRC errors (drc.core.target_errors, translated by drc.mysql.errors), never a
driver's: retriable ones make the channel wait and try the whole attempt again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from drc.apply.applied_set import PartRow
from drc.apply.checkpoint import CheckpointRow
from drc.apply.plan import Effects, Write
from drc.conflicts.probes import Observed, Probe
from drc.core.events import SchemaChange
from drc.core.target_table import TargetTable
from drc.mysql.sql import Statement


class DdlRunner(Protocol):
    """One replicated DDL statement's own connection."""

    def try_lock(self, name: str, wait_s: float) -> bool: ...

    def definition(self, kind: str, db: str, name: str | None) -> str | None: ...

    def account_exists(self, user: str, host: str) -> bool: ...

    def run(self, change: SchemaChange, timestamp: int = 0) -> None: ...


class Target(Protocol):
    def table(self, schema: str, table: str, refresh: bool = False) -> TargetTable: ...

    def forget_tables(self) -> None: ...

    def probe(self, probes: Sequence[Probe]) -> list[Observed]: ...

    def write(
        self,
        writes: Iterable[Write],
        extra: Sequence[Statement],
        row: CheckpointRow | PartRow,
        before_commit: Callable[[], None] | None = None,
    ) -> Effects: ...

    def write_open(self, writes: Iterable[Write], extra: Sequence[Statement]) -> Effects: ...

    def send_read(self, statement: Statement, on_rows: Callable[[list[Any]], None]) -> None: ...

    def ddl_session(self, what: str) -> AbstractContextManager[DdlRunner]: ...

    def ensure_checkpoint_table(self) -> None: ...

    def read_checkpoint(self, channel: str) -> CheckpointRow | None: ...

    def execute(self, statement: Statement, what: str = "a statement") -> int: ...

    def query(self, statement: Statement, what: str) -> list[tuple[Any, ...]]: ...

    def commit(self) -> None: ...

    def run_setup(self, statements: Sequence[str], what: str) -> None: ...

    def base_tables(self) -> list[tuple[str, str]]: ...

    def columns(self, schema: str, table: str) -> dict[str, Any]: ...

    def recover(self, exc: BaseException) -> None: ...

    def close(self) -> None: ...
