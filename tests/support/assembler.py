"""Binlog rows events of a small (id, v) table, and a transaction assembler of server 7 whose
fragment row limit a test can lower, for the capture unit tests."""

from __future__ import annotations

from drc.core.events import Column, Op, TableSchema
from drc.core.tablefilter import TableFilter
from drc.replicator.assembler import FragmentLimits, TransactionAssembler
from drc.replicator.source_events import Rows


def table_schema(db: str, name: str) -> TableSchema:
    return TableSchema(db, name, (Column("id", "int", False), Column("v", "int", True)), ("id",))


def rows_event(db: str, name: str, *ids: int, op: Op = Op.INSERT) -> Rows:
    images = tuple((None, {"id": i, "v": i * 10}) for i in ids)
    return Rows(table_schema(db, name), op, images, size_bytes=20 * len(ids))


def assembler(capture: TableFilter | None = None, rows: int = 10_000) -> TransactionAssembler:
    limits = FragmentLimits(rows=rows, bytes=1 << 30)
    return TransactionAssembler(7, 2, capture or TableFilter(), limits)
