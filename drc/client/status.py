"""Read a replicator's status document (role, datacenter, source, buffer range, lag)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from drc.api import wire
from drc.client import http
from drc.client.errors import ApiUnavailableError, ProtocolError

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
