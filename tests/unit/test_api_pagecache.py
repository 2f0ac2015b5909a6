"""Pages shared by the streams that ask for the same one (drc.api.pagecache)."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from drc.api.pagecache import PageCache


@dataclass(frozen=True)
class Page:
    name: str
    size: int = 10


def test_streams_asking_for_one_page_at_once_share_one_read() -> None:
    cache: PageCache[Page] = PageCache()
    reads: list[str] = []
    got: list[Page] = []

    async def read() -> Page:
        reads.append("k")
        await anyio.sleep(0.05)  # in a worker thread, say: the others ask meanwhile
        return Page("k")

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(50):
                tasks.start_soon(lambda: _append(got, cache.get("k", read)))
        got.append(await cache.get("k", read))  # later: kept

    anyio.run(main)
    assert reads == ["k"] and len(got) == 51 and len({id(p) for p in got}) == 1
    assert cache.reads == 1 and cache.hits == 50


async def _append(into: list[Page], page: object) -> None:
    into.append(await page)  # type: ignore[misc]


def test_a_failed_read_is_not_shared_each_waiter_reads_for_itself() -> None:
    cache: PageCache[Page] = PageCache()
    outcomes: list[str] = []

    async def failing() -> Page:
        await anyio.sleep(0.05)
        raise OSError("gone")

    async def fine() -> Page:
        return Page("own")

    async def first() -> None:
        with pytest.raises(OSError):
            await cache.get("k", failing)
        outcomes.append("failed")

    async def second() -> None:
        await anyio.sleep(0.01)
        outcomes.append((await cache.get("k", fine)).name)

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            tasks.start_soon(second)

    anyio.run(main)
    assert sorted(outcomes) == ["failed", "own"]


def test_the_least_recently_used_pages_go_first_within_count_and_bytes() -> None:
    cache: PageCache[Page] = PageCache(max_pages=2, max_bytes=25)

    async def main() -> None:
        for key in ("a", "b"):
            await cache.get(key, _reader(key))
        await cache.get("a", _reader("never"))  # a is used: b goes first
        await cache.get("c", _reader("c"))
        assert cache.size == 20
        assert (await cache.get("b", _reader("b again"))).name == "b again"
        await cache.get("big", _reader("big", size=26))  # never kept
        assert cache.size <= 25

    anyio.run(main)


def _reader(name: str, size: int = 10):  # type: ignore[no-untyped-def]
    async def read() -> Page:
        return Page(name, size)

    return read
