"""Long polls: limited per token and in all (429/503), waiting on the event loop without a
thread each, so pulls that do not wait are always served. In process, over httpx's ASGI
transport, many requests at once on one event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.errors import ApiError
from drc.api.longpolls import LongPollGate, LongPollLimits
from drc.api.pullquery import ServerLimits
from drc.eventbuffer import EventBuffer
from tests.support.api import ins, scn, store, txn

T1, T2 = "token-one", "token-two"


def test_the_gate_refuses_per_token_with_429_and_in_all_with_503() -> None:
    gate = LongPollGate(LongPollLimits(total=3, per_token=2, retry_after_s=2))
    with gate.slot("a"), gate.slot("a"):
        with pytest.raises(ApiError) as per_token:
            gate._take("a")
        assert per_token.value.status == 429 and per_token.value.headers == {"Retry-After": "2"}
        assert per_token.value.code == wire.ERROR_TOO_MANY_LONG_POLLS
        with gate.slot("b"):
            with pytest.raises(ApiError) as total:
                gate._take("c")
            assert total.value.status == 503 and total.value.code == wire.ERROR_LONG_POLLS_FULL
            assert "max_long_polls" in total.value.message
        assert gate.held == 2
    assert gate.held == 0
    with gate.slot("a"):
        assert gate.held == 1


@pytest.mark.parametrize("limits", [(0, 1, 1), (1, 0, 1), (1, 1, 0)])
def test_limits_below_one_are_refused(limits: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        LongPollLimits(*limits)


@pytest.fixture
def buffer(tmp_path: Path) -> Iterator[EventBuffer]:
    with EventBuffer.open(tmp_path / "buf") as buf:
        store(buf, txn(1, ins("orders", 1)))
        yield buf


def make_deps(buffer: EventBuffer, total: int, per_token: int) -> ApiDeps:
    return ApiDeps(
        buffer=buffer,
        limits=ServerLimits(max_wait_ms=20_000),
        tokens=(T1, T2),
        long_polls=LongPollGate(LongPollLimits(total=total, per_token=per_token)),
    )


def pull(client: httpx.AsyncClient, token: str, **params: Any) -> Any:
    params = {"after": str(scn(1)), "wait_ms": "15000", **params}
    return client.get(wire.PATH_EVENTS, params=params, headers={"Authorization": f"Bearer {token}"})


async def until(check: Any) -> None:
    async with asyncio.timeout(10):
        while not check():
            await asyncio.sleep(0.01)


def refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["Retry-After"] == "1"
    body = response.json()
    assert body["error"] == code and body["retry_after_s"] == 1 and "wait_ms=-1" in body["message"]


def test_over_the_limits_long_polls_get_429_or_503_and_others_are_still_served(
    buffer: EventBuffer,
) -> None:
    deps = make_deps(buffer, total=4, per_token=3)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=create_app(deps))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            held = [asyncio.create_task(pull(client, T1)) for _ in range(3)]
            await until(lambda: deps.long_polls.held == 3)
            refused(await pull(client, T1), 429, wire.ERROR_TOO_MANY_LONG_POLLS)
            held.append(asyncio.create_task(pull(client, T2)))
            await until(lambda: deps.long_polls.held == 4)
            refused(await pull(client, T2), 503, wire.ERROR_LONG_POLLS_FULL)
            now = await pull(client, T1, wait_ms="-1")
            assert now.status_code == 200 and now.json()["transactions"] == []
            ready = await pull(client, T2, after="0:0:0:0")  # has data: needs no slot
            assert ready.status_code == 200 and len(ready.json()["transactions"]) == 1
            store(buffer, txn(2, ins("orders", 2)))
            answers = await asyncio.gather(*held)
            assert [len(a.json()["transactions"]) for a in answers] == [1, 1, 1, 1]
            assert deps.long_polls.held == 0 and deps.metrics.waiters == 0

    asyncio.run(scenario())


def test_hundreds_of_waiting_long_polls_hold_no_threads(buffer: EventBuffer) -> None:
    deps = make_deps(buffer, total=1000, per_token=1000)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=create_app(deps))
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            held = [asyncio.create_task(pull(client, T1)) for _ in range(300)]
            await until(lambda: deps.metrics.waiters == 300)
            assert deps.long_poll_limiter.borrowed_tokens == 0, "waiting holds no thread"
            for _ in range(5):
                async with asyncio.timeout(10):
                    now = await pull(client, T2, wait_ms="-1")
                assert now.status_code == 200
            store(buffer, txn(2, ins("orders", 2)))
            answers = await asyncio.gather(*held)
            assert {len(a.json()["transactions"]) for a in answers} == {1}

    asyncio.run(scenario())
