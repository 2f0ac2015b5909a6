"""Group binlog events into committed transactions with SCNs (pure: no I/O but the spill).

    Begin ─ Rows ─ Rows ─ ... ─ Commit            one Transaction at the Commit's position
    Begin(standalone) ─ Statement                 a DDL Transaction at the Statement's position
    Statement (no open group)                     likewise

The SCN is ``(change_id, source server_id, log_index, log_pos after the commit event)``: exactly
where reading resumes after the transaction, so the buffer's last SCN is the restart position.

Capture filtering drops row changes of tables the filter does not keep, but a transaction that
writes the apply checkpoint table, or whose events carry MariaDB's skip_replication flag (apply
sessions set it, which also marks their DDL), is flagged DRC-originated *before* filtering, so
the flag survives any filter. DRC's tombstone and heartbeat rows (markers.always_captured)
are kept whatever the filter: the other datacenters need them. A transaction with more rows or
bytes than a fragment holds is spilled fragment by fragment (the caller supplies the spill),
bounding memory; at commit its fragments are replayed with the final SCN, the flag and
fragment numbers.

``omit_drc_rows`` (``[replicator] drc_applied = "marker"``): a DRC-originated transaction is
stored as one record without its row changes, flagged ``rows_omitted`` (DDL kept), when it
wrote a table the capture filter keeps. Its rows usually come as :class:`SkippedRows`, never
decoded (the skip_replication flag is on its GTID event); rows of one known as DRC's only by
its checkpoint row were decoded and are dropped at the commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from drc.core import gtid as gtids
from drc.core.errors import UnsupportedTransactionError
from drc.core.events import Op, RowChange, SchemaChange, TableSchema, Transaction
from drc.core.gtid import Gtid, GtidPosition
from drc.core.markers import always_captured, is_marker_table
from drc.core.scn import SCN
from drc.core.selection import selects_ddl
from drc.core.statements import is_account_statement
from drc.core.tablefilter import TableFilter
from drc.replicator.source_events import (
    Begin,
    Commit,
    GtidList,
    Heartbeat,
    Rows,
    SkippedRows,
    SourceEvent,
    Statement,
    XaPrepare,
)

_PLACEHOLDER_POS = 0


class Spill(Protocol):
    """Where fragments of a large transaction wait for its commit."""

    def write(self, fragment: Transaction) -> None: ...

    def read(self) -> Iterator[Transaction]: ...

    def close(self) -> None: ...


class MemorySpill:
    """A spill that keeps fragments in memory (tests; tiny limits)."""

    def __init__(self) -> None:
        self._fragments: list[Transaction] = []

    def write(self, fragment: Transaction) -> None:
        self._fragments.append(fragment)

    def read(self) -> Iterator[Transaction]:
        return iter(self._fragments)

    def close(self) -> None:
        self._fragments.clear()


@dataclass(frozen=True, slots=True)
class FragmentLimits:
    rows: int = 10_000
    bytes: int = 8 << 20


@dataclass
class Committed:
    """A committed source transaction, ready to append: call ``fragments()`` exactly once."""

    scn: SCN
    tables: dict[tuple[str, str], TableSchema]
    ddl: tuple[SchemaChange, ...]
    drc_originated: bool
    empty: bool
    _fragments: Callable[[], Iterator[Transaction]]
    gtid: str | None = None  # the stored GTID fields (drc.core.gtid.record_fields)
    gtid_position: str | None = None

    def fragments(self) -> Iterator[Transaction]:
        return self._fragments()


@dataclass
class _Open:
    gtid: str | None
    server_id: int
    standalone: bool
    changes: list[RowChange] = field(default_factory=list)
    pending_bytes: int = 0
    ddl: list[SchemaChange] = field(default_factory=list)
    tables: dict[tuple[str, str], TableSchema] = field(default_factory=dict)
    drc_originated: bool = False
    spill: Spill | None = None
    spilled: int = 0
    rows_omitted: bool = False

    def omit_rows(self) -> None:
        """Drop the row changes gathered so far (and any spilled), keep the fact."""
        if self.changes or self.spilled:
            self.rows_omitted = True
        if self.spill is not None:
            self.spill.close()
            self.spill = None
        self.changes, self.pending_bytes, self.spilled = [], 0, 0


class TransactionAssembler:
    def __init__(
        self,
        source_server_id: int,
        change_id: int,
        capture: TableFilter,
        limits: FragmentLimits = FragmentLimits(),
        spill_factory: Callable[[], Spill] = MemorySpill,
        gtid_position: GtidPosition | None = None,
        omit_drc_rows: bool = False,
        xa_ignored_until: tuple[int, int] = (0, 0),
    ) -> None:
        """``gtid_position``: the source's GTID position before the first event fed; None
        takes it from the first GTID list event (a binlog read from a file's start).
        ``omit_drc_rows``: store DRC-originated transactions without rows (module docstring).
        ``xa_ignored_until``: a two-phase XA prepared up to this position is not refused but
        assembled as empty (a re-read from a file's start, for positions never served)."""
        self._position = None if gtid_position is None else dict(gtid_position)
        self._server_id = source_server_id
        self._change_id = change_id
        self._capture = capture
        self._limits = limits
        self._spill_factory = spill_factory
        self._open: _Open | None = None
        self._omit_drc_rows = omit_drc_rows
        self._xa_ignored_until = xa_ignored_until
        self.account_statements_dropped = 0  # never stored: they may carry passwords

    def reset(self) -> None:
        """Forget a partly read transaction (the connection dropped; it will be read again)."""
        if self._open is not None and self._open.spill is not None:
            self._open.spill.close()
        self._open = None

    def feed(self, event: SourceEvent) -> Committed | None:
        if isinstance(event, Rows):
            self._rows(event)
        elif isinstance(event, SkippedRows):
            self._skipped(event)
        elif isinstance(event, Begin):
            self.reset()
            self._open = _Open(event.gtid, event.server_id, event.standalone)
            self._open.drc_originated = event.skip_replication
        elif isinstance(event, Commit):
            return self._commit(event.log_index, event.log_pos, event.timestamp)
        elif isinstance(event, Statement):
            return self._statement(event)
        elif isinstance(event, XaPrepare):
            return self._xa_prepare(event)
        elif isinstance(event, GtidList):
            if self._position is None:
                self._position = gtids.position(map(Gtid.parse, event.gtids))
        elif not isinstance(event, Heartbeat):
            raise TypeError(f"unexpected source event {event!r}")
        return None

    def _rows(self, event: Rows) -> None:
        txn = self._captured(event.table)
        if txn is None:
            return
        if self._omit_drc_rows and txn.drc_originated:
            txn.omit_rows()
            txn.rows_omitted = True
            return
        schema, table, op = event.table.schema, event.table.table, event.op
        row_bytes = event.size_bytes // max(1, len(event.images))
        for before, after in event.images:  # row by row: a fragment never exceeds the limits
            txn.changes.append(RowChange(schema, table, op, before, after))
            txn.pending_bytes += row_bytes
            if len(txn.changes) >= self._limits.rows or txn.pending_bytes >= self._limits.bytes:
                self._spill(txn)

    def _skipped(self, event: SkippedRows) -> None:
        txn = self._captured(event.table)
        if txn is not None:
            txn.drc_originated = True  # it came undecoded because it is flagged
            txn.rows_omitted = True

    def _captured(self, table: TableSchema) -> _Open | None:
        """The open transaction, told of a rows event of ``table``; None when the capture
        filter leaves the table out."""
        txn = self._open
        if txn is None:  # rows outside a group: a source without GTID events; open one
            txn = self._open = _Open(None, self._server_id, standalone=False)
        key = (table.schema, table.table)
        if is_marker_table(*key):
            txn.drc_originated = True
        if not self._capture.matches(*key) and not always_captured(*key):
            return None
        txn.tables[key] = table
        return txn

    def _spill(self, txn: _Open) -> None:
        if txn.spill is None:
            txn.spill = self._spill_factory()
        placeholder = SCN(self._change_id, self._server_id, _PLACEHOLDER_POS, _PLACEHOLDER_POS)
        txn.spill.write(
            Transaction(
                placeholder, txn.server_id, txn.gtid, 0, tuple(txn.changes), fragment=txn.spilled
            )
        )
        txn.spilled += 1
        txn.changes = []
        txn.pending_bytes = 0

    def _statement(self, event: Statement) -> Committed | None:
        change = SchemaChange(event.schema, event.sql)
        if self._open is None:
            self._open = _Open(None, event.server_id, standalone=True)
        self._open.drc_originated |= event.skip_replication
        if is_account_statement(event.sql):
            self.account_statements_dropped += 1
        elif selects_ddl(self._capture, change):
            self._open.ddl.append(change)
        txn = self._open
        if txn.standalone or not (txn.changes or txn.spilled or txn.rows_omitted):
            return self._commit(event.log_index, event.log_pos, event.timestamp)
        return None

    def _xa_prepare(self, event: XaPrepare) -> Committed | None:
        """The end of an XA transaction's PREPARE group. Its rows commit only at a later
        ``XA COMMIT`` (or never): storing them now could publish rows that roll back, and
        dropping them loses them, so capture stops when the filter keeps any of them."""
        txn = self._open
        ignored = (event.log_index, event.log_pos) <= self._xa_ignored_until
        if ignored and txn is not None:
            txn.omit_rows()
            txn.rows_omitted = False
        if not event.one_phase and txn is not None and (txn.changes or txn.spilled):
            where = f"{event.log_file or f'binlog #{event.log_index}'}:{event.log_pos}"
            tables = ", ".join(sorted(f"{schema}.{table}" for schema, table in txn.tables))
            raise UnsupportedTransactionError(
                f"the source transaction ending at {where} (GTID {txn.gtid}, tables {tables}) "
                f"is a two-phase XA transaction (XA PREPARE {event.xid}, committed later by "
                "XA COMMIT): DRC does not support two-phase XA transactions yet, and capture "
                "stops here rather than lose its rows. Retrying stops here again. Have the "
                "application commit with XA COMMIT ... ONE PHASE or without XA; to get past "
                "this transaction, see docs/operations.md, Two-phase XA transactions"
            )
        # One phase: committed here. Otherwise none of its rows is captured: its place is
        # stored like a filtered-out transaction's, and its XA COMMIT's group is empty.
        return self._commit(event.log_index, event.log_pos, event.timestamp)

    def _commit(self, log_index: int, log_pos: int, timestamp: int) -> Committed | None:
        txn, self._open = self._open, None
        if txn is None:
            return None  # a COMMIT with no open group (e.g. after a reset): nothing to emit
        scn = SCN(self._change_id, self._server_id, log_index, log_pos)
        if self._omit_drc_rows and txn.drc_originated:
            txn.omit_rows()  # known as DRC's only from its checkpoint row: rows came decoded
        empty = not (txn.changes or txn.spilled or txn.ddl or txn.rows_omitted)
        gtid = None if txn.gtid is None else Gtid.parse(txn.gtid)
        self._position = position = self._position or {}
        if gtid is not None:
            self._position = position = gtids.advance(position, gtid)
        gtid_position = gtids.record_fields(position, gtid)[1]
        return Committed(
            scn=scn,
            tables=txn.tables,
            ddl=tuple(txn.ddl),
            drc_originated=txn.drc_originated,
            empty=empty,
            _fragments=lambda: _replay(txn, scn, timestamp, gtid_position),
            gtid=txn.gtid,
            gtid_position=gtid_position,
        )


def _replay(
    txn: _Open, scn: SCN, timestamp: int, gtid_position: str | None
) -> Iterator[Transaction]:
    """Every fragment with the final SCN; the in-memory remainder (and the DDL) comes last."""
    try:
        if txn.spill is not None:
            for fragment in txn.spill.read():
                yield dataclasses.replace(
                    fragment,
                    scn=scn,
                    timestamp=timestamp,
                    drc_originated=txn.drc_originated,
                    last_fragment=False,
                    gtid_position=gtid_position,
                )
        yield Transaction(
            scn,
            txn.server_id,
            txn.gtid,
            timestamp,
            tuple(txn.changes),
            ddl=tuple(txn.ddl),
            drc_originated=txn.drc_originated,
            fragment=txn.spilled,
            last_fragment=True,
            gtid_position=gtid_position,
            rows_omitted=txn.rows_omitted,
        )
    finally:
        if txn.spill is not None:
            txn.spill.close()


__all__ = ["Committed", "FragmentLimits", "MemorySpill", "Op", "Spill", "TransactionAssembler"]
