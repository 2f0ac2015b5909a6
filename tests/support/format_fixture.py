"""The on-disk formats of one release, kept as a fixture that every later release must read:
an EventBuffer (records of every value kind, DDL, fragments, DRC-applied and progress markers,
LZ4-compressed and plain payloads, several segments) and the metastore beside it, with what
they hold written out as JSON (drc.core.jsonwire) by the release that wrote them.

    python -m tests.support.format_fixture tests/fixtures/formats/vN

Make a new directory when a format changes (the buffer's FORMAT_VERSION, the metastore's, the
record codec's): never regenerate an old one, its bytes are the point. The test
(tests/unit/test_format_fixtures.py) reads every directory there.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

from drc.core.codec import encode_transaction
from drc.core.events import Column, Op, RowChange, SchemaChange, TableSchema, Transaction
from drc.core.jsonwire import transaction_to_json
from drc.core.scn import SCN
from drc.core.values import Bit, ZeroDate
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.format import FORMAT_VERSION as BUFFER_FORMAT
from drc.metastore.file import FORMAT_VERSION as METASTORE_FORMAT
from drc.metastore.store import MetaStore

SEGMENT_BYTES = 4096  # small, so the fixture spans several segments and stays small

KINDS = TableSchema(
    "shop",
    "kinds",
    (
        Column("id", "bigint", False),
        Column("i", "int", True),
        Column("f", "double", True),
        Column("d", "decimal(30,10)", True),
        Column("s", "varchar(200)", True, "utf8mb4"),
        Column("b", "varbinary(64)", True),
        Column("ts", "datetime(6)", True),
        Column("day", "date", True),
        Column("t", "time(6)", True),
        Column("zero", "datetime", True),
        Column("bits", "bit(12)", True),
        Column("tags", "set('a','b','c')", True, "utf8mb4"),
        Column("doc", "json", True),
    ),
    ("id",),
)


def _row(n: int) -> dict[str, Any]:
    return {
        "id": n,
        "i": -(2**31) + n,
        "f": 1.0 / (n + 3),
        "d": Decimal("-12345678901234567890.0123456789") + n,
        "s": f"row {n} \u00e9\u4e2d\U0001f600 'quoted' \"double\"",
        "b": bytes(range(n % 7, n % 7 + 20)),
        "ts": dt.datetime(2026, 11, 27, 12, 30, 45, 123456) + dt.timedelta(seconds=n),
        "day": dt.date(1999, 12, 31) + dt.timedelta(days=n),
        "t": dt.timedelta(hours=-838 + n, microseconds=999999),
        "zero": ZeroDate("0000-00-00 00:00:00"),
        "bits": Bit(0b101010101010 ^ n, 12),
        "tags": frozenset({"a", "c"}),
        "doc": {"n": n, "list": [1, "two", None], "nested": {"ok": True}},
    }


def _scn(n: int) -> SCN:
    return SCN(1, 11, 3 + n // 40, 4 + n * 1000)


def transactions() -> list[Transaction]:
    out: list[Transaction] = []
    ts = 1_795_000_000
    out.append(Transaction(_scn(0), 11, "0-11-1", ts, (), (SchemaChange(
        "shop", "CREATE TABLE kinds (id BIGINT PRIMARY KEY, i INT, f DOUBLE, d DECIMAL(30,10))"
    ),)))  # fmt: skip
    for n in range(1, 60):
        row = _row(n)
        changes = [RowChange("shop", "kinds", Op.INSERT, None, row)]
        if n % 3 == 0:
            changes.append(RowChange("shop", "kinds", Op.UPDATE, _row(n - 1), {**row, "s": None}))
        if n % 5 == 0:
            changes.append(RowChange("shop", "kinds", Op.DELETE, _row(n - 2), None))
        position = f"0-11-{n + 1},1-12-{n}" if n % 7 == 0 else None  # several domains
        out.append(Transaction(_scn(n), 11, f"0-11-{n + 1}", ts + n, tuple(changes),
                               gtid_position=position))  # fmt: skip
    # A transaction in three fragments, a DRC-applied one with and one without its rows, a
    # progress marker.
    for fragment in range(3):
        rows = tuple(RowChange("shop", "kinds", Op.INSERT, None, _row(1000 + fragment * 10 + i))
                     for i in range(10))  # fmt: skip
        out.append(Transaction(_scn(60), 11, "0-11-70", ts + 60, rows, fragment=fragment,
                               last_fragment=fragment == 2))  # fmt: skip
    out.append(Transaction(_scn(61), 11, "0-11-71", ts + 61, (RowChange(
        "shop", "kinds", Op.INSERT, None, _row(2000)),), drc_originated=True))  # fmt: skip
    out.append(Transaction(_scn(62), 11, "0-11-72", ts + 62, (), drc_originated=True,
                           rows_omitted=True))  # fmt: skip
    out.append(Transaction(_scn(63), 11, None, ts + 63, ()))
    return out


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=False)
    txns = transactions()
    with EventBuffer.open(directory / "buffer", segment_bytes=SEGMENT_BYTES, compress=True) as buf:
        for txn in txns:
            buf.append(txn.scn, encode_transaction(txn), txn.timestamp * 1000,
                       not txn.last_fragment)  # fmt: skip
            buf.commit()
    with MetaStore.open(directory / "metastore.sqlite3") as meta:
        meta.record_ddl(_scn(0), txns[0].ddl[0], [("shop", "kinds")])
        meta.record_schema(_scn(0), KINDS)
        narrower = TableSchema("shop", "kinds", KINDS.columns[:-1], ("id",))
        meta.record_schema(_scn(30), narrower)
        meta.record_schema(_scn(31), KINDS)
    expected = {
        "formats": {"buffer": BUFFER_FORMAT, "metastore": METASTORE_FORMAT},
        "transactions": [transaction_to_json(t) for t in txns],
        "schemas": {
            str(scn): [c.name for c in KINDS.columns[: 12 if scn == _scn(30) else 13]]
            for scn in (_scn(0), _scn(30), _scn(31))
        },  # fmt: skip
    }
    (directory / "expected.json").write_text(json.dumps(expected, sort_keys=True))


if __name__ == "__main__":
    write(Path(sys.argv[1]))
