"""Helpers for talking to the sandbox servers in tests."""

from __future__ import annotations

from typing import Any

import pymysql

from drc.sandbox.sandbox import ServerInfo


def connect(server: ServerInfo, **kwargs: object) -> pymysql.connections.Connection:
    """A connection as the sandbox's DRC user over TCP, the way DRC itself connects."""
    options: dict[str, object] = {"autocommit": True, **kwargs}
    return pymysql.connect(
        host=server.host, port=server.port, user=server.user, password=server.password, **options
    )


def fresh_database(server: ServerInfo, db: str, *tables: str) -> None:
    """Drop and create database ``db`` (a trusted test name) with ``tables`` (CREATE TABLE
    statements) in it."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
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


def execute(server: ServerInfo, *statements: str, **kwargs: Any) -> None:
    conn = connect(server, **kwargs)
    with conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
    conn.close()


def drop_everywhere(schema: str, *servers: ServerInfo) -> None:
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
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            log_file, log_pos = cur.fetchone()[:2]
    finally:
        conn.close()
    return log_file, int(log_pos)


def position(server: ServerInfo) -> tuple[str, int]:
    return master_position(server)
