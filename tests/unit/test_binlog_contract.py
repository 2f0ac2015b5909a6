"""What DRC's binlog reading relies on in python-mysql-replication and PyMySQL, for the versions
pyproject.toml allows.

The library connects, starts the dump and parses TABLE_MAP, QUERY and FORMAT_DESCRIPTION
events; DRC reads the later packets (drc.replicator.binlog.wire) and decodes rows itself
(drc.replicator.binlog.rows). Only public names are used; this test pins what they do:
the arguments DRC passes exist, a real TABLE_MAP (captured from MariaDB 10.11 with
binlog_row_metadata=FULL and CRC32 checksums) parses into the column attributes the layout
reads, and the rows event written after it decodes through DRC to what the library's own
row decoding gives, except where drc.replicator.binlog.values documents why DRC differs.
The behaviour of the tap on a live connection is checked in
tests/integration/test_binlog_contract.py.
"""

from __future__ import annotations

import datetime as dt
import inspect
import ssl
import tomllib
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pymysql
import pytest
from packaging.requirements import Requirement
from pymysql.protocol import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import TableMapEvent, WriteRowsEvent

from drc.core.values import Bit, ZeroDate
from drc.replicator.binlog import columns as c
from drc.replicator.binlog.events import EventDecoder, TableMaps
from drc.replicator.binlog.library import LibraryParser
from drc.replicator.source_events import Rows
from tests.support.values import identical

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
# The library's control connection, as its events use it (it adds _get_dbms itself).
CONTROL = SimpleNamespace(charset="utf8", _get_dbms=lambda: "mariadb")

# INSERT of three rows into test_capture_types' all_types table (the third all NULL).
PACKETS = {
    "FormatDescriptionEvent": bytes.fromhex(
        "006b3b096b0f01000000fc000000000100000000040031302e31312e31392d4d6172696144422d302b646562"
        "313275312d6c6f6700000000000000000000000000000000000000000000000013380d000800120004040404"
        "120000e400041a08000000080808020000000a0a0a0000000000000a0a0a0000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
        "0000000000000000000000000000000000041304000d0808080a0a0a01db18cda7"
    ),
    "TableMapEvent": bytes.fromhex(
        "006b3b096b130100000032010000b007000000001e0000000000010008636f6e74726163740009616c6c5f74"
        "7970657300230301010209030808f6f604050a12121113130dfe0ffcfc0ffe0ffcfc101010fefefcff25411e"
        "0a0204080600060600fe28900102043200fe0614000204010000080501f701f8010404feffffff0701022908"
        "030b2d2d2d2d083f3f3f3f2e3f070100046b02696402746903746975027369026d6901690262690362697502"
        "646303646332016601640264740364746d0464746d3002747302746d03746d3001790163027663027478036c"
        "7478026c3102626e02766202626c036c626c026231036236340362313301650173016a01670a012d05100303"
        "72656405677265656e04626c756506140305736d616c6c066d656469756d056c617267650801000df3f31f"
    ),
    "WriteRowsEvent": bytes.fromhex(
        "006b3b096b1701000000ef0100009f09000000001e0000000000010023ffffffff0700000000f80100000080"
        "ff0080ffffff000000800000000000000080ffffffffffffffff7a0a1f00c4653600c4653600c4653600c465"
        "3600c4653600c4653600fc187f439eb19ccdcc8c3f0000000000000000000000800000000000000099a51ea2"
        "cc000000000000007fefffffffff4b9105000261620f00f09f9880f09d849e2068c3a96c6c6f010078040000"
        "006c6f6e6706636166e920ff0261620300ff0001000002000000ab0101ffffffffffffffff155500000f0000"
        "007b2261223a205b312c20322e355d7d19000000000000000101000000000000000000f03f00000000000000"
        "4000000000f8020000007f00ff7f000000ffffff7fffffffffffffff7f000000000000000080000000000000"
        "00000000000000000000000000000000000000000000018000000001eeff7fffffffffffffffef7f5dd00ffe"
        "f3ff7efb0f423f8cb24200007fffffff0f423f86400007a1207fffffff0a6162636465666768696a00000000"
        "0000000000066162636465660000000000000000000000000000000010000305020000005b5d2d0000000000"
        "000001020000000200000000000000000000000000000000000000000000000000f03f000000000000f03ffe"
        "ffffffff030000008200ac4e"
    ),
}


