"""The in-memory fake of the pull API (tests/support/fake_api.py) keeps the server contract."""

from __future__ import annotations

import json

import httpx

from drc.api import wire
from drc.core.scn import SCN
from tests.support.fake_api import FakeApi, stream


def test_fake_serves_whole_transactions_and_moves_next_past_filtered_ones() -> None:
    txns = stream(6, ("db.t", "db.u", "other.x"))
    api = FakeApi(txns)
    batch, next_scn = api.select(SCN.zero(), {"tables": "db.u", "max_events": "1"})
    assert [t.scn for t in batch] == [txns[1].scn] and next_scn == txns[1].scn
    batch, next_scn = api.select(txns[4].scn, {"tables": "db.u"})
    assert batch == [] and next_scn == txns[5].scn


def test_fake_answers_json_and_records_with_the_same_metadata() -> None:
    api = FakeApi(stream(3))
    with httpx.Client(transport=api.transport) as client:
        j = client.get("http://a/v1/events", params={"after": "0:0:0:0"})
        r = client.get(
            "http://a/v1/events",
            params={"after": "0:0:0:0"},
            headers={"Accept": wire.MEDIA_RECORDS},
        )
    assert json.loads(j.content)["next"] == r.headers[wire.HEADER_NEXT]
    assert len(wire.split_records(r.content)) == 3
