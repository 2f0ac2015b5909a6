"""The conflict log: one row in ``drc.conflicts`` per conflict an apply channel detected.

Pure: SQL text and bound values (drc.mysql.sql.Statement) out, rows read through any object
with ``query(statement, what)`` (drc.apply.sink.TargetSession has it). The channel runs
:func:`insert` inside the target transaction that applies the resolution, so a conflict is
logged exactly when its resolution commits (a rolled-back group logs nothing).

    drc.conflicts
    +-----------------+---------------------+----------------------------------------------+
    | id          PK  | BIGINT UNSIGNED AI  | order of detection (newest = highest)        |
    | detected_at     | DATETIME(6)         | UTC_TIMESTAMP(6) of the insert               |
    | channel         | VARCHAR(64)         | apply channel name                           |
    | origin          | VARCHAR(64)         | remote datacenter of the incoming change     |
    | datacenter      | VARCHAR(64)         | this datacenter (the side that decided)      |
    | scn             | VARCHAR(96)         | SCN of the incoming transaction (c:s:i:p)    |
    | origin_time     | DATETIME(6) NULL    | commit time at the origin, UTC               |
    | schema_name     | VARCHAR(64)         | target schema                                |
    | table_name      | VARCHAR(64)         | target table                                 |
    | primary_key     | TEXT                | JSON {column: value}                         |
    | kind            | VARCHAR(16)         | one of KINDS                                 |
    | policy          | VARCHAR(16)         | one of POLICIES                              |
    | decision        | VARCHAR(16)         | one of DECISIONS                             |
    | reason          | TEXT                | one sentence: why this decision              |
    | local_row       | MEDIUMTEXT NULL     | JSON row; NULL = no row                      |
    | incoming_before | MEDIUMTEXT NULL     | JSON row; NULL for an insert                 |
    | incoming_after  | MEDIUMTEXT NULL     | JSON row; NULL for a delete                  |
    | result_row      | MEDIUMTEXT NULL     | JSON row the target holds afterwards         |
    +-----------------+---------------------+----------------------------------------------+
    KEY (detected_at), KEY (schema_name, table_name, id), KEY (channel, id)

Rows and keys are JSON objects in column order, each value in drc.core.jsonwire's lossless
tagged form, so Decimal, datetime, bytes, TIME, SET, BIT and zero dates read back as they were
written. Values may come from the stream (drc.core.values types) or from pymysql (a ``set``, a
``bytearray``, a ``datetime.time``); :func:`encode_row` accepts both. Times read back are aware
datetimes in UTC.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from drc.conflicts import policies
from drc.core.errors import UnsupportedValueError
from drc.core.jsonwire import JsonWireError, value_from_json, value_to_json
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.target_errors import ApplyError, MissingTableError
from drc.core.values import normalized, utc_aware
from drc.mysql.sql import Statement, adapt, ident, quote

SCHEMA = CHECKPOINT_SCHEMA  # the same `drc` database as the checkpoint table
TABLE = "conflicts"

KINDS = ("insert-insert", "update-update", "update-delete", "delete-update", "insert-delete")
#  insert-insert: incoming insert, a different row already there
#  update-update: incoming update, local row is not the incoming before-image
#  update-delete: incoming update, local row deleted (or never there)
#  delete-update: incoming delete, local row is not the incoming before-image
#  insert-delete: incoming insert, local row was deleted later than the insert (tombstone newer)
# The policies that detect conflicts (drc.conflicts.policies declares them).
POLICIES = tuple(name for name, policy in policies.POLICIES.items() if policy.detects)
DECISIONS = ("incoming", "local", "custom", "delete")
#  incoming: the incoming change was applied; local: the local row was kept;
#  custom: a resolver's own row was written; delete: a resolver deleted the row

MISSING = (
    "no conflict has been recorded on this target: the table drc.conflicts is created by an "
    "apply channel with a conflict policy on its first start"
)
_NO_TABLE_CODES = frozenset({1146, 1049})  # no such table, no such database

_COLUMNS: Mapping[str, str] = {
    "id": "BIGINT UNSIGNED NOT NULL AUTO_INCREMENT",
    "detected_at": "DATETIME(6) NOT NULL",
    "channel": "VARCHAR(64) NOT NULL",
    "origin": "VARCHAR(64) NOT NULL",
    "datacenter": "VARCHAR(64) NOT NULL",
    "scn": "VARCHAR(96) NOT NULL",
    "origin_time": "DATETIME(6) NULL",
    "schema_name": "VARCHAR(64) NOT NULL",
    "table_name": "VARCHAR(64) NOT NULL",
    "primary_key": "TEXT NOT NULL",
    "kind": "VARCHAR(16) NOT NULL",
    "policy": "VARCHAR(16) NOT NULL",
    "decision": "VARCHAR(16) NOT NULL",
    "reason": "TEXT NOT NULL",
    "local_row": "MEDIUMTEXT NULL",
    "incoming_before": "MEDIUMTEXT NULL",
    "incoming_after": "MEDIUMTEXT NULL",
    "result_row": "MEDIUMTEXT NULL",
}
_INSERTED = tuple(name for name in _COLUMNS if name not in ("id", "detected_at"))
_SELECTED = ", ".join(ident(name) for name in _COLUMNS)


@dataclass(frozen=True, slots=True)
class ConflictEntry:
    """One detected conflict and how it was resolved. ``kind``, ``policy`` and ``decision``
    must be members of KINDS, POLICIES and DECISIONS (ValueError otherwise)."""

    channel: str  # apply channel name
    scn: str  # SCN of the incoming transaction, text form "c:s:i:p"
    origin: str  # remote datacenter the incoming change came from
    datacenter: str  # this datacenter (the side that decided)
    schema: str  # target schema/table names
    table: str
    key: Mapping[str, Any]  # primary key column -> value
    kind: str  # one of KINDS
    policy: str  # one of POLICIES
    decision: str  # one of DECISIONS
    reason: str  # one human sentence: why this decision
    local_row: Mapping[str, Any] | None  # target's row before (None: no row)
    incoming_before: Mapping[str, Any] | None  # None for an insert
    incoming_after: Mapping[str, Any] | None  # None for a delete
    result_row: Mapping[str, Any] | None  # what the target holds afterwards (None: no row)
    origin_time: dt.datetime | None = None  # commit time at the origin (UTC), if known

    def __post_init__(self) -> None:
        for name, allowed in (("kind", KINDS), ("policy", POLICIES), ("decision", DECISIONS)):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"conflict {name} {value!r} is not one of {', '.join(allowed)}")


@dataclass(frozen=True, slots=True)
class StoredConflict(ConflictEntry):
    """A logged conflict read back: the entry, its id and when it was detected (aware UTC)."""

    id: int = field(kw_only=True)
    detected_at: dt.datetime = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class ConflictCount:
    """How many logged conflicts share a table, policy, decision and kind."""

    schema: str
    table: str
    policy: str
    decision: str
    kind: str
    count: int


class QuerySession(Protocol):
    def query(self, statement: Statement, what: str) -> list[tuple[Any, ...]]: ...


# ---------------------------------------------------------------- DDL and writes


def create_statements() -> list[str]:
    """DDL that makes sure the database and table exist (idempotent, run without parameters)."""
    columns = ",\n  ".join(f"{quote(name)} {kind}" for name, kind in _COLUMNS.items())
    return [
        f"CREATE DATABASE IF NOT EXISTS {quote(SCHEMA)}",
        f"CREATE TABLE IF NOT EXISTS {quote(SCHEMA)}.{quote(TABLE)} (\n  {columns},\n"
        "  PRIMARY KEY (`id`),\n"
        "  KEY `by_time` (`detected_at`),\n"
        "  KEY `by_table` (`schema_name`, `table_name`, `id`),\n"
        "  KEY `by_channel` (`channel`, `id`)\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    ]


PURGE_BATCH = 5000


def purge(older_than_days: float) -> Statement:
    """Delete up to PURGE_BATCH entries detected more than ``older_than_days`` ago (run until
    it deletes fewer): the log is kept for a bounded time (conflicts.log_retention_days)."""
    return Statement(
        f"DELETE FROM {ident(SCHEMA)}.{ident(TABLE)} WHERE {ident('detected_at')} < "
        f"UTC_TIMESTAMP(6) - INTERVAL %s SECOND LIMIT {PURGE_BATCH}",
        (int(older_than_days * 86400),),
    )


def insert(entries: Sequence[ConflictEntry]) -> Statement:
    """One multi-row INSERT of ``entries``; ``detected_at`` is the server's UTC_TIMESTAMP(6)."""
    if not entries:
        raise ValueError("insert() needs at least one conflict entry")
    columns = ", ".join(ident(name) for name in ("detected_at", *_INSERTED))
    row = "(UTC_TIMESTAMP(6), " + ", ".join(["%s"] * len(_INSERTED)) + ")"
    sql = f"INSERT INTO {_table()} ({columns}) VALUES " + ", ".join([row] * len(entries))
    return Statement(sql, tuple(value for e in entries for value in _params(e)))


