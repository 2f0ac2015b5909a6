"""Pages recently read for streams, shared by the streams that ask for the same one.

Hundreds of streams at the same position wake on the same commit and would each read, check
and render the same records from the buffer: that reading, on the event loop, was most of
the API's CPU with 250 readers (py-spy, docs/benchmarks.md). A page is the same for every
stream with the same position, selection and limits that saw the same newest SCN before
reading (the buffer only grows after it), so the first of them reads it and the others await
that read and take its result.

Only pages of selections that compare fully (no ``rows`` predicate) are shared. The cache
keeps at most :data:`MAX_PAGES` pages and :data:`MAX_BYTES` of records, least recently used
out first; a read that fails or is cancelled is not shared (each waiter reads for itself).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, Protocol, TypeVar

import anyio

MAX_PAGES = 256
MAX_BYTES = 32 << 20


class Sized(Protocol):
    @property
    def size(self) -> int: ...


P = TypeVar("P", bound=Sized)


class _Pending(Generic[P]):
    __slots__ = ("done", "page")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.page: P | None = None


class PageCache(Generic[P]):
    """Pages by key; :meth:`get` reads a missing one once for all who ask meanwhile."""

    def __init__(self, max_pages: int = MAX_PAGES, max_bytes: int = MAX_BYTES) -> None:
        self._max_pages = max_pages
        self._max_bytes = max_bytes
        self._pages: OrderedDict[Hashable, P] = OrderedDict()
        self._pending: dict[Hashable, _Pending[P]] = {}
        self._bytes = 0
        self.hits = 0
        self.reads = 0

    def ready(self, key: Hashable) -> P | None:
        """The page, if it is kept."""
        page = self._pages.get(key)
        if page is not None:
            self._pages.move_to_end(key)
            self.hits += 1
        return page

    def reading(self, key: Hashable) -> bool:
        """Whether a stream is reading the page now (:meth:`get` waits for that read)."""
        return key in self._pending

    def keep(self, key: Hashable, page: P) -> None:
        """A page read outside :meth:`get` (on the event loop, at once)."""
        self.reads += 1
        if key not in self._pages:
            self._keep(key, page)

    async def get(self, key: Hashable, read: Callable[[], Awaitable[P]]) -> P:
        page = self.ready(key)
        if page is not None:
            return page
        pending = self._pending.get(key)
        if pending is not None:
            await pending.done.wait()
            if pending.page is not None:
                self.hits += 1
                return pending.page
            return await read()  # the shared read failed: this reader's own says why
        pending = self._pending[key] = _Pending()
        try:
            self.reads += 1
            page = await read()
            pending.page = page
            self._keep(key, page)
            return page
        finally:
            del self._pending[key]
            pending.done.set()

    @property
    def size(self) -> int:
        """Record bytes held."""
        return self._bytes

    def _keep(self, key: Hashable, page: P) -> None:
        if page.size > self._max_bytes:
            return
        self._pages[key] = page
        self._bytes += page.size
        while len(self._pages) > self._max_pages or self._bytes > self._max_bytes:
            _, old = self._pages.popitem(last=False)
            self._bytes -= old.size
