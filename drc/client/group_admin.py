"""Consumer groups over the API (``/v1/groups``, drc.api.groups), for ``drc groups``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from drc.api import wire
from drc.client import http
from drc.client.errors import ApiUnavailableError, ProtocolError

TIMEOUT_S = 30.0


class GroupsApi:
    """The consumer groups served at ``url`` (any member of the replicator group)."""

    def __init__(
        self, url: str, token: str | None = None, *, verify: Any = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:  # fmt: skip
        self.base = url.rstrip("/")
        self._token = token
        self._client = http.make_client(token, transport, verify)

    def close(self) -> None:
        http.close_client(self._client)

    def __enter__(self) -> GroupsApi:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def groups(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "")["groups"])

    def get(self, name: str) -> dict[str, Any]:
        return dict(self._call("GET", "/" + quote(name, safe="")))

    def create(self, **spec: Any) -> dict[str, Any]:
        return dict(self._call("POST", "", body={k: v for k, v in spec.items() if v is not None}))

    def reset(self, name: str, scn: str) -> dict[str, Any]:
        return dict(self._call("POST", f"/{quote(name, safe='')}/reset", body={"scn": scn}))

    def delete(self, name: str) -> None:
        self._call("DELETE", "/" + quote(name, safe=""))

    def _call(self, method: str, path: str, *, body: Any = None) -> Any:
        target = self.base + wire.PATH_GROUPS + path
        try:
            response = http.request(
                self._client, method, target, self._token, httpx.Timeout(TIMEOUT_S),
                json_body=body,
            )  # fmt: skip
        except http.Transient as exc:
            raise ApiUnavailableError(
                f"{target}: {exc}; is drc run up there?", {target: str(exc)}
            ) from exc
        try:
            return response.json()
        except ValueError as exc:
            raise ProtocolError(f"{target}: the answer is not JSON") from exc