def _params(entry: ConflictEntry) -> tuple[Any, ...]:
    """One entry's values in _INSERTED order."""
    return (
        entry.channel, entry.origin, entry.datacenter, entry.scn, adapt(entry.origin_time),
        entry.schema, entry.table, encode_row(entry.key), entry.kind, entry.policy,
        entry.decision, entry.reason, encode_row(entry.local_row),
        encode_row(entry.incoming_before), encode_row(entry.incoming_after),
        encode_row(entry.result_row),
    )  # fmt: skip


def _table() -> str:
    return f"{ident(SCHEMA)}.{ident(TABLE)}"


# ---------------------------------------------------------------- row encoding


def encode_row(row: Mapping[str, Any] | None) -> str | None:
    """A row (or key) as JSON text, column order kept; None stays None (no row)."""
    document = row_to_json(row)
    return (
        None
        if document is None
        else json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    )


def row_to_json(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A row as a JSON-ready object {column: tagged value} (drc.core.jsonwire), order kept."""
    if row is None:
        return None
    document = {}
    for name, value in row.items():
        try:
            document[name] = value_to_json(normalized(value))
        except JsonWireError as exc:
            raise UnsupportedValueError(f"conflict log: column {name!r}: {exc}") from exc
    return document


def decode_row(text: str | None) -> dict[str, Any] | None:
    """The row :func:`encode_row` wrote, values back in their Python types."""
    if text is None:
        return None
    return {name: value_from_json(value) for name, value in json.loads(text).items()}


# ---------------------------------------------------------------- reads


def list_conflicts(
    session: QuerySession,
    channel: str | None = None,
    table: str | tuple[str, str] | None = None,
    since: dt.datetime | None = None,
    limit: int = 50,
    policy: str | None = None,
) -> list[StoredConflict]:
    """Logged conflicts, newest first, filtered by channel, table ("db.t" or (db, t)),
    policy and detection time (``since``: naive = UTC); at most ``limit``."""
    where, params = _filters(since)
    if channel is not None:
        where.append("`channel` = %s")
        params.append(channel)
    if policy is not None:
        where.append("`policy` = %s")
        params.append(policy)
    if table is not None:
        schema, name = table if isinstance(table, tuple) else _split(table)
        where.append("`schema_name` = %s AND `table_name` = %s")
        params += [schema, name]
    sql = f"SELECT {_SELECTED} FROM {_table()}{_where(where)} ORDER BY `id` DESC LIMIT %s"
    rows = _query(session, Statement(sql, (*params, int(limit))), "listing conflicts")
    return [_stored(row) for row in rows]


def get_conflict(session: QuerySession, id: int) -> StoredConflict | None:
    sql = f"SELECT {_SELECTED} FROM {_table()} WHERE `id` = %s"
    rows = _query(session, Statement(sql, (int(id),)), f"reading conflict {id}")
    return _stored(rows[0]) if rows else None


def stats(session: QuerySession, since: dt.datetime | None = None) -> list[ConflictCount]:
    """Counts by schema, table, policy, decision and kind (sorted by those), since a time."""
    where, params = _filters(since)
    group = "`schema_name`, `table_name`, `policy`, `decision`, `kind`"
    sql = (
        f"SELECT {group}, COUNT(*) FROM {_table()}{_where(where)} GROUP BY {group} ORDER BY {group}"
    )
    rows = _query(session, Statement(sql, tuple(params)), "counting conflicts")
    return [
        ConflictCount(str(schema), str(table), str(policy), str(decision), str(kind), int(n))
        for schema, table, policy, decision, kind, n in rows
    ]


def _filters(since: dt.datetime | None) -> tuple[list[str], list[Any]]:
    if since is None:
        return [], []
    return ["`detected_at` >= %s"], [adapt(since)]  # an aware time becomes naive UTC


def _where(conditions: list[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


def _split(name: str) -> tuple[str, str]:
    schema, dot, table = name.partition(".")
    if not dot or not schema or not table:
        raise ValueError(f"{name!r} is not DB.TABLE")
    return schema, table


def _query(session: QuerySession, statement: Statement, what: str) -> list[tuple[Any, ...]]:
    try:
        return session.query(statement, what)
    except ApplyError as exc:
        if exc.code in _NO_TABLE_CODES:
            raise MissingTableError(MISSING) from exc
        raise


def _stored(row: tuple[Any, ...]) -> StoredConflict:
    v = dict(zip(_COLUMNS, row, strict=True))
    return StoredConflict(
        id=int(v["id"]), detected_at=utc_aware(v["detected_at"]), channel=v["channel"],
        scn=v["scn"], origin=v["origin"], datacenter=v["datacenter"], schema=v["schema_name"],
        table=v["table_name"], key=decode_row(v["primary_key"]) or {}, kind=v["kind"],
        policy=v["policy"], decision=v["decision"], reason=v["reason"],
        local_row=decode_row(v["local_row"]), incoming_before=decode_row(v["incoming_before"]),
        incoming_after=decode_row(v["incoming_after"]), result_row=decode_row(v["result_row"]),
        origin_time=None if v["origin_time"] is None else utc_aware(v["origin_time"]),
    )  # fmt: skip
