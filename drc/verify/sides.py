"""The two servers verify reads: connections, table definitions, binlog ends, checkpoints.

Sessions are autocommit (each query sees the latest committed rows), UTC (TIMESTAMP values
print alike on both sides) and in DRC's sql_mode. A session that repairs also sets
``skip_replication`` and ``@drc_apply`` like an apply session, so what it writes is never
captured as a change to replicate and fires no guarded trigger.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from drc.core.errors import FatalError
from drc.core.markers import CHECKPOINT_SCHEMA, CHECKPOINT_TABLE
from drc.core.scn import SCN
from drc.core.settle import BinlogPoint, binlog_point
from drc.mysql import driver, sql
from drc.tls import MysqlTls


class VerifyError(FatalError):
    """Verify cannot run as asked; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """How to reach one server (what a Spark task unpickles: it imports none of the apply
    code that drc.apply.sink would bring)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    connect_timeout_s: float = 10.0
    tls: MysqlTls = MysqlTls()

    @classmethod
    def of(cls, settings: Any) -> Endpoint:
        """From a drc.mysql.driver.TargetSettings."""
        return cls(settings.host, settings.port, settings.user, settings.password,
                   settings.connect_timeout_s, settings.tls)  # fmt: skip

    def __repr__(self) -> str:  # never print the password
        return f"Endpoint({self.user}@{self.host}:{self.port})"


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    data_type: str  # DATA_TYPE, e.g. "varchar"
    definition: str  # COLUMN_TYPE with charset, collation and NULL, compared between the sides
    nullable: bool = True


def connect(settings: Endpoint, *, writes: bool = False) -> Any:
    """An autocommit session on ``settings``' server (``writes``: a repair session)."""
    try:
        conn = driver.connect(settings, binary_prefix=True)
    except driver.DriverError as exc:
        raise VerifyError(f"cannot connect to {settings!r}: {exc}") from exc
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = %s, time_zone = %s",
                    (sql.SESSION_SQL_MODE, sql.SESSION_TIME_ZONE))  # fmt: skip
        if writes:
            cur.execute("SET SESSION skip_replication = 1, @drc_apply = 1")
    return conn


def query(conn: Any, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(text, tuple(params))
        return [tuple(r) for r in cur.fetchall()]


def columns(conn: Any, schema: str, table: str) -> list[Column]:
    """The table's columns in order ([] when there is no such table)."""
    rows = query(conn,
        "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME, "
        "IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND "
        "TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table))  # fmt: skip
    found = []
    for name, data_type, column_type, charset, collation, nullable in rows:
        definition = str(column_type) + (f" {charset} {collation}" if charset else "")
        null = nullable == "YES"
        definition += "" if null else " NOT NULL"
        found.append(Column(str(name), str(data_type).lower(), definition, null))
    return found


def binlog_end(conn: Any) -> BinlogPoint | None:
    """Where the server's binlog ends now (None: binary logging is off)."""
    rows = query(conn, "SHOW MASTER STATUS")
    if not rows:
        return None
    server_id = int(query(conn, "SELECT @@server_id")[0][0])
    return binlog_point(server_id, str(rows[0][0]), int(rows[0][1]))


_CHECKPOINTS = f"{sql.table_name(CHECKPOINT_SCHEMA, CHECKPOINT_TABLE)}"


def checkpoint_of(conn: Any, channel: str) -> SCN | None:
    """The channel's checkpoint SCN on this server (None: no row, or no drc schema yet)."""
    try:
        rows = query(conn, f"SELECT scn FROM {_CHECKPOINTS} WHERE channel = %s", (channel,))
    except driver.ProgrammingError:
        return None
    return SCN.parse(str(rows[0][0])) if rows and rows[0][0] else None


def checkpoints_from(conn: Any, origin: str, leave_out: Sequence[str]) -> dict[str, SCN]:
    """Checkpoints on this server of the channels whose origin is ``origin`` (the reverse
    channels of a verified channel), by name."""
    try:
        rows = query(conn, f"SELECT channel, scn FROM {_CHECKPOINTS} WHERE origin = %s", (origin,))
    except driver.ProgrammingError:
        return {}
    return {str(c): SCN.parse(str(s)) for c, s in rows if s and str(c) not in leave_out}


def json_row(names: Sequence[str], row: Sequence[Any] | None) -> str | None:
    """A row as JSON text for the repair log (bytes as hex, other odd values as text)."""
    if row is None:
        return None
    return json.dumps(
        {n: _shown(v) for n, v in zip(names, row, strict=True)}, ensure_ascii=False, default=str
    )


def _shown(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    return value
