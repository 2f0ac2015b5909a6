"""The change stream's values: transactions of row changes, and table schemas.

All are frozen dataclasses. Row images are plain dicts (column name -> value, in table column
order; see :mod:`drc.core.values` for the value types). They are shared, not copied, so treat them
as read-only; a RowChange holding dicts is consequently not hashable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from drc.core.scn import SCN

Row = Mapping[str, Any]


class Op(StrEnum):
    """What a row change does; the value is the text used in APIs and logs."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row's change: insert has only ``after``, delete only ``before``, update both.

    Rows are interpreted with the table's schema as of the transaction's SCN.
    """

    schema: str
    table: str
    op: Op
    before: Row | None
    after: Row | None

    def __post_init__(self) -> None:
        if not isinstance(self.op, Op):
            object.__setattr__(self, "op", Op(self.op))  # accept "insert" etc.; bad text raises
        has = (self.before is not None, self.after is not None)
        if has != _IMAGES[self.op]:
            raise ValueError(
                f"{self.op.value} on {self.schema}.{self.table} needs "
                f"{_describe(*_IMAGES[self.op])}, got {_describe(*has)}"
            )

    @property
    def row(self) -> Row:
        """The row as the change leaves it; for a delete, the row it removed."""
        return self.after if self.after is not None else self.before  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class CounterUpdate(RowChange):
    """An update of a row known to exist that adds to its counter columns instead of setting
    them (drc.conflicts.engine: a table's ``delta_columns``). Made by conflict resolution, never
    captured: ``before`` holds the key to match, ``after`` the whole row to insert should the
    row be missing after all.

    ``SET <assigned> = after's values, <kept> = themselves, <counter> = <counter> + amount``:
    a kept column is assigned its own value so that no ``ON UPDATE`` default moves it.
    """

    added: tuple[tuple[str, Any], ...] = ()  # (counter column, amount to add)
    assigned: tuple[str, ...] = ()  # set to after's value
    kept: tuple[str, ...] = ()  # left as they are


# Which row images each op carries: (before, after).
_IMAGES = {Op.INSERT: (False, True), Op.UPDATE: (True, True), Op.DELETE: (True, False)}


def _describe(before: bool, after: bool) -> str:
    names = [name for name, present in (("before", before), ("after", after)) if present]
    return " and ".join(names) + " image" + ("s" if len(names) > 1 else "") if names else "no image"


@dataclass(frozen=True, slots=True)
class Column:
    """A column as the source declares it: ``type`` is the SQL type text, e.g. 'varchar(20)'."""

    name: str
    type: str
    nullable: bool
    charset: str | None = None


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table's columns in declaration order and its primary key (empty if it has none).

    Versioned by SCN in the metastore; a row is always read with the schema of its SCN.
    """

    schema: str
    table: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    def __post_init__(self) -> None:
        names = self.column_names
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"{self.schema}.{self.table} has duplicate columns {dupes}")
        missing = [k for k in self.primary_key if k not in names]
        if missing:
            raise ValueError(
                f"primary key of {self.schema}.{self.table} names unknown columns {missing}"
            )

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """A DDL statement as it ran on the source, and the default database it ran in.

    ``schema`` matters because the statement may name tables without a database.
    """

    schema: str
    statement: str


@dataclass(frozen=True, slots=True)
class Transaction:
    """One committed source transaction: the unit of replication.

    ``scn`` is where the binlog resumes after it; ``server_id`` is the server id from the binlog
    event header; ``gtid`` is the source GTID where it has one; ``gtid_position`` is the source's
    GTID position after it (one GTID per domain, drc.core.gtid) when that is more than ``gtid``
    alone, i.e. the source has several domains; ``timestamp`` is the commit time
    in unix seconds from the binlog header. ``drc_originated`` marks a transaction that carries
    the loop marker (DRC applied it), so it is never sent back to its origin. ``rows_omitted``:
    a DRC-originated transaction stored without its row changes (``[replicator] drc_applied =
    "marker"``): it has none here, though it wrote rows at the source.

    Fragments: a source transaction too large for one record is stored as several Transactions
    sharing one SCN, numbered ``fragment`` 0, 1, ... in stream order, with ``last_fragment`` set
    only on the final one. Row changes keep their order across fragments; DDL rides only on
    the last fragment (drc.replicator.assembler: a CREATE TABLE ... SELECT is its CREATE, then
    its rows under a later SCN), and a stream apply stops at DDL before it. A consumer
    applies the transaction only once it holds all fragments, as one target transaction, and
    resumes from the SCN only after the last fragment. An ordinary transaction is fragment 0 and
    its own last fragment.
    """

    scn: SCN
    server_id: int
    gtid: str | None
    timestamp: int
    changes: tuple[RowChange, ...]
    ddl: tuple[SchemaChange, ...] = ()
    drc_originated: bool = False
    fragment: int = 0
    last_fragment: bool = True
    gtid_position: str | None = None
    rows_omitted: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.scn, SCN):
            raise TypeError(f"Transaction.scn must be an SCN, got {type(self.scn).__name__}")
        if not isinstance(self.changes, tuple) or not isinstance(self.ddl, tuple):
            raise TypeError("Transaction.changes and Transaction.ddl must be tuples")
        if self.fragment < 0 or self.timestamp < 0:
            raise ValueError(
                f"Transaction at {self.scn}: fragment ({self.fragment}) and "
                f"timestamp ({self.timestamp}) must not be negative"
            )
        if self.rows_omitted and (self.changes or not self.drc_originated):
            raise ValueError(
                f"Transaction at {self.scn}: only a DRC-originated transaction without row "
                "changes may be marked rows_omitted"
            )

    def tables(self) -> frozenset[tuple[str, str]]:
        """The (schema, table) pairs this transaction's row changes touch."""
        return frozenset((c.schema, c.table) for c in self.changes)
