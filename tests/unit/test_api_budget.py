"""The reader memory budget (drc.api.budget): pure accounting, and waiting for room."""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import httpx
import pytest

from drc.api import streamwire, wire
from drc.api.app import create_app
from drc.api.budget import MIN_STREAM_PAGE_BYTES, Charge, ReaderBudget
from drc.api.deps import ApiDeps
from drc.core.codec import encode_transaction
from drc.eventbuffer import EventBuffer
from tests.support.api import ins, store, txn


def test_charges_and_releases_add_up_and_keep_the_peak() -> None:
    budget = ReaderBudget(limit_bytes=100)
    budget.charge(60)
    budget.charge(30)
    assert budget.has_room
    budget.charge(20)  # a read once admitted is charged whatever it read
    assert not budget.has_room
    budget.release(50)
    assert budget.has_room
    assert budget.snapshot() == {"held": 60, "peak": 110, "limit": 100, "waiting": 0, "shed": 0}
    with pytest.raises(ValueError, match="more than were charged"):
        budget.release(61)


def test_a_charge_gives_back_what_it_holds_once() -> None:
    budget = ReaderBudget(limit_bytes=100)
    with Charge(budget) as charge:
        charge.add(40)
        charge.add(10)
        charge.sent(30)
        assert budget.snapshot()["held"] == 20
        charge.sent(1000)  # never more than it holds
        assert budget.snapshot()["held"] == 0
        charge.add(5)
    assert budget.snapshot()["held"] == 0
    charge.close()  # twice is harmless
    assert budget.snapshot()["held"] == 0


def test_the_stream_page_is_the_budget_share_within_the_clients_max_bytes() -> None:
    budget = ReaderBudget(limit_bytes=512 << 20, streams=1000)
    assert budget.stream_page_bytes(16 << 20) == (512 << 20) // 1000
    assert budget.stream_page_bytes(1000) == 1000
    tiny = ReaderBudget(limit_bytes=1 << 20, streams=1000)
    assert tiny.stream_page_bytes(16 << 20) == MIN_STREAM_PAGE_BYTES


def test_admission_is_immediate_with_room_and_waits_for_a_release_without() -> None:
    budget = ReaderBudget(limit_bytes=100)
    results: list[bool] = []

    async def main() -> None:
        assert await budget.admit(0)
        budget.charge(100)
        assert not await budget.admit(0.05)  # timed out: no room
        async with anyio.create_task_group() as tasks:

            async def reader() -> None:
                results.append(await budget.admit(5))

            tasks.start_soon(reader)
            tasks.start_soon(reader)
            await anyio.sleep(0.05)
            assert budget.snapshot()["waiting"] == 2
            budget.release(1)  # room for both: each reads, and is charged after
        assert budget.snapshot()["waiting"] == 0

    anyio.run(main)
    assert results == [True, True]


def test_shed_readers_are_counted() -> None:
    budget = ReaderBudget(limit_bytes=1)
    budget.shed()
    budget.shed()
    assert budget.snapshot()["shed"] == 2


def test_a_budget_needs_a_byte_and_a_stream() -> None:
    with pytest.raises(ValueError):
        ReaderBudget(limit_bytes=0)
    with pytest.raises(ValueError):
        ReaderBudget(limit_bytes=1, streams=0)


def test_a_pull_without_room_is_shed_with_503_and_retry_after_and_charges_until_sent(
    tmp_path: Path,
) -> None:
    with EventBuffer.open(tmp_path / "buf") as buffer:
        store(buffer, txn(1, ins("orders", 1)), txn(2, ins("orders", 2)))
        budget = ReaderBudget(limit_bytes=1000)
        deps = ApiDeps(buffer=buffer, budget=budget)
        charged: list[int] = []

        async def scenario() -> None:
            transport = httpx.ASGITransport(app=create_app(deps))
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
                params = {"after": "0:0:0:0"}
                budget.charge(1000)  # other readers hold it all
                shed = await client.get(wire.PATH_EVENTS, params=params)
                assert shed.status_code == 503 and shed.headers["Retry-After"] == "1"
                assert shed.json()["error"] == wire.ERROR_READER_MEMORY_FULL
                assert "reader_memory_mb" in shed.json()["message"]
                budget.release(1000)
                async with client.stream("GET", wire.PATH_EVENTS, params=params) as answer:
                    charged.append(budget.snapshot()["held"])
                    await answer.aread()
                assert answer.status_code == 200 and len(answer.json()["transactions"]) == 2

        asyncio.run(scenario())
        assert budget.snapshot()["shed"] == 1 and budget.snapshot()["held"] == 0
        assert budget.snapshot()["peak"] >= 2 * len(encode_transaction(txn(1, ins("orders", 1))))


def test_a_stream_that_cannot_read_its_first_page_is_shed_with_503(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "buf") as buffer:
        store(buffer, txn(1, ins("orders", 1)))
        budget = ReaderBudget(limit_bytes=1000)
        deps = ApiDeps(buffer=buffer, budget=budget)

        async def scenario() -> None:
            transport = httpx.ASGITransport(app=create_app(deps))
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
                budget.charge(1000)
                shed = await client.get(streamwire.PATH_STREAM, params={"after": "0:0:0:0"})
                assert shed.status_code == 503 and shed.headers["Retry-After"] == "1"
                assert shed.json()["error"] == wire.ERROR_READER_MEMORY_FULL
                budget.release(1000)

        asyncio.run(scenario())
        assert budget.snapshot() == {
            "held": 0,
            "peak": 1000,
            "limit": 1000,
            "waiting": 0,
            "shed": 1,
        }
        assert deps.long_polls.held == 0  # its slot given back
