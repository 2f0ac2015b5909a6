"""A subscriber's row filters (the ``rows`` pull parameter): parsed strictly, applied to the
rows sent, with updates moving a row in or out sent as inserts or deletes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drc.api import pullquery, wire
from drc.api.app import create_app
from drc.api.batching import select
from drc.api.deps import ApiDeps
from drc.api.pullquery import BadQuery, ServerLimits, parse_pull_query
from drc.client.subscriber import Subscriber, _params
from drc.core.codec import encode_transaction
from drc.core.events import Op, RowChange, Transaction
from drc.core.jsonwire import transaction_from_json
from drc.eventbuffer import EventBuffer
from drc.eventbuffer.reader import Record
from tests.support.api import AUTH, TOKEN, TestClient, store, txn

EU = {"shop.customers": "region = 'eu'"}


def _row(id_: int, region: str) -> dict[str, Any]:
    return {"id": id_, "region": region}


def _ins(id_: int, region: str) -> RowChange:
    return RowChange("shop", "customers", Op.INSERT, None, _row(id_, region))


def _upd(id_: int, was: str, now: str) -> RowChange:
    return RowChange("shop", "customers", Op.UPDATE, _row(id_, was), _row(id_, now))


OTHER = RowChange("shop", "orders", Op.INSERT, None, {"id": 9, "note": "x"})
STREAM = [
    txn(1, _ins(1, "eu"), _ins(2, "us"), OTHER),
    txn(2, _upd(2, "us", "eu")),  # moves in
    txn(3, _upd(1, "eu", "us")),  # moves out
    txn(4, _upd(2, "eu", "eu"), _upd(1, "us", "ca")),
]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with EventBuffer.open(tmp_path / "buf") as buf:
        store(buf, *STREAM)
        deps = ApiDeps(
            buffer=buf,
            datacenter="dc1",
            limits=ServerLimits(max_events=1000, max_bytes=1 << 20, max_wait_ms=2000),
            tokens=(TOKEN,),
        )
        yield TestClient(create_app(deps), raise_server_exceptions=False)


def _pull(client: TestClient, **params: Any) -> Any:
    return client.get(wire.PATH_EVENTS, params={"after": "0:0:0:0", **params}, headers=AUTH)


def _changes(body: dict[str, Any]) -> list[tuple[int, str, object]]:
    txns = [transaction_from_json(t) for t in body["transactions"]]
    return [(t.scn.log_pos // 100, c.op.value, c.row["id"]) for t in txns for c in t.changes]


def test_a_pull_with_row_filters_gets_the_rows_they_pass_and_moves_as_inserts_and_deletes(
    client: TestClient,
) -> None:
    response = _pull(client, rows=json.dumps(EU))
    assert response.status_code == 200, response.text
    assert _changes(response.json()) == [
        (1, "insert", 1),
        (1, "insert", 9),  # a table without a predicate: every row
        (2, "insert", 2),  # moved in
        (3, "delete", 1),  # moved out
        (4, "update", 2),
    ]
    records = client.get(
        wire.PATH_EVENTS,
        params={"after": "0:0:0:0", "rows": json.dumps(EU)},
        headers={**AUTH, "Accept": wire.MEDIA_RECORDS},
    )
    assert [t.changes for t in wire.split_records(records.content)] == [
        t.changes for t in map(transaction_from_json, response.json()["transactions"])
    ]


@pytest.mark.parametrize(
    ("rows", "fragment"),
    [
        ("region = 'eu'", "rows must be a JSON object like"),
        ("{}", "rows must be a JSON object like"),
        ('{"shop.customers": 1}', "the predicate must be a string"),
        ('{"customers": "id = 1"}', "rows 'customers'"),
        ('{"shop.customers": "region = "}', "at position 10, got the end"),
        ('{"shop.customers": "region = \'eu\'" ' + " " * 20000 + "}", "more than 16384"),
    ],
)
def test_a_malformed_row_filter_is_a_400_saying_what_is_wrong(
    client: TestClient, rows: str, fragment: str
) -> None:
    response = _pull(client, rows=rows)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["message"]


def test_a_predicate_naming_a_column_the_rows_lack_is_a_400_naming_it(client: TestClient) -> None:
    response = _pull(client, rows=json.dumps({"shop.customers": "regoin = 'eu'"}))
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "'regoin'" in message and "columns: id, region" in message


def _record(t: Transaction) -> Record:
    return Record(t.scn, encode_transaction(t), 0, not t.last_fragment, 0, 0)


def test_a_transaction_of_filtered_tables_is_decoded_and_narrowed() -> None:
    query = parse_pull_query([("after", "0:0:0:0"), ("rows", json.dumps(EU))], ServerLimits())
    assert not query.selection.passes_everything
    (item,) = select([_record(STREAM[1])], query.selection)
    assert item.changed and item.transaction().changes[0].op is Op.INSERT
    assert select([_record(txn(5, _ins(5, "us")))], query.selection) == []
    untouched = _record(txn(6, OTHER))
    (kept,) = select([untouched], query.selection)
    assert kept.record() is untouched.payload  # no predicate for its table: sent as stored


def test_the_sdk_sends_row_filters_as_json_and_checks_them_first() -> None:
    params = _params(None, 10, 100, 0, False, rows=EU)
    assert json.loads(params[pullquery.PARAM_ROWS]) == EU
    with pytest.raises(ValueError, match="position 10"):
        Subscriber("http://127.0.0.1:1", rows={"shop.customers": "region = "})
    with pytest.raises(BadQuery):
        parse_pull_query([("after", "0:0:0:0"), ("rows", "[]")], ServerLimits())
