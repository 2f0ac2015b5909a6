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
