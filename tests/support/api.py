"""A small stream of shop transactions and the pull API in process (FastAPI's TestClient over
a real EventBuffer), for the API and SDK unit tests."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence

from drc.core.codec import encode_transaction
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.eventbuffer import EventBuffer

with warnings.catch_warnings():  # starlette nags about httpx; the TestClient works as it is
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient as TestClient  # the tests take it from here

ORDERS = TableFilter.parse_list("shop.orders")


def scn(n: int) -> SCN:
    return SCN(1, 7, 1, n * 100)


def ins(table: str, row_id: int, db: str = "shop") -> RowChange:
    return RowChange(db, table, Op.INSERT, None, {"id": row_id, "note": f"row {row_id}"})


def txn(
    n: int,
    *changes: RowChange,
    ddl: Sequence[SchemaChange] = (),
    drc: bool = False,
    fragment: int = 0,
    last: bool = True,
) -> Transaction:
    return Transaction(
        scn(n), 7, f"0-7-{n}", 1_700_000_000 + n, tuple(changes), tuple(ddl), drc, fragment, last
    )


TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STREAM = [
    txn(1, ins("orders", 1), ins("items", 1)),
    txn(2, ins("items", 2)),
    txn(3, ins("orders", 3), last=False),
    txn(3, ins("items", 4), fragment=1, last=False),
    txn(3, ins("items", 5), fragment=2),
    txn(4, ddl=[SchemaChange("shop", "ALTER TABLE orders ADD COLUMN x INT")]),
    txn(5, ins("orders", 6), drc=True),
    txn(6),  # a progress marker
    txn(7, ins("orders", 7, db="other")),
]


def store(buffer: EventBuffer, *txns: Transaction) -> None:
    for t in txns:
        buffer.append(t.scn, encode_transaction(t), t.timestamp * 1000, not t.last_fragment)
    buffer.commit()


_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"'
_SAMPLE = re.compile(
    rf"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{{(?P<labels>{_LABEL}(,{_LABEL})*)\}})? "
    r"(?P<value>[-+]?(\d+(\.\d*)?([eE][-+]?\d+)?|NaN|Inf))"
)


def parse_prometheus(text: str) -> dict[str, list[tuple[str, float]]]:
    """A strict reader of the text exposition format: every line must parse."""
    assert text.endswith("\n")
    families: dict[str, list[tuple[str, float]]] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("counter", "gauge") and name not in types
            types[name] = kind
            families[name] = []
            continue
        match = _SAMPLE.fullmatch(line)
        assert match, f"not a sample line: {line!r}"
        assert match["name"] in types, f"sample before its TYPE: {line!r}"
        families[match["name"]].append((match["labels"] or "", float(match["value"])))
    return families
