"""Consumer groups over the API (``/v1/groups``, drc.api.groups), for ``drc groups``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from drc.api import wire
from drc.client.jsonapi import JsonApi

TIMEOUT_S = 30.0


class GroupsApi(JsonApi):
    """The consumer groups served at ``url`` (any member of the replicator group)."""

    TIMEOUT_S = TIMEOUT_S
    PREFIX = wire.PATH_GROUPS

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