def _pinned(name: str) -> Requirement:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    return next(r for r in map(Requirement, dependencies) if r.name.lower() == name)


@pytest.mark.parametrize("name", ["mysql-replication", "pymysql"])
def test_the_installed_version_is_in_the_pinned_range(name: str) -> None:
    requirement = _pinned(name)
    assert requirement.specifier.contains(version(name)), (requirement, version(name))


def test_the_arguments_drc_passes_exist() -> None:
    reader = inspect.signature(BinLogStreamReader).parameters
    passed = {"connection_settings", "server_id", "log_file", "log_pos", "resume_stream",
              "blocking", "is_mariadb", "auto_position", "slave_heartbeat", "pymysql_wrapper",
              "only_events"}  # fmt: skip
    assert passed <= set(reader)
    wrapper = list(inspect.signature(BinLogPacketWrapper).parameters)
    assert wrapper == [
        "from_packet", "table_map", "ctl_connection", "mysql_version", "use_checksum",
        "allowed_events", "only_tables", "ignored_tables", "only_schemas", "ignored_schemas",
        "freeze_schema", "ignore_decode_errors", "verify_checksum", "optional_meta_data",
        "enable_logging", "use_column_name_cache", "post_header_lengths",
    ]  # fmt: skip
    assert "defer_connect" in inspect.signature(pymysql.connections.Connection).parameters
    assert "sock" in inspect.signature(pymysql.connections.Connection.connect).parameters
    assert callable(pymysql.err.raise_mysql_exception)
    assert ssl.create_default_context().sslsocket_class is ssl.SSLSocket


def test_pymysql_keeps_host_port_timeout_and_its_tls_context_public() -> None:
    conn = pymysql.connect(host="127.0.0.9", port=3307, connect_timeout=7, defer_connect=True)
    assert (conn.host, conn.port, conn.connect_timeout) == ("127.0.0.9", 3307, 7)
    assert isinstance(conn.ctx, ssl.SSLContext)  # preferred TLS: pymysql's own context
    off = pymysql.connect(host="127.0.0.9", ssl_disabled=True, defer_connect=True)
    assert getattr(off, "ctx", None) is None


def _decoder() -> tuple[EventDecoder, LibraryParser]:
    decoder = EventDecoder(TableMaps(), "mysql-bin.000002")
    decoder.checksum = True
    parser = LibraryParser(CONTROL, decoder)
    return decoder, parser


def test_format_description_gives_post_header_lengths_and_version() -> None:
    decoder, parser = _decoder()
    parser.parse(PACKETS["FormatDescriptionEvent"])
    assert parser.mysql_version == (10, 11, 19)
    lengths = decoder.post_header_lengths
    assert (lengths[18], lengths[22], lengths[23], lengths[24]) == (8, 8, 8, 8)  # 19, 23-25
    assert lengths[161] == 19  # MariaDB's GTID event


# What spec_of reads of each column, by type.
ATTRIBUTES = {
    c.VARCHAR: {"max_length", "character_set_name"},
    c.STRING: {"max_length", "character_set_name"},
    c.BLOB: {"length_size", "character_set_name"},
    c.GEOMETRY: {"length_size"},
    c.NEWDECIMAL: {"precision", "decimals"},
    c.ENUM: {"size", "enum_values"},
    c.SET: {"size", "set_values"},
    c.DATETIME2: {"fsp"},
    c.TIMESTAMP2: {"fsp"},
    c.TIME2: {"fsp"},
    c.BIT: {"bits", "bytes"},
}


