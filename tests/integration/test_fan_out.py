"""Fan-out: 500 ``/v1/stream`` readers on one replicator under writes, half of them stalled
(they never read their socket). Every reading reader gets every record in order (the same
records, byte for byte, as a reference that decodes them all), the replicator's RSS stays
under :data:`RSS_BUDGET` (docs/operations.md, "Reader memory"), a normal pull answers during
the storm, and the reader budget is back to zero once the readers are gone."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from drc.api import wire
from drc.sandbox.sandbox import ServerInfo
from tests.support.fanout import (
    AUTH,
    Reader,
    Replicator,
    Target,
    prepare,
    replicator_process,
    stalled_socket,
    stream_path,
    write,
)

SCHEMA = "fan_db"
READING, STALLED = 250, 250
TRANSACTIONS, ROWS, ROW_BYTES = 60, 20, 6000  # about 7 MB of records, each page at most 512 KiB
RSS_BUDGET = 600 << 20  # what docs/operations.md states for 500 streams at the default limits


@pytest.mark.slow
def test_500_streams_half_stalled_under_writes(dc1: ServerInfo, tmp_path: Path) -> None:
    start = prepare(dc1, SCHEMA)
    with replicator_process(dc1, tmp_path, SCHEMA, start) as replicator:
        idle_rss = replicator.rss_bytes()
        peak, pulls = asyncio.run(_storm(dc1, replicator))
        print(f"replicator RSS idle {idle_rss >> 20} MB, peak {peak >> 20} MB; pulls {pulls}")
        assert peak < RSS_BUDGET, f"RSS {peak >> 20} MB"
        deadline = time.monotonic() + 30
        while replicator.metric("drc_api_reader_bytes") and time.monotonic() < deadline:
            time.sleep(0.2)  # the stalled streams' hang-ups reach the server
        assert replicator.metric("drc_api_reader_bytes") == 0
        assert replicator.metric("drc_api_reader_bytes_peak") > 0


async def _storm(dc1: ServerInfo, replicator: Replicator) -> tuple[int, list[float]]:
    path = stream_path(SCHEMA)
    stalled = [stalled_socket(replicator.url, path) for _ in range(STALLED)]
    target = Target()
    reference = Reader(decode=True)
    readers = [reference] + [Reader() for _ in range(READING - 1)]
    limits = httpx.Limits(max_connections=READING + 10)
    timeout = httpx.Timeout(60, connect=30)
    peak = 0
    pulls: list[float] = []
    try:
        async with httpx.AsyncClient(
            base_url=replicator.url, limits=limits, timeout=timeout
        ) as client:
            tasks = [asyncio.create_task(r.run(client, path, target)) for r in readers]
            await _until(lambda: replicator.metric("drc_api_long_polls") >= READING + STALLED)
            writer = asyncio.create_task(
                asyncio.to_thread(write, dc1, SCHEMA, TRANSACTIONS, ROWS, ROW_BYTES)
            )
            deadline = time.monotonic() + 600
            while not writer.done() or reference.count < TRANSACTIONS:
                assert time.monotonic() < deadline, "the reference reader did not get everything"
                peak = max(peak, replicator.rss_bytes())
                pulls.append(await asyncio.to_thread(_normal_pull, replicator.url))
                if writer.done():
                    writer.result()
                    assert not any(t.done() and t.exception() for t in tasks), _failed(tasks)
                await asyncio.sleep(0.2)
            target.scn = reference.next
            async with asyncio.timeout(300):
                await asyncio.gather(*tasks)
            peak = max(peak, replicator.rss_bytes())
    finally:
        for sock in stalled:
            sock.close()
    assert reference.count == TRANSACTIONS
    assert reference.scns == sorted(set(reference.scns)), "in SCN order, each once"
    assert {(r.count, r.crc) for r in readers} == {(reference.count, reference.crc)}
    return peak, pulls


_PULL = """
import sys, time, httpx
began = time.monotonic()
answer = httpx.get(sys.argv[1], headers={"Authorization": sys.argv[2]}, timeout=30)
print(answer.status_code, round(time.monotonic() - began, 3))
"""


def _normal_pull(url: str) -> float:
    """A pull of a client that is not one of the readers (its own process); how long it took."""
    target = f"{url}{wire.PATH_EVENTS}?after=0:0:0:0&max_events=1&wait_ms=-1"
    argv = [sys.executable, "-c", _PULL, target, AUTH["Authorization"]]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert out.stdout.startswith("200 "), out.stdout + out.stderr
    return float(out.stdout.split()[1])


def _failed(tasks: list[asyncio.Task[None]]) -> str:
    return next(repr(t.exception()) for t in tasks if t.done() and t.exception())


async def _until(check: object) -> None:
    async with asyncio.timeout(120):
        while not await asyncio.to_thread(check):  # type: ignore[arg-type]
            await asyncio.sleep(0.2)
