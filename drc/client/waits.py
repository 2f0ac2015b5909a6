"""Read your writes across datacenters: wait until another datacenter applied a GTID.

    gtid = cursor.execute("SELECT @@last_gtid") ...      # on dc1, right after the write
    wait_for_gtid("http://dc2-a:8640", gtid, timeout_ms=5000, token=token)
    ...                                                  # now read on dc2

One ``GET /v1/wait`` (drc.api.waits) to the API of the ``drc run`` process that runs the
datacenter's apply channels: it answers as soon as a channel committed the transaction (or
moved past it), so the call costs about the channel's lag.
"""

from __future__ import annotations

from typing import Any

import httpx

from drc.api import wire
from drc.client import http
from drc.client.errors import ApiRequestError, ApiUnavailableError, ProtocolError, WaitTimeoutError

PATH = "/v1/wait"
DEFAULT_TIMEOUT_MS = 10_000
READ_MARGIN_S = 10.0  # beyond timeout_ms, for the answer to arrive


def wait_for_gtid(
    url: str,
    gtid: str,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    *,
    token: str | None = None,
    channel: str | None = None,
    verify: Any = True,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, Any]:
    """Wait until the datacenter whose API is ``url`` applied ``gtid`` (one GTID, or a
    comma-separated position: all of it); returns the answer (which channel, ``applied_at``,
    ``waited_ms``). Raises WaitTimeoutError after ``timeout_ms`` (at most the server's
    ``[api] max_wait_ms``), ApiRequestError for a malformed GTID or a domain no channel there
    receives, ApiUnavailableError when the API does not answer."""
    target = url.rstrip("/") + PATH
    params = {"gtid": gtid, "timeout_ms": str(timeout_ms)}
    if channel is not None:
        params["channel"] = channel
    timeout = httpx.Timeout(http.CONNECT_TIMEOUT_S, read=timeout_ms / 1000 + READ_MARGIN_S)
    client = http.make_client(token, transport, verify)
    try:
        response = http.request(client, "GET", target, token, timeout, params=params)
    except http.Transient as exc:
        why = f"{target}: {exc}; is drc run up there?"
        raise ApiUnavailableError(why, {target: str(exc)}) from exc
    except ApiRequestError as exc:
        if exc.status == 408 and exc.code == wire.ERROR_WAIT_TIMEOUT:
            raise WaitTimeoutError(
                f"{gtid} is not applied at {url.rstrip('/')} after {timeout_ms} ms: "
                f"{exc.server_message}",
                target,
                exc.status,
                exc.code,
                exc.server_message,
                exc.server_message,
            ) from exc
        raise
    finally:
        http.close_client(client)
    try:
        return dict(response.json())
    except ValueError as exc:
        raise ProtocolError(f"{target}: the answer is not JSON") from exc
