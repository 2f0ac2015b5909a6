"""Channel control over the API (``/v1/channels``, drc.api.control), for ``drc channel``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from drc.client import http
from drc.client.errors import ApiUnavailableError, ProtocolError

CONTROL_TIMEOUT_S = 75.0  # the server waits up to 60 s for the channel to take an action


class ChannelApi:
    """The channels of the ``drc run`` process serving ``url``."""

    def __init__(
        self, url: str, token: str | None = None, *, verify: Any = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:  # fmt: skip
        self.base = url.rstrip("/")
        self._token = token
        self._client = http.make_client(token, transport, verify)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ChannelApi:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def channels(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/channels"))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/v1/channels/{quote(name, safe='')}"))

    def history(self, name: str, limit: int = 100) -> list[dict[str, Any]]:
        path = f"/v1/channels/{quote(name, safe='')}/history"
        return list(self._call("GET", path, params={"limit": str(limit)}))

    def act(self, name: str, action: str, **body: Any) -> dict[str, Any]:
        path = f"/v1/channels/{quote(name, safe='')}/{quote(action, safe='')}"
        payload = {k: v for k, v in body.items() if v is not None}
        return dict(self._call("POST", path, body=payload))

    def _call(
        self, method: str, path: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> Any:
        target = self.base + path
        try:
            response = http.request(
                self._client, method, target, self._token, httpx.Timeout(CONTROL_TIMEOUT_S),
                params=params, json_body=body,
            )  # fmt: skip
        except http.Transient as exc:
            raise ApiUnavailableError(
                f"{target}: {exc}; is drc run up there?", {target: str(exc)}
            ) from exc
        try:
            return response.json()
        except ValueError as exc:
            raise ProtocolError(f"{target}: the answer is not JSON") from exc
