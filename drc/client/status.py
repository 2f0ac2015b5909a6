"""Read a replicator's status document (role, datacenter, source, buffer range, lag)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from drc.api import wire
from drc.client import http
from drc.client.errors import ApiRequestError, ApiUnavailableError, ProtocolError
from drc.core.scn import SCN

STATUS_TIMEOUT_S = 10.0


def fetch_status(
    url: str,
    token: str | None = None,
    *,
    timeout: float = STATUS_TIMEOUT_S,
    transport: httpx.BaseTransport | None = None,
    verify: Any = True,
    ca: str | os.PathLike[str] | None = None,
    cert: str | os.PathLike[str] | None = None,
    key: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """GET ``{url}/v1/status`` once (no retries: it is for people and probes, who retry).
    ``verify``/``ca``/``cert``/``key``: HTTPS as for :class:`drc.client.Subscriber`.

    Raises ApiUnavailableError (unreachable, 5xx), ApiAuthError (401/403), ApiRequestError
    (other 4xx), ApiTlsError (certificate refused) or ProtocolError (not a JSON object).
    """
    base = url.rstrip("/")
    verify = http.tls_verify(verify, ca, cert, key)
    with http.make_client(token, transport, verify) as client:
        try:
            response = http.send(
                client, base + wire.PATH_STATUS, {}, wire.MEDIA_JSON, httpx.Timeout(timeout), token
            )
        except http.Transient as exc:
            raise ApiUnavailableError(
                f"{base} did not answer ({exc}); check the URL, that the replicator runs with its "
                "API enabled, and the network",
                {base: str(exc)},
            ) from exc
        try:
            body = response.json()
        except ValueError as exc:
            raise ProtocolError(f"{base}{wire.PATH_STATUS} did not return JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ProtocolError(f"{base}{wire.PATH_STATUS} returned a {type(body).__name__}, not a map")
    return body


def fetch_position(
    url: str,
    at_ms: int,
    token: str | None = None,
    *,
    timeout: float = STATUS_TIMEOUT_S,
    transport: httpx.BaseTransport | None = None,
    verify: Any = True,
) -> SCN:
    """GET ``{url}/v1/position?at_ms=T``: the SCN to read after for every change committed at
    or after T. A 410 (retention deleted what came before T) raises ApiRequestError(410)."""
    base = url.rstrip("/")
    with http.make_client(token, transport, verify) as client:
        try:
            response = http.send(
                client, base + wire.PATH_POSITION, {"at_ms": str(at_ms)}, wire.MEDIA_JSON,
                httpx.Timeout(timeout), token,
            )  # fmt: skip
        except http.Transient as exc:
            raise ApiUnavailableError(f"{base} did not answer ({exc})", {base: str(exc)}) from exc
        except http.TooOld as exc:
            raise ApiRequestError(
                f"{base}: {exc}", base, 410, wire.ERROR_SCN_TOO_OLD, str(exc)
            ) from exc
        try:
            return SCN.parse(str(response.json()["after"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"{base}{wire.PATH_POSITION} answered without an SCN") from exc