def test_a_real_table_map_has_every_attribute_the_layout_reads() -> None:
    decoder, parser = _decoder()
    parser.parse(PACKETS["FormatDescriptionEvent"])
    event = parser.parse(PACKETS["TableMapEvent"])
    assert isinstance(event, TableMapEvent) and (event.schema, event.table) == (
        "contract",
        "all_types",
    )
    for column in event.columns:
        assert {"type", "name", "unsigned"} | ATTRIBUTES.get(column.type, set()) <= set(
            vars(column)
        )
    entry = decoder.tables[event.table_id]
    assert [spec.name for spec in entry.layout.columns] == [col.name for col in event.columns]
    assert c.R_UNSUPPORTED not in {spec.kind for spec in entry.layout.columns}
    assert entry.schema.primary_key == ("id",) and entry.schema.columns[1].type == "tinyint"
    assert {"dt": c.DATE, "ts": c.TIMESTAMP2, "bn": c.STRING, "e": c.ENUM, "s": c.SET} == {
        col.name: col.type for col in event.columns if col.name in ("dt", "ts", "bn", "e", "s")
    }


def _library_rows() -> list[dict[str, Any]]:
    """The library's own decoding of the rows event (its public ``rows``)."""
    decoder, parser = _decoder()
    parser.parse(PACKETS["FormatDescriptionEvent"])
    table = parser.parse(PACKETS["TableMapEvent"])
    wrapper = BinLogPacketWrapper(
        MysqlPacket(PACKETS["WriteRowsEvent"], "utf8"), {table.table_id: table.get_table()},
        CONTROL, parser.mysql_version, True, frozenset({WriteRowsEvent}), None, None, None,
        None, False, False, False, True, False, False, decoder.post_header_lengths,
    )  # fmt: skip
    assert isinstance(wrapper.event, WriteRowsEvent)
    return [row["values"] for row in wrapper.event.rows]


def _documented(name: str, library: Any, ours: Any) -> Any:
    """The library's value turned into DRC's by the rule drc.replicator.binlog.values states,
    or the library's value where DRC agrees with it."""
    if ours is None:  # NULL
        return library
    if library is None and isinstance(ours, ZeroDate):
        return ours  # zero and partial dates: the library says None
    if name == "ts" and library == dt.datetime(1970, 1, 1):
        return ZeroDate("0000-00-00 00:00:00.000000")
    if name == "y" and library == 1900:
        return 0
    if name == "f":
        return float(str(np.float32(library)))
    if name == "s":
        return frozenset(library or ())
    if name.startswith("b") and name[1:].isdigit():
        return Bit(int(library, 2), len(library))
    if name in ("bn", "vb", "bl", "lbl"):
        raw = library.encode() if isinstance(library, str) else library
        return raw.ljust(6, b"\0") if name == "bn" else raw
    if name == "tm" and library == -dt.timedelta(hours=1, microseconds=999999):
        return -dt.timedelta(hours=1, microseconds=1)  # the library splits the fraction off
    return library


def test_drc_decodes_rows_as_the_library_does_except_where_documented() -> None:
    decoder, parser = _decoder()
    parser.parse(PACKETS["FormatDescriptionEvent"])
    parser.parse(PACKETS["TableMapEvent"])
    ours = decoder.decode(PACKETS["WriteRowsEvent"])
    assert isinstance(ours, Rows) and len(ours.images) == 3
    theirs = _library_rows()
    differing = set()
    for (_, row), library in zip(ours.images, theirs, strict=True):
        assert row is not None and list(row) == list(library)
        for name, value in row.items():
            expected = _documented(name, library[name], value)
            assert identical(value, expected), (name, value, library[name])
            differing |= {name} if not identical(value, library[name]) else set()
    # Where the library and DRC part, as documented: if one of these stops differing, the
    # library changed, and the rule in drc.replicator.binlog.values can go.
    assert differing == {
        "f", "dt", "dtm", "dtm0", "ts", "tm", "y", "bn", "vb", "bl", "lbl", "b1", "b64", "b13", "s",
    }  # fmt: skip
