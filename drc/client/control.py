"""Channel control over the API (``/v1/channels``, drc.api.control), for ``drc channel``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from drc.client.jsonapi import JsonApi

CONTROL_TIMEOUT_S = 75.0  # the server waits up to 60 s for the channel to take an action


class ChannelApi(JsonApi):
    """The channels of the ``drc run`` process serving ``url``."""

    TIMEOUT_S = CONTROL_TIMEOUT_S

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
