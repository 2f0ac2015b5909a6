"""The outermost middleware counts a response as it starts: a stream's lasts for hours."""

from __future__ import annotations

import asyncio
from typing import Any

from drc.api.errors import Guard
from drc.api.metrics import ApiMetrics


def test_a_long_response_is_counted_once_as_it_starts_and_a_failure_before_as_500() -> None:
    metrics = ApiMetrics()
    seen_while_open: dict[Any, int] = {}

    async def streaming(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen_while_open.update(metrics.snapshot()[0])
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def failing(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    async def sink(message: Any) -> None:
        pass

    async def receive() -> Any:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": "/v1/stream"}
    asyncio.run(Guard(streaming, metrics)(scope, receive, sink))
    asyncio.run(Guard(failing, metrics)(scope, receive, sink))
    assert seen_while_open == {("GET", "unmatched", 200): 1}
    assert metrics.snapshot()[0] == {("GET", "unmatched", 200): 1, ("GET", "unmatched", 500): 1}
