import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.core import partitions
from drc.core.partitions import LOGICAL_PARTITIONS


def test_a_key_always_lands_in_the_same_partition_and_the_hash_is_the_documented_one():
    # Pinned: the partition of a key is a wire contract that consumers may compute themselves.
    import hashlib
    import json

    data = json.dumps(["shop", "orders", [42]], separators=(",", ":"), sort_keys=True)
    expected = int.from_bytes(hashlib.blake2b(data.encode(), digest_size=8).digest(), "big")
    assert partitions.key_partition("shop", "orders", (42,)) == expected % LOGICAL_PARTITIONS


def test_keys_of_every_value_type_hash_and_spread():
    keys = [
        (i, "x" * (i % 7), Decimal(i) / 3, dt.date(2020, 1, 1 + i % 28), b"\x00" * i)
        for i in range(2000)
    ]
    seen = {partitions.key_partition("s", "t", key) for key in keys}
    assert len(seen) > 1900  # 2000 keys into 65536 buckets: few collisions


def test_same_key_in_two_tables_may_land_apart_and_table_partition_is_stable():
    assert partitions.key_partition("s", "a", (1,)) != partitions.key_partition("s", "b", (1,))
    assert partitions.table_partition("s", "a") == partitions.table_partition("s", "a")


def test_row_key_takes_the_key_columns_or_the_whole_row_without_a_key():
    row = {"id": 1, "name": "a", "v": 2}
    assert partitions.row_key(row, ("id",)) == (1,)
    assert partitions.row_key(row, ()) == (1, "a", 2)


@given(st.integers(1, 5000))
def test_split_ranges_cover_every_partition_once(count):
    ranges = partitions.split_ranges(count)
    assert ranges[0][0] == 0 and ranges[-1][1] == LOGICAL_PARTITIONS - 1
    for (_, last), (first, _) in zip(ranges, ranges[1:], strict=False):
        assert first == last + 1
    assert all(first <= last for first, last in ranges)


@given(st.integers(1, 300), st.integers(0, LOGICAL_PARTITIONS - 1))
def test_range_index_names_the_range_holding_the_partition(count, partition):
    first, last = partitions.split_ranges(count)[partitions.range_index(partition, count)]
    assert first <= partition <= last


def test_bad_counts_and_partitions_are_refused():
    with pytest.raises(ValueError):
        partitions.split_ranges(0)
    with pytest.raises(ValueError):
        partitions.range_index(LOGICAL_PARTITIONS, 4)
