"""A cache of parsed TABLE_MAP events, keyed by the event's exact bytes.

Every transaction re-sends a TABLE_MAP for each table it touches, and python-mysql-replication
parses each one from scratch (optional metadata, charsets, names): on small transactions that
parse dominates capture (shared/ENVIRONMENT.md measured 2.5-2.7x from caching it). The library's
own ``freeze_schema`` caches by table id, which goes stale after an ALTER; here the key is the
whole event body (table id, names, types, metadata), so a hit can only ever return the parse of
identical bytes, and an ALTER simply misses.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

_PARSE = TableMapEvent.__init__
_PER_TABLE = (
    "table_id", "flags", "schema_length", "schema", "table_length", "table", "column_count",
    "columns", "null_bitmask", "table_obj", "optional_metadata",
)  # fmt: skip
MAX_ENTRIES = 4096
_cache: OrderedDict[bytes, dict[str, Any]] = OrderedDict()


def _cached_init(
    self: Any, from_packet: Any, event_size: int, table_map: dict[int, Any], ctl: Any, **kwargs: Any
) -> None:
    packet = from_packet.packet
    key = bytes(packet._data[packet._position : packet._position + event_size])
    hit = _cache.get(key)
    if hit is None:
        _PARSE(self, from_packet, event_size, table_map, ctl, **kwargs)
        if self._processed:
            _cache[key] = {name: getattr(self, name) for name in _PER_TABLE}
            if len(_cache) > MAX_ENTRIES:
                _cache.popitem(last=False)
        return
    _cache.move_to_end(key)
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl, **kwargs)
    self.__dict__.update(hit)
    table_map[self.table_id] = self.table_obj


def lookup(body: bytes) -> dict[str, Any] | None:
    """The parse of a TABLE_MAP event body seen before (drc.replicator.fast_events), or None."""
    hit = _cache.get(body)
    if hit is not None:
        _cache.move_to_end(body)
    return hit


def install() -> None:
    """Route TABLE_MAP parsing through the cache (idempotent)."""
    TableMapEvent.__init__ = _cached_init  # type: ignore[method-assign]
