"""What the binlog adapter hands the transaction assembler: small frozen values, no I/O.

A binlog position is ``(log_index, log_pos)``: the binlog file's number and the offset just after
the event, i.e. where reading resumes.
"""

from __future__ import annotations

from dataclasses import dataclass

from drc.core.events import Op, Row, TableSchema


@dataclass(frozen=True, slots=True)
class Begin:
    """A transaction group starts (MariaDB GTID event). ``standalone``: a DDL follows alone."""

    gtid: str | None
    server_id: int
    standalone: bool
    skip_replication: bool = False


@dataclass(frozen=True, slots=True)
class Rows:
    """One rows event: changes to one table, each as (before, after) images."""

    table: TableSchema
    op: Op
    images: tuple[tuple[Row | None, Row | None], ...]
    size_bytes: int


@dataclass(frozen=True, slots=True)
class SkippedRows:
    """A rows event of a transaction flagged skip_replication (an apply session's), left
    undecoded because capture stores such transactions without their rows
    (``[replicator] drc_applied = "marker"``). ``table``: what its TABLE_MAP said."""

    table: TableSchema


@dataclass(frozen=True, slots=True)
class Statement:
    """A QUERY event that is not BEGIN/COMMIT: DDL, written standalone at its own position."""

    schema: str
    sql: str
    server_id: int
    timestamp: int
    log_index: int
    log_pos: int
    skip_replication: bool = False


@dataclass(frozen=True, slots=True)
class Commit:
    """XID event, or a QUERY ``COMMIT`` for non-transactional engines."""

    server_id: int
    timestamp: int
    log_index: int
    log_pos: int


@dataclass(frozen=True, slots=True)
class XaPrepare:
    """MariaDB's XA_PREPARE event: it ends the group of a transaction's ``XA PREPARE`` (its rows
    came before it), which commits later in a group of its own (``XA COMMIT xid``), or rolls
    back. ``one_phase``: an ``XA COMMIT ... ONE PHASE`` that is committed here. ``xid``: as the
    server writes it in ``XA COMMIT`` (``X'gtrid',X'bqual',formatID``, hex in lower case)."""

    xid: str
    one_phase: bool
    server_id: int
    timestamp: int
    log_file: str | None
    log_index: int
    log_pos: int


@dataclass(frozen=True, slots=True)
class GtidList:
    """MariaDB's GTID list at the start of a binlog file: the binlog state before its first
    event group (``domain-server_id-seq_no`` texts, one per domain and server id)."""

    gtids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The source is idle at this position (or the adapter's read timed out)."""

    log_index: int
    log_pos: int


SourceEvent = Begin | Rows | SkippedRows | Statement | Commit | XaPrepare | Heartbeat | GtidList
