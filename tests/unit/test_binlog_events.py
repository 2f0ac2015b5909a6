"""Event packets -> source events (drc.replicator.binlog.events), on byte literals."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from drc.core.events import Column, Op, TableSchema
from drc.replicator.binlog import columns as T
from drc.replicator.binlog.columns import layout_of
from drc.replicator.binlog.events import (
    FOR_LIBRARY,
    HEADER,
    EventDecoder,
    TableEntry,
    TableMaps,
)
from drc.replicator.binlog.rows import RowDecodeError
from drc.replicator.source_events import Begin, Commit, Heartbeat, Rows, XaPrepare

SCHEMA = TableSchema("shop", "t", (Column("id", "int", False),), ("id",))
LAYOUT = layout_of("shop", "t", [SimpleNamespace(type=T.LONG, name="id", unsigned=False)])


def packet(
    kind: int, body: bytes, flags: int = 0, timestamp: int = 1, log_pos: int = 999, crc: bool = True
) -> bytes:
    size = 19 + len(body) + (4 if crc else 0)
    return (
        HEADER.pack(timestamp, kind, 7, size, log_pos, flags) + body + (b"\xcc" * 4 if crc else b"")
    )


def decoder(checksum: bool = True) -> EventDecoder:
    made = EventDecoder(TableMaps(), "mysql-bin.000003")
    made.checksum = checksum
    return made


def rows_body(table_id: int, *ids: int, post_header: bytes = b"\0\0") -> bytes:
    rows = b"".join(b"\0" + struct.pack("<i", i) for i in ids)
    return table_id.to_bytes(6, "little") + post_header + b"\x01\x01" + rows


def test_gtid_and_xid_frame_a_transaction() -> None:
    dec = decoder()
    gtid = packet(162, struct.pack("<QIB", 5, 1, 0x01) + b"\0" * 6, flags=0x8000)
    assert dec.decode(gtid) == Begin("1-7-5", 7, standalone=True, skip_replication=True)
    assert dec.decode(packet(16, b"\0" * 8, timestamp=42, log_pos=555)) == Commit(7, 42, 3, 555)


def test_xa_prepare_names_its_xid_as_xa_commit_writes_it() -> None:
    body = struct.pack("<BIII", 0, 1, 2, 1) + b"a\x01z"
    prepared = decoder().decode(packet(38, body, timestamp=42, log_pos=777))
    assert prepared == XaPrepare("X'6101',X'7a',1", False, 7, 42, "mysql-bin.000003", 3, 777)
    one_phase = decoder().decode(packet(38, struct.pack("<BIII", 1, 0, 0, 0)))
    assert isinstance(one_phase, XaPrepare) and one_phase.one_phase
    with pytest.raises(RowDecodeError, match="XA id of 9 bytes"):
        decoder().decode(packet(38, struct.pack("<BIII", 0, 1, 5, 4) + b"abc"))


def test_rotate_moves_positions_and_a_real_one_forgets_table_ids() -> None:
    dec = decoder()
    dec.tables[9] = TableEntry(9, SCHEMA, LAYOUT)
    assert dec.decode(packet(4, struct.pack("<Q", 4) + b"mysql-bin.000004", timestamp=0)) is None
    assert (dec.log_file, dec.log_index, list(dec.tables)) == ("mysql-bin.000004", 4, [9])
    assert dec.decode(packet(27, b"mysql-bin.000004", log_pos=120)) == Heartbeat(4, 120)
    assert dec.decode(packet(4, struct.pack("<Q", 4) + b"mysql-bin.000005")) is None
    assert (dec.log_index, dec.tables) == (5, {})


def test_a_table_map_is_parsed_once_per_distinct_bytes() -> None:
    dec = decoder()
    body = (9).to_bytes(6, "little") + b"\0\0" + b"the rest of a TABLE_MAP"
    assert dec.decode(packet(19, body)) is FOR_LIBRARY
    dec.remember(body, TableEntry(9, SCHEMA, LAYOUT))
    other = decoder()
    other.table_maps = dec.table_maps  # another connection shares the cache
    assert other.decode(packet(19, body)) is None and other.tables[9].schema == SCHEMA
    assert other.decode(packet(19, body + b"!")) is FOR_LIBRARY  # an ALTER: other bytes


def test_table_map_cache_drops_the_least_recently_used() -> None:
    maps = TableMaps(limit=2)
    entries = [TableEntry(i, SCHEMA, LAYOUT) for i in range(3)]
    maps.put(b"a", entries[0])
    maps.put(b"b", entries[1])
    assert maps.get(b"a") is entries[0]
    maps.put(b"c", entries[2])
    assert (maps.get(b"a"), maps.get(b"b"), maps.get(b"c")) == (entries[0], None, entries[2])


@pytest.mark.parametrize(("kind", "op"), [(23, Op.INSERT), (25, Op.DELETE), (30, Op.INSERT)])
def test_rows_events_of_a_known_table(kind: int, op: Op) -> None:
    dec = decoder()
    dec.tables[9] = TableEntry(9, SCHEMA, LAYOUT)
    v2 = b"\0\0\x02\0" if kind == 30 else b"\0\0"  # flags, and v2's extra data length
    body = rows_body(9, 1, 2, post_header=v2)
    event = dec.decode(packet(kind, body))
    images = (
        ((None, {"id": 1}), (None, {"id": 2}))
        if op is Op.INSERT
        else (({"id": 1}, None), ({"id": 2}, None))
    )
    assert event == Rows(SCHEMA, op, images, len(body))


def test_update_rows_have_before_and_after_images() -> None:
    dec = decoder(checksum=False)
    dec.tables[9] = TableEntry(9, SCHEMA, LAYOUT)
    body = (9).to_bytes(6, "little") + b"\0\0\x01\x01\x01" + b"\0\x01\0\0\0" + b"\0\x02\0\0\0"
    event = dec.decode(packet(24, body, crc=False))
    assert event == Rows(SCHEMA, Op.UPDATE, (({"id": 1}, {"id": 2}),), len(body))


def test_a_longer_declared_post_header_is_skipped_a_shorter_one_refused() -> None:
    dec = decoder()
    dec.tables[9] = TableEntry(9, SCHEMA, LAYOUT)
    dec.post_header_lengths = (0,) * 22 + (10,)  # type 23 declares 10 bytes, not 8
    event = dec.decode(packet(23, rows_body(9, 3, post_header=b"\0\0" + b"??")))
    assert isinstance(event, Rows) and event.images == ((None, {"id": 3}),)
    dec.post_header_lengths = (0,) * 22 + (6,)
    with pytest.raises(RowDecodeError, match="post-header of 6 bytes"):
        dec.decode(packet(23, rows_body(9, 3)))


def test_rows_of_a_table_no_table_map_announced_are_dropped() -> None:
    assert decoder().decode(packet(23, rows_body(9, 1))) is None


@pytest.mark.parametrize("kind", [2, 15, 163])
def test_query_format_description_and_gtid_list_go_to_the_library(kind: int) -> None:
    assert decoder().decode(packet(kind, b"whatever")) is FOR_LIBRARY


@pytest.mark.parametrize("kind", [3, 5, 13, 14, 160, 161, 164, 165, 169, 33, 39])
def test_other_event_types_are_of_no_use_to_capture(kind: int) -> None:
    assert decoder().decode(packet(kind, b"whatever")) is None


def test_events_shorter_than_they_say_are_corrupt() -> None:
    with pytest.raises(RowDecodeError, match="not an event"):
        decoder().decode(b"\0" * 10)
    short = packet(16, b"\0" * 8)[:-6]  # the XID cut inside its body
    with pytest.raises(RowDecodeError, match="declares 31 bytes"):
        decoder().decode(short)
