"""The client of a JSON admin API of a DRC process (channel control, consumer groups): one
httpx client, the bearer token kept out of errors, a transient failure said as
ApiUnavailableError, an answer that is not JSON as ProtocolError."""

from __future__ import annotations

from typing import Any, Self

import httpx

from drc.client import http
from drc.client.errors import ApiUnavailableError, ProtocolError


class JsonApi:
    """``TIMEOUT_S`` and ``PREFIX`` (the path every call is under) are the subclass's."""

    TIMEOUT_S = 30.0
    PREFIX = ""

    def __init__(
        self, url: str, token: str | None = None, *, verify: Any = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:  # fmt: skip
        self.base = url.rstrip("/")
        self._token = token
        self._client = http.make_client(token, transport, verify)

    def close(self) -> None:
        http.close_client(self._client)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> Any:
        target = self.base + self.PREFIX + path
        try:
            response = http.request(
                self._client, method, target, self._token, httpx.Timeout(self.TIMEOUT_S),
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
