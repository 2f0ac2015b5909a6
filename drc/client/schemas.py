"""Read a table's schema as of an SCN from a replicator (``GET /v1/schema/{db}/{table}``): what a
consumer needs to know a row's key, e.g. the message-queue sink routing by key."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import httpx

from drc.api import wire
from drc.client import http
from drc.client.errors import ApiUnavailableError, ProtocolError
from drc.core.scn import SCN

SCHEMA_TIMEOUT = httpx.Timeout(10.0)


class SchemaReader:
    """Schemas from any replicator URL, over one kept-alive client; ``close`` when done."""

    def __init__(
        self,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        verify: Any = True,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
    ) -> None:
        self._token = token
        self._client = http.make_client(token, transport, http.tls_verify(verify, ca, cert, key))

    def schema(self, url: str, db: str, table: str, scn: SCN | None = None) -> dict[str, Any]:
        """The schema document of ``db.table`` in force at ``scn`` (None: the newest).

        Raises ApiUnavailableError (unreachable, 5xx: retry), ApiRequestError (404: the table
        is unknown or dropped at that SCN), ApiAuthError or ProtocolError."""
        base = url.rstrip("/")
        target = f"{base}{wire.PATH_SCHEMA}/{quote(db, safe='')}/{quote(table, safe='')}"
        params = {} if scn is None else {"scn": str(scn)}
        try:
            response = http.send(
                self._client, target, params, wire.MEDIA_JSON, SCHEMA_TIMEOUT, self._token
            )
        except http.Transient as exc:
            raise ApiUnavailableError(f"{base} did not answer ({exc})", {base: str(exc)}) from exc
        try:
            body = response.json()
            if not isinstance(body, dict) or not isinstance(body["primary_key"], list):
                raise ValueError("no primary_key list")
        except (ValueError, KeyError) as exc:
            raise ProtocolError(f"{target} answered with no schema document: {exc}") from exc
        return body

    def primary_key(self, url: str, db: str, table: str, scn: SCN | None = None) -> tuple[str, ...]:
        """The primary key columns of ``db.table`` at ``scn``; () for a table without one."""
        return tuple(str(name) for name in self.schema(url, db, table, scn)["primary_key"])

    def close(self) -> None:
        http.close_client(self._client)
