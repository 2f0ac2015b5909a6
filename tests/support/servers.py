"""Statements, queries and binlog positions on the sandbox servers, as the sandbox's DRC user."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pymysql

from drc.sandbox.sandbox import ServerInfo


def connect(server: ServerInfo, **kwargs: object) -> pymysql.connections.Connection:
    """A connection as the sandbox's DRC user over TCP, the way DRC itself connects."""
    options: dict[str, object] = {"autocommit": True, **kwargs}
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, **options
    )


LOCK_CONFLICTS = (1213, 1205)  # deadlock, lock wait timeout: the transaction was rolled back


def retrying(transaction: Callable[[], object], attempts: int = 50) -> None:
    """Run one application transaction (autocommit statement or BEGIN..COMMIT block) again when
    the server rolls it back for a deadlock or a lock wait timeout, as an application does:
    DRC's apply transactions lock the rows they write and probe too."""
    for attempt in range(attempts):
        try:
            transaction()
            return
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in LOCK_CONFLICTS or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))


def fresh_database(server: ServerInfo, db: str, *tables: str, log_bin: bool = True) -> None:
    """Drop and create database ``db`` (a trusted test name) with ``tables`` (CREATE TABLE
    statements, run in ``db``: they may leave the database out) in it; with ``log_bin`` False,
    out of the binlog."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            if not log_bin:
                cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"USE `{db}`")
            for statement in tables:
                cur.execute(statement)
    finally:
        conn.close()


def sql(server: ServerInfo, *statements: str) -> list[tuple[object, ...]]:
    """Run ``statements`` in one connection; the rows of the last one."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()


def execute(server: ServerInfo, *statements: str, log_bin: bool = True, **kwargs: Any) -> None:
    """Run ``statements`` in one connection (``kwargs``: connect options, e.g. database); with
    ``log_bin`` False they are kept out of the binlog."""
    conn = connect(server, **kwargs)
    with conn.cursor() as cur:
        if not log_bin:
            cur.execute("SET SESSION sql_log_bin = 0")
        for statement in statements:
            cur.execute(statement)
    conn.close()


def forget_drc_state(*servers: ServerInfo) -> None:
    """Drop DRC's own database (checkpoints, journals, logs) on ``servers``, out of the binlog:
    a test deploying DRC afresh on the shared sandbox (new buffers, the same channel names)
    must not resume from a checkpoint its fresh remote buffer never served, since the remote
    rightly reads that gap from its binlog (docs/operations.md, Binlog purged) and would replay
    the earlier tests' set-up writes."""
    for server in servers:
        execute(server, "DROP DATABASE IF EXISTS drc", log_bin=False)


def drop_everywhere(schema: str, *servers: ServerInfo) -> None:
    """Drop database ``schema`` on each of ``servers`` (through the binlog)."""
    for server in servers:
        execute(server, f"DROP DATABASE IF EXISTS `{schema}`")


def query(
    server: ServerInfo, sql: str, params: Any = None, *, cursor_description: bool = False
) -> list[Any]:
    """Rows of a query (or, with ``cursor_description``, the result's column descriptions)."""
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(sql, params)
        rows = list(cur.description or ()) if cursor_description else list(cur.fetchall())
    conn.close()
    return rows


def master_position(server: ServerInfo) -> tuple[str, int]:
    """The server's binlog file and position now (SHOW MASTER STATUS)."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            log_file, log_pos = cur.fetchone()[:2]
    finally:
        conn.close()
    return log_file, int(log_pos)


def position(server: ServerInfo) -> tuple[str, int]:
    """master_position, under the name the apply tests use."""
    return master_position(server)


def count_rows(server: ServerInfo, table: str) -> int:
    """The rows of ``table`` (database.table), or -1 while it does not exist."""
    conn = connect(server)
    with conn.cursor() as cur:
        try:
            cur.execute(f"SELECT COUNT(*) FROM {table}")
        except Exception:
            return -1
        count = int(cur.fetchone()[0])
    conn.close()
    return count
