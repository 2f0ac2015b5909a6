"""The HTTP API in process (FastAPI TestClient over a real EventBuffer and MetaStore)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.pullquery import ServerLimits
from drc.core.codec import encode_transaction
from drc.core.events import Column, TableSchema, Transaction
from drc.core.jsonwire import transaction_from_json
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.metastore.store import MetaStore
from tests.support.api import (
    AUTH,
    STREAM,
    TOKEN,
    TestClient,
    ins,
    parse_prometheus,
    scn,
    store,
    txn,
)

RECORDS = {**AUTH, "Accept": wire.MEDIA_RECORDS}


@pytest.fixture
def buffer(tmp_path: Path) -> Iterator[EventBuffer]:
    with EventBuffer.open(tmp_path / "buf") as buf:
        store(buf, *STREAM)
        yield buf


@pytest.fixture
def deps(buffer: EventBuffer) -> ApiDeps:
    return ApiDeps(
        buffer=buffer,
        datacenter="dc1",
        source="db1.example:3306",
        limits=ServerLimits(max_events=1000, max_bytes=1 << 20, max_wait_ms=2000),
        tokens=("other-token", TOKEN),
    )


@pytest.fixture
def client(deps: ApiDeps) -> TestClient:
    return TestClient(create_app(deps), raise_server_exceptions=False)


def events(client: TestClient, headers: dict[str, str] = AUTH, **params: Any) -> Any:
    return client.get(wire.PATH_EVENTS, params={"after": "0:0:0:0", **params}, headers=headers)


def both_forms(client: TestClient, **params: Any) -> tuple[dict[str, Any], list[Transaction]]:
    as_json = events(client, **params)
    as_records = events(client, RECORDS, **params)
    assert as_json.status_code == as_records.status_code == 200
    body = as_json.json()
    txns = [transaction_from_json(t) for t in body["transactions"]]
    assert wire.split_records(as_records.content) == txns, "both forms carry the same batch"
    assert as_records.headers["content-type"] == wire.MEDIA_RECORDS
    assert as_records.headers[wire.HEADER_NEXT] == body["next"]
    assert as_records.headers[wire.HEADER_EPOCH] == body["epoch"]
    assert as_records.headers[wire.HEADER_NEWEST] == body["newest"]
    assert as_records.headers[wire.HEADER_COUNT] == str(len(txns))
    return body, txns


# -- /v1/events ------------------------------------------------------------------------------


def test_without_a_filter_every_record_is_served_as_stored(client: TestClient) -> None:
    body, txns = both_forms(client)
    assert txns == STREAM
    assert body["next"] == body["newest"] == str(scn(7))


def test_a_filtered_pull_keeps_matching_rows_ddl_and_closing_fragments(client: TestClient) -> None:
    _, txns = both_forms(client, tables="shop.orders")
    shape = [(t.scn.log_pos, t.fragment, len(t.changes), len(t.ddl)) for t in txns]
    assert shape == [(100, 0, 1, 0), (300, 0, 1, 0), (300, 2, 0, 0), (400, 0, 0, 1), (500, 0, 1, 0)]


def test_skip_drc_drops_what_drc_applied(client: TestClient) -> None:
    _, txns = both_forms(client, tables="shop.orders", skip_drc=1)
    assert scn(5) not in [t.scn for t in txns]


def test_next_moves_on_when_nothing_matches(client: TestClient) -> None:
    body, txns = both_forms(client, tables="nobody.*")
    assert txns == [] and body["next"] == str(scn(7))


def test_batches_resume_from_next_without_gaps_or_repeats(client: TestClient) -> None:
    seen: list[Transaction] = []
    after = "0:0:0:0"
    for _ in range(10):
        body, txns = both_forms(client, after=after, max_events=2)
        assert len({t.scn for t in txns}) <= 2
        seen += txns
        after = body["next"]
    assert seen == STREAM


def test_limits_above_the_servers_are_clamped(deps: ApiDeps) -> None:
    deps.limits = ServerLimits(max_events=2, max_bytes=1 << 20, max_wait_ms=10)
    client = TestClient(create_app(deps))
    _, txns = both_forms(client, max_events=1_000_000, max_bytes=10**15)
    assert len({t.scn for t in txns}) == 2


def test_a_long_poll_over_http_is_woken_by_a_commit(
    client: TestClient, buffer: EventBuffer
) -> None:
    threading.Timer(0.2, store, (buffer, txn(8, ins("orders", 8)))).start()
    start = time.monotonic()
    body = events(client, after=str(scn(7)), wait_ms=1900).json()
    took = time.monotonic() - start
    assert [t["scn"] for t in body["transactions"]] == [str(scn(8))]
    assert 0.15 < took < 1.0


# -- errors ----------------------------------------------------------------------------------


def assert_error(response: Any, status: int, code: str, *fragments: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["error"] == code and isinstance(body["message"], str)
    for fragment in fragments:
        assert fragment in body["message"]
    assert "Traceback" not in response.text and 'File "' not in response.text
    return body


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"after": "1:2"}, "SCN text '1:2' has 2 field(s)"),
        ({"after": " 0:0:0:0"}, "surrounding whitespace"),
        ({"tables": "orders"}, "must look like db.table"),
        ({"max_events": "ten"}, "max_events must be a decimal integer"),
        ({"wait_ms": "-5"}, "wait_ms must be >= -1"),
        ({"bogus": "1"}, "unknown parameter 'bogus'"),
    ],
)
def test_malformed_parameters_get_400_saying_what_is_wrong(
    client: TestClient, params: dict[str, str], fragment: str
) -> None:
    assert_error(events(client, **params), 400, wire.ERROR_BAD_REQUEST, fragment)


def test_an_scn_older_than_the_buffer_gets_410_with_the_oldest(tmp_path: Path) -> None:
    with EventBuffer.open(tmp_path / "b", base_scn=scn(10)) as buffer:
        store(buffer, txn(11, ins("orders", 1)))
        client = TestClient(create_app(ApiDeps(buffer=buffer)))
        body = assert_error(events(client, {}, after=str(scn(2))), 410, wire.ERROR_SCN_TOO_OLD)
        assert body["oldest"] == str(scn(10))


def test_a_foreign_epoch_gets_409_with_the_current_one(
    client: TestClient, buffer: EventBuffer
) -> None:
    body = assert_error(events(client, epoch="0123abcd"), 409, wire.ERROR_EPOCH_MISMATCH)
    assert body["epoch"] == buffer.epoch
    assert events(client, epoch=buffer.epoch).status_code == 200


def test_an_unexpected_error_is_a_generic_500_logged_on_the_server(deps: ApiDeps) -> None:
    class Broken:
        epoch = "e"
        last_scn = None

        def read_after(self, *args: object, **kw: object) -> list[Any]:
            raise RuntimeError("password=hunter2 leaked from a driver")

    deps.buffer = Broken()
    logged: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = logged.append  # type: ignore[method-assign]
    logging.getLogger("drc.api").addHandler(handler)
    try:
        response = events(TestClient(create_app(deps), raise_server_exceptions=False))
    finally:
        logging.getLogger("drc.api").removeHandler(handler)
    assert_error(response, 500, wire.ERROR_INTERNAL, "the server logged the details")
    assert "hunter2" not in response.text
    assert logged and logged[0].exc_info is not None


def test_unknown_paths_and_methods_get_json_errors(client: TestClient) -> None:
    assert_error(client.get("/v2/nothing", headers=AUTH), 404, wire.ERROR_NOT_FOUND)
    assert client.post(wire.PATH_EVENTS, headers=AUTH).status_code == 405
    assert "error" in client.post(wire.PATH_EVENTS, headers=AUTH).json()


@pytest.mark.parametrize(
    "path", [wire.PATH_STATUS + "/", wire.PATH_EVENTS + "/?after=0:0:0:0", "/healthz/", "/ui/"]
)
def test_a_trailing_slash_is_404_never_a_redirect_built_from_the_host_header(
    client: TestClient, path: str
) -> None:
    headers = {**AUTH, "Host": "evil.example"}
    response = client.get(path, headers=headers, follow_redirects=False)
    assert response.status_code == 404 and "location" not in response.headers
    assert_error(response, 404, wire.ERROR_NOT_FOUND)


# -- auth ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [wire.PATH_EVENTS + "?after=0:0:0:0", wire.PATH_STATUS, "/metrics"]
)
def test_a_missing_or_wrong_token_gets_401_with_www_authenticate(
    client: TestClient, path: str
) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {TOKEN}"}):
        response = client.get(path, headers=headers)
        assert_error(response, 401, wire.ERROR_UNAUTHORIZED)
        assert response.headers["www-authenticate"].startswith('Bearer realm="drc"')
    assert client.get(path, headers=AUTH).status_code == 200
    assert client.get(path, headers={"Authorization": "Bearer other-token"}).status_code == 200


def test_tokens_are_compared_in_constant_time_against_every_token(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import drc.api.deps as deps_module

    calls: list[tuple[bytes, bytes]] = []
    real = deps_module.hmac.compare_digest
    monkeypatch.setattr(
        deps_module.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b)
    )
    assert client.get(wire.PATH_STATUS, headers={"Authorization": "Bearer other-token"}).is_success
    assert len(calls) == 2, "no early exit after the first (matching) token"


def test_healthz_is_open_and_without_tokens_everything_is(buffer: EventBuffer) -> None:
    client = TestClient(create_app(ApiDeps(buffer=buffer)))
    assert client.get(wire.PATH_HEALTH).json() == {"status": "ok"}
    assert events(client, {}).status_code == 200


def test_records_refused_with_q0_are_never_sent(client: TestClient) -> None:
    response = events(client, {**AUTH, "Accept": f"{wire.MEDIA_RECORDS};q=0"})
    body = assert_error(
        response, 406, wire.ERROR_NOT_ACCEPTABLE, wire.MEDIA_JSON, wire.MEDIA_RECORDS
    )
    assert body["offered"] == [wire.MEDIA_JSON, wire.MEDIA_RECORDS]
    as_json = events(client, {**AUTH, "Accept": f"{wire.MEDIA_RECORDS};q=0, */*;q=0.5"})
    assert as_json.status_code == 200 and as_json.headers["content-type"] == wire.MEDIA_JSON
    wildcard = events(client, {**AUTH, "Accept": f"*/*;q=0.5, {wire.MEDIA_RECORDS}"})
    assert wildcard.headers["content-type"] == wire.MEDIA_RECORDS
    wire.split_records(wildcard.content)


def test_inputs_echoed_in_errors_are_cut(client: TestClient) -> None:
    long = "x" * 5000
    cases = [
        events(client, {**AUTH, "Accept": "text/" + long}),
        events(client, tables=long),
        events(client, after=long),
        events(client, max_events=long),
        client.get("/" + long, headers=AUTH),
        client.get(f"{wire.PATH_SCHEMA}/shop/{long}", headers=AUTH),
    ]
    for response in cases:
        assert 400 <= response.status_code < 500, response.text
        message = response.json()["message"]
        assert len(message) < 500 and "x" * 201 not in message, response.text[:300]


# -- status, schema, metrics, health ---------------------------------------------------------


def test_status_reports_buffer_position_lag_and_capture(deps: ApiDeps, buffer: EventBuffer) -> None:
    class Stats:
        transactions, rows, bytes, commits, filtered_out, reconnects = 9, 12, 3400, 2, 1, 0
        source_position = (1, 700)
        last_error = None

    deps.capture_stats = Stats
    deps.wall_clock = lambda: 1_700_000_010.5
    body = TestClient(create_app(deps)).get(wire.PATH_STATUS, headers=AUTH).json()
    assert body["role"] == "leader" and body["datacenter"] == "dc1"
    assert body["source"] == "db1.example:3306"
    assert body["buffer"]["epoch"] == buffer.epoch and body["buffer"]["records"] == len(STREAM)
    assert body["buffer"]["first_scn"] == str(scn(1)) and body["buffer"]["last_scn"] == str(scn(7))
    assert body["source_position"] == {"log_index": 1, "log_pos": 700}
    assert body["lag"] == {"seconds": 3.5, "caught_up": True}  # newest commit at ...007
    assert body["capture"]["transactions"] == 9 and body["capture"]["failed"] is None


def test_schema_lookup_by_scn(deps: ApiDeps, tmp_path: Path) -> None:
    with MetaStore.open(tmp_path / "meta.sqlite3") as meta:
        v1 = TableSchema("shop", "orders", (Column("id", "int", False),), ("id",))
        v2 = TableSchema("shop", "orders", (*v1.columns, Column("x", "int", True)), ("id",))
        meta.record_schema(scn(1), v1)
        meta.record_schema(scn(4), v2)
        deps.metastore = meta
        client = TestClient(create_app(deps))
        get = lambda path, **p: client.get(wire.PATH_SCHEMA + path, params=p, headers=AUTH)  # noqa: E731
        newest = get("/shop/orders").json()
        assert newest["since"] == str(scn(4)) and [c["name"] for c in newest["columns"]] == [
            "id",
            "x",
        ]
        old = get("/shop/orders", scn=str(scn(3))).json()
        assert old["since"] == str(scn(1)) and old["primary_key"] == ["id"]
        assert_error(
            get("/shop/orders", scn=str(SCN.ZERO)), 404, wire.ERROR_NOT_FOUND, "shop.orders"
        )
        assert_error(
            get("/shop/nope"), 404, wire.ERROR_NOT_FOUND, "no schema recorded for 'shop.nope'"
        )
        assert_error(get("/shop/orders", scn="x"), 400, wire.ERROR_BAD_REQUEST, "scn:")


def test_metrics_are_prometheus_text(client: TestClient) -> None:
    events(client)
    events(client, after="bad")
    response = client.get("/metrics", headers=AUTH)
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = parse_prometheus(response.text)
    assert families["drc_buffer_records"] == [("", len(STREAM))]
    assert families["drc_api_long_poll_waiters"] == [("", 0)]
    assert families["drc_api_long_polls"] == [("", 0)]
    requests = dict(families["drc_api_requests_total"])
    assert requests['method="GET",route="/v1/events",status="200"'] == 1
    assert requests['method="GET",route="/v1/events",status="400"'] == 1
    assert families["drc_up"] == [("", 1)]


def test_healthz_is_503_when_the_buffer_is_closed_or_capture_failed(deps: ApiDeps) -> None:
    client = TestClient(create_app(deps))
    assert client.get(wire.PATH_HEALTH).status_code == 200
    deps.capture_failure = lambda: RuntimeError("binlog purged")
    failed = assert_error(client.get(wire.PATH_HEALTH, headers=AUTH), 503, wire.ERROR_UNAVAILABLE)
    assert "binlog purged" in failed["message"] and failed["state"] == "capture_failed"
    deps.capture_failure = None
    deps.buffer.close()
    closed = assert_error(client.get(wire.PATH_HEALTH), 503, wire.ERROR_UNAVAILABLE, "closed")
    assert closed["state"] == "buffer_closed" and closed["error_type"] == "BufferStateError"


SECRET_DETAIL = "db1.internal:3306 refused user 'repl' on shop.payroll"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + TOKEN}]
)
def test_healthz_without_a_valid_token_tells_state_and_type_but_not_the_detail(
    deps: ApiDeps, headers: dict[str, str]
) -> None:
    deps.capture_failure = lambda: PermissionError(SECRET_DETAIL)
    client = TestClient(create_app(deps))
    response = client.get(wire.PATH_HEALTH, headers=headers)
    body = assert_error(response, 503, wire.ERROR_UNAVAILABLE, "capture stopped")
    assert body["state"] == "capture_failed" and body["error_type"] == "PermissionError"
    for part in ("db1.internal", "repl", "payroll"):
        assert part not in response.text
    assert "/v1/status" in body["message"], "says where the detail is"
    with_token = client.get(wire.PATH_HEALTH, headers=AUTH).json()
    assert SECRET_DETAIL in with_token["message"] and with_token["state"] == "capture_failed"
    deps.capture_stats = object
    status = client.get(wire.PATH_STATUS, headers=AUTH).json()
    assert SECRET_DETAIL in status["capture"]["failed"]
    assert client.get(wire.PATH_STATUS).status_code == 401


def test_a_closed_buffer_on_healthz_hides_its_path_without_a_token(
    deps: ApiDeps, tmp_path: Path
) -> None:
    deps.buffer.close()
    response = TestClient(create_app(deps)).get(wire.PATH_HEALTH)
    assert_error(response, 503, wire.ERROR_UNAVAILABLE, "closed", "BufferStateError")
    assert str(tmp_path) not in response.text


def test_requests_against_a_closed_buffer_never_leak_a_trace(deps: ApiDeps) -> None:
    deps.buffer.close()
    client = TestClient(create_app(deps), raise_server_exceptions=False)
    for response in (events(client), client.get(wire.PATH_STATUS, headers=AUTH)):
        assert response.status_code >= 500 and "Traceback" not in response.text
        json.loads(response.text)


def test_an_older_scn_is_served_from_the_source_and_a_silent_source_is_a_503(
    tmp_path: Path,
) -> None:
    from drc.core.errors import SourceUnavailableError
    from drc.eventbuffer.reader import Record

    # The source's transactions up to the buffer's start, which ends with a marker.
    source = [txn(5, ins("orders", 9)), txn(10)]
    answers: list[Any] = [[Record(t.scn, encode_transaction(t), 0, False, -1, 0) for t in source]]

    def backfill(after: Any, oldest: Any, *_limits: int) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with EventBuffer.open(tmp_path / "b", base_scn=scn(10)) as buffer:
        store(buffer, txn(11, ins("orders", 1)))
        client = TestClient(create_app(ApiDeps(buffer=buffer, back_to_source=backfill)))
        served = events(client, {}, after=str(scn(2)), wait_ms=-1)
        assert served.status_code == 200
        got = [t["scn"] for t in served.json()["transactions"]]
        assert got == [str(scn(5)), str(scn(10)), str(scn(11))]  # then the buffer's
        answers.append(SourceUnavailableError("db1 down"))
        busy = assert_error(events(client, {}, after=str(scn(2))), 503, wire.ERROR_UNAVAILABLE)
        assert "db1" not in busy["message"]
