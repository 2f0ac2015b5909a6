"""Each table's primary key as of a transaction, read from the replicator that served it.

A row is routed by its key under the schema of its own SCN. The key of a table changes only by
DDL, which the stream carries: the cache forgets everything when a transaction with DDL passes,
and asks the serving replicator (``/v1/schema?scn=``) the next time it needs a table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from drc.core.events import Transaction
from drc.core.scn import SCN

# (replicator URL, schema, table, SCN) -> the primary key columns at that SCN.
FetchKey = Callable[[str, str, str, SCN], Sequence[str]]


class KeyCache:
    """The key columns of each table seen since the last DDL; one instance per sink."""

    def __init__(self, fetch: FetchKey) -> None:
        self._fetch = fetch
        self._url = ""
        self._keys: dict[tuple[str, str], tuple[str, ...]] = {}
        self.fetches = 0

    def serve_from(self, url: str) -> None:
        """Ask ``url`` (the replicator that served the batch in hand) about unknown tables."""
        self._url = url

    def seen(self, txn: Transaction) -> None:
        """Call for every transaction, before its rows: DDL may change any table's key."""
        if txn.ddl:
            self._keys.clear()

    def __call__(self, schema: str, table: str, txn: Transaction) -> tuple[str, ...]:
        known = self._keys.get((schema, table))
        if known is None:
            known = tuple(self._fetch(self._url, schema, table, txn.scn))
            self.fetches += 1
            self._keys[(schema, table)] = known
        return known
