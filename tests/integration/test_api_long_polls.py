"""500 long polls held open against a real replicator: the limits refuse some (429 per token,
503 in all), and meanwhile a pull that does not wait is answered and a row committed on the
source reaches a subscriber (the SDK falls back to pulls that do not wait). Issue 12 item 4.

Loopback only; the flood is asyncio + httpx in this process, the server the real uvicorn one
built from config by the composition root (drc.runtime).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.api import wire
from drc.client import Subscriber
from drc.config import DrcConfig
from drc.core.scn import SCN
from drc.runtime import ReplicatorService, build_replicator
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import serving, source_section
from tests.support.servers import connect, master_position

FLOOD = ("flood-token-1", "flood-token-2")
CHANNEL = "channel-token"
POLLS = 500
MAX_LONG_POLLS = 300
PER_TOKEN = 200
DB = "longpoll_db"


def _config(server: ServerInfo, tmp: Path, start: tuple[str, int]) -> DrcConfig:
    return DrcConfig.model_validate(
        {
            "datacenter": {"name": "dc1"},
            "source": source_section(server, 91011),
            "replicator": {
                "buffer_dir": str(tmp / "buf"), "start_from": f"{start[0]}:{start[1]}",
                "include": [f"{DB}.*"], "commit_max_ms": 20,
            },
            "api": {
                "host": "127.0.0.1", "port": 0, "tokens": [*FLOOD, CHANNEL],
                "max_wait_ms": 20_000, "max_long_polls": MAX_LONG_POLLS,
                "max_long_polls_per_token": PER_TOKEN,
            },
        }
    )  # fmt: skip


@pytest.fixture
def served(dc1: ServerInfo, tmp_path: Path) -> Iterator[tuple[ReplicatorService, str]]:
    conn = connect(dc1)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.t (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"CREATE TABLE {DB}.quiet (id INT PRIMARY KEY)")
        start = master_position(dc1)
    conn.close()
    service = build_replicator(_config(dc1, tmp_path, start))
    url = service.start_api().url
    with serving(service):
        yield service, url


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def until(check: Callable[[], Any], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


async def gauge(client: httpx.AsyncClient, name: str) -> float:
    text = (await client.get(wire.PATH_METRICS, headers=auth(CHANNEL))).text
    line = next(line for line in text.splitlines() if line.startswith(name + " "))
    return float(line.split()[1])


def row_reaches_subscriber(url: str, server: ServerInfo, after: str) -> float:
    """Commit a row on the source; seconds until a Subscriber (as a channel pulls) has it."""
    with Subscriber(
        [url], SCN.parse(after), f"{DB}.t", token=CHANNEL, wait_ms=200, backoff_initial=0.1
    ) as sub:
        conn = connect(server)
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO {DB}.t VALUES (1, 'during flood')")
        conn.close()
        committed = time.monotonic()
        while time.monotonic() - committed < 20:
            batch = sub.get(timeout=20)
            sub.ack(batch)
            rows = [c.after for txn in batch.transactions for c in txn.changes]
            if {"id": 1, "v": "during flood"} in rows:
                return time.monotonic() - committed
    raise AssertionError("the row committed during the flood never reached the subscriber")


async def flood_and_replicate(url: str, server: ServerInfo) -> None:
    limits = httpx.Limits(max_connections=POLLS + 50, max_keepalive_connections=20)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        status = (await client.get(wire.PATH_STATUS, headers=auth(CHANNEL))).json()
        newest = status["buffer"]["last_scn"] or str(SCN.ZERO)
        polls: list[asyncio.Task[httpx.Response]] = []
        try:
            refused = await hold_polls(client, newest, polls)
            now = await client.get(
                wire.PATH_EVENTS, params={"after": newest, "wait_ms": "-1"},
                headers=auth(CHANNEL), timeout=10,
            )  # fmt: skip
            assert now.status_code == 200, now.text
            lag = await asyncio.to_thread(row_reaches_subscriber, url, server, newest)
            print(f"row reached the subscriber {lag:.2f}s after commit, {MAX_LONG_POLLS} held")
            assert sum(task.done() for task in polls) == refused, "the held polls still wait"
        finally:
            for task in polls:  # the flood's clients hang up: the server frees their slots
                task.cancel()
            await asyncio.gather(*polls, return_exceptions=True)

        async def freed() -> bool:
            return await gauge(client, "drc_api_long_polls") == 0

        await until(freed, "the slots of the polls whose clients went away are free")


async def hold_polls(
    client: httpx.AsyncClient, newest: str, polls: list[asyncio.Task[httpx.Response]]
) -> int:
    """Open POLLS long polls on a quiet table: half with one token (its share fills: 429),
    then half with another (the server fills: 503). Returns how many were refused."""
    quiet = {"after": newest, "wait_ms": "15000", "tables": f"{DB}.quiet"}
    half = POLLS // 2
    for token, held in ((FLOOD[0], PER_TOKEN), (FLOOD[1], MAX_LONG_POLLS)):
        polls.extend(
            asyncio.create_task(client.get(wire.PATH_EVENTS, params=quiet, headers=auth(token)))
            for _ in range(half)
        )

        async def placed(held: int = held) -> bool:
            done = sum(task.done() for task in polls)
            waiting = await gauge(client, "drc_api_long_poll_waiters")
            return done == len(polls) - held and waiting == held

        await until(placed, f"{held} polls wait and the rest are refused")
    answers = [task.result() for task in polls if task.done()]
    statuses = Counter(response.status_code for response in answers)
    assert statuses == {429: half - PER_TOKEN, 503: POLLS - MAX_LONG_POLLS - (half - PER_TOKEN)}
    for response in answers:
        body = response.json()
        assert response.headers["Retry-After"] == "1" and body["retry_after_s"] == 1
        assert body["error"] in (wire.ERROR_TOO_MANY_LONG_POLLS, wire.ERROR_LONG_POLLS_FULL)
    return len(answers)


def test_500_long_polls_neither_starve_a_pull_nor_a_subscriber(
    served: tuple[ReplicatorService, str], dc1: ServerInfo
) -> None:
    _service, url = served
    asyncio.run(asyncio.wait_for(flood_and_replicate(url, dc1), timeout=90))
