"""Helpers for talking to the sandbox servers in tests."""

from __future__ import annotations

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
