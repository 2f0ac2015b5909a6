"""Where a row change goes when a stream is split among readers: 65536 logical partitions.

Swift's placement: a change's logical partition is a hash of its table and key, so every change
of one key lands in one partition and per-key order survives any split; a reader (a consumer
group member, a message queue) serves a contiguous range of partitions, and ranges can be split
or moved without re-hashing anything. Pure and stable across processes and releases: the
partition of a key is part of the wire contract (a consumer may compute it too)::

    partition = first 8 bytes of BLAKE2b(JSON [schema, table, [key values]]) big-endian % 65536

with values in their JSON wire form (drc.core.jsonwire.value_to_json), JSON compact with keys
sorted, UTF-8. ``table_partition`` hashes ``[schema, table]`` alone (partitioning by table).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from drc.core.jsonwire import value_to_json

LOGICAL_PARTITIONS = 65536


def _bucket(parts: list[Any]) -> int:
    data = json.dumps(parts, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    digest = hashlib.blake2b(data.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % LOGICAL_PARTITIONS


def key_partition(schema: str, table: str, key: Sequence[Any]) -> int:
    """The logical partition of one key of ``schema.table`` (values in key column order)."""
    return _bucket([schema, table, [value_to_json(value) for value in key]])


def table_partition(schema: str, table: str) -> int:
    """The logical partition of a whole table (partitioning by table)."""
    return _bucket([schema, table])


def row_key(row: Mapping[str, Any], key_columns: Sequence[str]) -> tuple[Any, ...]:
    """A row's key values; a table without a primary key is keyed by all its columns."""
    names = key_columns or tuple(row)
    return tuple(row[name] for name in names)


def split_ranges(count: int) -> tuple[tuple[int, int], ...]:
    """``count`` contiguous ranges covering all partitions, as (first, last) inclusive, as even
    as integers allow."""
    if not 1 <= count <= LOGICAL_PARTITIONS:
        raise ValueError(f"partition ranges must number 1..{LOGICAL_PARTITIONS}, got {count}")
    bounds = [LOGICAL_PARTITIONS * i // count for i in range(count + 1)]
    return tuple((bounds[i], bounds[i + 1] - 1) for i in range(count))


def range_index(partition: int, count: int) -> int:
    """Which of ``split_ranges(count)`` holds ``partition``."""
    if not 0 <= partition < LOGICAL_PARTITIONS:
        raise ValueError(f"a partition is 0..{LOGICAL_PARTITIONS - 1}, got {partition}")
    # The largest i with LOGICAL_PARTITIONS * i // count <= partition.
    index = (partition * count) // LOGICAL_PARTITIONS
    while LOGICAL_PARTITIONS * (index + 1) // count <= partition:
        index += 1
    return index
