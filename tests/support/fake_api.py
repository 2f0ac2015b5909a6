"""An in-memory fake of the pull API (GET /v1/events, /v1/status) for the SDK's unit tests.

It serves a list of transactions (fragments included) by the server contract: whole
transactions per batch, ``next`` past filtered-out ones, JSON or records, epochs, tokens. Faults
are queued per host: each request to that host pops one (a connection error or an HTTP status).
tests/unit/test_client_fakeapi.py checks the fake itself against the contract.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx

from drc.api import streamwire, wire
from drc.core.codec import encode_transaction
from drc.core.events import Op, RowChange, SchemaChange, Transaction
from drc.core.jsonwire import transaction_to_json
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter
from drc.core.values import Bit, ZeroDate

Fault = str | int | Callable[[httpx.Request], httpx.Response]


def txn(
    n: int,
    table: str = "db.t",
    rows: int = 1,
    fragment: int = 0,
    last: bool = True,
    drc: bool = False,
) -> Transaction:
    schema, name = table.split(".")
    changes = tuple(
        RowChange(schema, name, Op.INSERT, None, {"id": n * 1000 + k, "v": f"r{n}.{k}"})
        for k in range(rows)
    )
    return Transaction(
        SCN(1, 7, 1, 100 * n),
        7,
        f"0-7-{n}",
        1_700_000_000 + n,
        changes,
        drc_originated=drc,
        fragment=fragment,
        last_fragment=last,
    )


def stream(count: int, tables: tuple[str, ...] = ("db.t",)) -> list[Transaction]:
    return [txn(n, tables[(n - 1) % len(tables)]) for n in range(1, count + 1)]


def rich_stream() -> list[Transaction]:
    """Transactions with every value type the wire carries, for JSON vs records comparisons."""
    values = {
        "id": 2**63 + 5,
        "d": Decimal("-0.00"),
        "dt": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
        "tz": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
        "day": dt.date(1999, 12, 31),
        "t": -dt.timedelta(hours=838, seconds=59),
        "zero": ZeroDate("0000-00-00"),
        "bit": Bit(5, 3),
        "set": frozenset({"a", "b"}),
        "blob": b"\x00\xff",
        "f": -0.0,
        "s": "naïve ✓",
        "null": None,
        "doc": {"k": [1, "x"]},
    }
    update = RowChange("db", "t", Op.UPDATE, {"id": 1, "s": "old"}, values)
    delete = RowChange("db", "u", Op.DELETE, {"id": 9, "blob": b""}, None)
    ddl = (SchemaChange("db", "ALTER TABLE t ADD COLUMN z INT"),)
    return [
        txn(1),
        Transaction(SCN(1, 7, 1, 200), 7, None, 5, (update, delete), drc_originated=True),
        Transaction(SCN(2, 8, 1, 50), 8, "0-8-1", 6, (), ddl=ddl),
        *(
            dataclasses.replace(txn(4, rows=3, fragment=k, last=k == 1), scn=SCN(2, 8, 1, 90))
            for k in range(2)
        ),
    ]


@dataclass
class Seen:
    host: str
    params: dict[str, str]
    accept: str
    auth: str | None
    at: float


class FakeApi:
    def __init__(self, txns: list[Transaction], token: str | None = None) -> None:
        self.txns = list(txns)
        self.token = token
        self.epochs: dict[str, str] = {}
        self.faults: dict[str, list[Fault]] = {}
        self.seen: list[Seen] = []
        self.delay_s = 0.0  # per events request, to make prefetch observable
        # With ``split=1``: a large transaction is cut after this many records per page.
        self.cut_after = 2
        self.knows_split = True  # False: refuse ``split`` as an older server does
        self.status_body: dict[str, Any] = {"role": "leader", "datacenter": "dc1"}
        self._lock = threading.Lock()

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def fail(self, host: str, *faults: Fault) -> None:
        self.faults.setdefault(host, []).extend(faults)

    def events_seen(self, host: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if host is None or s.host == host]

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == streamwire.PATH_STREAM:  # an older server: the SDK pulls
            return error(404, "not_found", "no such resource")
        host = request.url.host
        params = dict(request.url.params)
        with self._lock:
            self.seen.append(
                Seen(
                    host,
                    params,
                    request.headers.get("accept", ""),
                    request.headers.get("authorization"),
                    time.monotonic(),
                )
            )
            fault = self.faults.get(host, []).pop(0) if self.faults.get(host) else None
        if fault == "connect":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if isinstance(fault, int):
            return error(fault, "unavailable" if fault >= 500 else "bad_request", "injected")
        if callable(fault):
            return fault(request)
        if (
            self.token is not None
            and request.headers.get("authorization") != f"Bearer {self.token}"
        ):
            return error(401, "unauthorized", "missing or wrong bearer token")
        if request.url.path == wire.PATH_STATUS:
            return httpx.Response(200, json=self.status_body)
        time.sleep(self.delay_s)
        return self.events(host, params, request.headers.get("accept", ""))

    def events(self, host: str, params: dict[str, str], accept: str) -> httpx.Response:
        epoch = self.epochs.setdefault(host, f"epoch-{host}")
        if params.get("epoch") not in (None, epoch):
            return httpx.Response(
                409, json={"error": "epoch_mismatch", "message": "rebuilt", "epoch": epoch}
            )
        after = SCN.parse(params["after"])
        within = 0
        if "split" in params and not self.knows_split:
            known = "after, tables, max_events, max_bytes, wait_ms, epoch, skip_drc"
            return error(400, "bad_request", f"unknown parameter 'split'; known: {known}")
        if params.get("split") == "1":
            batch, next_scn, within = self.select_split(after, int(params.get("within", 0)), params)
        else:
            batch, next_scn = self.select(after, params)
        newest = self.txns[-1].scn if self.txns else None
        if accept == wire.MEDIA_RECORDS:
            headers = {
                wire.HEADER_EPOCH: epoch,
                wire.HEADER_NEXT: str(next_scn),
                wire.HEADER_NEWEST: str(newest or ""),
                wire.HEADER_COUNT: str(len(batch)),
                "content-type": wire.MEDIA_RECORDS,
            }
            if within:
                headers[wire.HEADER_NEXT_WITHIN] = str(within)
            return httpx.Response(
                200, content=b"".join(map(encode_transaction, batch)), headers=headers
            )
        body = {
            "epoch": epoch,
            "next": str(next_scn),
            "newest": str(newest) if newest else None,
            "transactions": [transaction_to_json(t) for t in batch],
        }
        if within:
            body["next_within"] = within
        return httpx.Response(200, json=body)

    def select(self, after: SCN, params: dict[str, str]) -> tuple[list[Transaction], SCN]:
        """Whole transactions after ``after``, filtered, up to max_events; and ``next``."""
        filter_ = TableFilter.parse_list(params.get("tables", ""))
        limit = int(params.get("max_events", "1000"))
        out: list[Transaction] = []
        next_scn, sent = after, 0
        for group in _groups([t for t in self.txns if t.scn > after]):
            if sent >= limit:  # full: like the server, examine nothing more
                break
            kept = [_narrow(t, filter_) for t in group]
            kept = [t for t in kept if t.changes or t.ddl or t.last_fragment]
            if params.get("skip_drc") == "1" and group[0].drc_originated:
                kept = []
            if kept and not any(t.changes or t.ddl for t in kept):
                kept = []
            out.extend(kept)
            sent += bool(kept)
            next_scn = group[0].scn
        return out, next_scn

    def select_split(
        self, after: SCN, within: int, params: dict[str, str]
    ) -> tuple[list[Transaction], SCN, int]:
        """As the server with ``split=1``: a first transaction with more than ``cut_after``
        records left is cut (the rest of one continued from ``within`` likewise); else
        :meth:`select`. Filtered per record; a continued transaction keeps its last fragment."""
        if within:
            group = [t for t in self.txns if t.scn == after][within:]
            if not group:
                return [], after, 0  # the real server answers 400 here
        else:
            groups = _groups([t for t in self.txns if t.scn > after])
            if not groups or len(groups[0]) <= self.cut_after:
                return (*self.select(after, params), 0)
            group = groups[0]
        taken = group[: self.cut_after]
        filter_ = TableFilter.parse_list(params.get("tables", ""))
        kept = [_narrow(t, filter_) for t in taken]
        kept = [t for t in kept if t.changes or t.ddl or (t.last_fragment and within)]
        if params.get("skip_drc") == "1" and taken[0].drc_originated:
            kept = []
        cut = not taken[-1].last_fragment
        return kept, taken[0].scn, (within + len(taken)) if cut else 0


def _groups(txns: list[Transaction]) -> list[list[Transaction]]:
    groups: list[list[Transaction]] = []
    for t in txns:
        if groups and groups[-1][0].scn == t.scn:
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


def _narrow(t: Transaction, filter_: TableFilter) -> Transaction:
    return dataclasses.replace(
        t, changes=tuple(c for c in t.changes if filter_.matches(c.schema, c.table))
    )


def error(status: int, code: str, message: str, **extra: Any) -> httpx.Response:
    return httpx.Response(status, json={"error": code, "message": message, **extra})
