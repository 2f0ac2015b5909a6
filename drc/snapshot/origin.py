"""The origin datacenter's database as a snapshot reads it (``[channels.origin_db]``).

Every chunk is one consistent read, and nothing more: ``START TRANSACTION WITH CONSISTENT
SNAPSHOT, READ ONLY`` takes no row or table lock (InnoDB reads the snapshot's row versions;
writers go on), and MariaDB reports the binlog position that snapshot corresponds to
(``Binlog_snapshot_file`` / ``Binlog_snapshot_position``): the chunk holds exactly the
transactions committed before that position. With the origin replicator's ``change_id`` and
``server_id`` that position is an SCN of the channel's stream (drc.core.scn: ``log_pos`` is the
position after a transaction's commit), so the channel knows which of its changes a chunk holds.
That needs the snapshot to read the server the replicator reads; :func:`check_same_server`
refuses another one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from drc.core.errors import FatalError, RetriableError
from drc.core.scn import SCN, split_binlog_name
from drc.mysql import driver
from drc.mysql.driver import TargetSettings
from drc.mysql.sql import SESSION_SQL_MODE, SESSION_TIME_ZONE, Statement, table_name
from drc.snapshot import rows
from drc.snapshot.rows import Column

GROUP_CONCAT_MAX = 16 << 20  # bytes of one chunk's rendered rows; bigger chunks stream


class SnapshotError(FatalError):
    """A snapshot cannot go on; the message says why and what to do."""


class OriginUnavailableError(RetriableError):
    """The origin's database went away or refused a read; the chunk was not copied."""


@dataclass(frozen=True, slots=True)
class Stream:
    """The origin replicator's numbering: binlog positions of this server become SCNs."""

    change_id: int
    server_id: int

    def scn(self, file: str, pos: int) -> SCN:
        return SCN(self.change_id, self.server_id, split_binlog_name(file)[1], pos)


def connect(settings: TargetSettings, what: str = "connecting to the origin") -> Any:
    """An autocommit session on the origin, UTC, its rendering limits raised."""
    try:
        conn = driver.connect(settings)
        with conn.cursor() as cur:
            cur.execute(
                "SET SESSION sql_mode = %s, time_zone = %s, group_concat_max_len = %s",
                (SESSION_SQL_MODE, SESSION_TIME_ZONE, GROUP_CONCAT_MAX),
            )
    except (driver.DriverError, OSError) as exc:
        raise OriginUnavailableError(
            f"the origin database {settings.host}:{settings.port} failed while {what}: {exc}"
        ) from exc
    return conn


def query(conn: Any, statement: Statement, what: str) -> list[tuple[Any, ...]]:
    try:
        with conn.cursor() as cur:
            cur.execute(statement.sql, statement.params or None)
            return [tuple(r) for r in cur.fetchall()]
    except (driver.DriverError, OSError) as exc:
        raise OriginUnavailableError(f"the origin database failed while {what}: {exc}") from exc


def check_same_server(conn: Any, stream: Stream) -> None:
    found = int(query(conn, Statement("SELECT @@server_id", ()), "reading its server_id")[0][0])
    if found != stream.server_id:
        raise SnapshotError(
            f"[channels.origin_db] is server_id {found}, but the origin replicator reads "
            f"server_id {stream.server_id}: a chunk's binlog position means nothing in the "
            "replicator's stream. Point origin_db at the server the replicator captures"
        )


def columns(conn: Any, schema: str, table: str) -> list[Column]:
    found = query(conn, Statement(
        "SELECT COLUMN_NAME, DATA_TYPE, EXTRA FROM information_schema.COLUMNS WHERE "
        "TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table)),
        f"reading the columns of {schema}.{table}")  # fmt: skip
    return [Column(str(n), str(t), "GENERATED" in str(e or "").upper()) for n, t, e in found]


@dataclass
class Read:
    """One chunk's consistent read: where it was taken and its rendered rows."""

    file: str
    pos: int
    rows: int
    pieces: Iterator[str]  # VALUES tuples joined by commas, each at most ``max_bytes``


def read_whole(
    conn: Any, schema: str, table: str, cols: Sequence[Column], where: Statement,
    max_bytes: int,
) -> Read | None:  # fmt: skip
    """The chunk's rows as of one consistent snapshot, rendered in one piece, and that
    snapshot's binlog position; None when they do not fit in ``max_bytes`` (then read the
    chunk with :func:`reading`)."""
    with _snapshot(conn, f"reading a chunk of {schema}.{table}") as (cur, file, pos):
        cur.execute(rows.chunk_select(schema, table, cols, where.sql), where.params)
        count, text = cur.fetchone()
        cur.execute("SELECT @@warning_count")  # 1260: cut at group_concat_max_len
        if int(cur.fetchone()[0]) != 0 or len(text or "") >= max_bytes:
            return None
        return Read(file, pos, int(count), iter([text] if text else []))


@contextmanager
def reading(
    conn: Any, schema: str, table: str, cols: Sequence[Column], where: Statement,
    max_bytes: int,
) -> Iterator[Read]:  # fmt: skip
    """A chunk too big for one piece: its rows streamed one per result row from one
    consistent snapshot, joined into pieces of at most ``max_bytes``, while the caller takes
    them."""
    with _snapshot(conn, f"reading a chunk of {schema}.{table}") as (cur, file, pos):
        cur.execute(f"SELECT COUNT(*) FROM {table_name(schema, table)} WHERE {where.sql}",
                    where.params)  # fmt: skip
        count = int(cur.fetchone()[0])
        yield Read(file, pos, count, _streamed(conn, schema, table, cols, where, max_bytes))


@contextmanager
def _snapshot(conn: Any, what: str) -> Iterator[tuple[Any, str, int]]:
    """A consistent-snapshot read-only transaction and its binlog position."""
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY")
            try:
                cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {str(k).lower(): v for k, v in cur.fetchall()}
                yield (cur, *_position(status))
            finally:
                cur.execute("COMMIT")
    except (driver.DriverError, OSError) as exc:
        raise OriginUnavailableError(f"the origin database failed while {what}: {exc}") from exc


def _position(status: dict[str, Any]) -> tuple[str, int]:
    file, pos = status.get("binlog_snapshot_file"), status.get("binlog_snapshot_position")
    if not file or pos is None:
        raise SnapshotError(
            "the origin reports no binlog snapshot position (Binlog_snapshot_file): it needs "
            "log_bin on, and InnoDB tables"
        )
    return str(file), int(pos)


def _streamed(
    conn: Any, schema: str, table: str, cols: Sequence[Column], where: Statement,
    max_bytes: int,
) -> Iterator[str]:  # fmt: skip
    """The chunk's tuples read one per row (same transaction), joined into pieces."""
    piece: list[str] = []
    size = 0
    with driver.streaming_cursor(conn) as cur:
        cur.execute(rows.rows_select(schema, table, cols, where.sql), where.params)
        for (value,) in cur:
            if piece and size + len(value) + 1 > max_bytes:
                yield ",".join(piece)
                piece, size = [], 0
            piece.append(value)
            size += len(value) + 1
    if piece:
        yield ",".join(piece)
