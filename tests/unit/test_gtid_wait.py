"""Read your writes: GTID comparison (drc.core.gtid), what a channel has passed
(drc.apply.gtids), which channel answers (drc.apply.gtid_wait) and GET /v1/wait
(drc.api.waits) with a stand-in desk over real trackers (no servers)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.pullquery import ServerLimits
from drc.apply.gtid_wait import GtidWait
from drc.apply.gtids import AppliedGtids
from drc.core.control import ControlError
from drc.core.gtid import Gtid, covers, merged


def g(text: str) -> Gtid:
    return Gtid.parse(text)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------- drc.core.gtid


def test_a_position_covers_its_domain_up_to_its_sequence_whichever_server_wrote_it() -> None:
    pos = {1: g("1-1-10"), 2: g("2-2-5")}
    assert covers(pos, g("1-1-10")) and covers(pos, g("1-1-3"))
    assert covers(pos, g("1-7-9"))  # a failover within the domain: sequence numbers go on
    assert not covers(pos, g("1-1-11"))
    assert not covers(pos, g("3-3-1"))  # a domain it never saw


def test_merged_never_takes_a_domain_back() -> None:
    assert merged({1: g("1-1-10")}, {1: g("1-1-4"), 2: g("2-2-1")}) == {
        1: g("1-1-10"),
        2: g("2-2-1"),
    }


# ---------------------------------------------------------------- drc.apply.gtids


def test_a_gtid_counts_only_once_what_took_it_is_applied() -> None:
    clock = Clock()
    applied = AppliedGtids(clock)
    told: list[int] = []
    applied.listen(lambda: told.append(1))
    applied.taken("1-1-5", None)
    assert applied.passed(g("1-1-5")) is None  # taken into the open group, not committed
    applied.applied()
    passed = applied.passed(g("1-1-5"))
    assert passed is not None and passed.position == g("1-1-5")
    assert told == [1]
    applied.applied()  # nothing taken since: nobody told again
    assert told == [1]


def test_the_newest_position_covers_transactions_never_received() -> None:
    applied = AppliedGtids(Clock())
    applied.taken("1-1-5", None)
    applied.taken("1-1-9", None)  # 6..8 were filtered out at the pull API: passed all the same
    applied.applied()
    assert applied.passed(g("1-1-7")) is not None
    assert applied.passed(g("1-1-10")) is None


def test_a_position_of_several_domains_moves_each() -> None:
    applied = AppliedGtids(Clock())
    applied.taken("1-1-5", "1-1-5,2-2-40")
    applied.applied()
    assert applied.position() == {1: g("1-1-5"), 2: g("2-2-40")}
    assert applied.passed(g("2-2-40")) is not None


def test_records_without_a_gtid_say_nothing() -> None:
    applied = AppliedGtids(Clock())
    applied.taken(None, None)
    applied.applied()
    assert applied.position() == {}


def test_applied_at_is_the_commit_that_passed_it_or_none_when_earlier_than_remembered() -> None:
    clock = Clock()
    applied = AppliedGtids(clock, remember=2)
    for seq, at in ((5, 1001.0), (9, 1002.0), (12, 1003.0)):
        clock.now = at
        applied.taken(f"1-1-{seq}", None)
        applied.applied()
    assert applied.passed(g("1-1-10")).at == 1003.0  # type: ignore[union-attr]
    assert applied.passed(g("1-1-9")).at is None  # type: ignore[union-attr]  # oldest kept
    assert applied.passed(g("1-1-3")).at is None  # type: ignore[union-attr]  # forgotten


# ---------------------------------------------------------------- drc.apply.gtid_wait


def _wait(**channels: AppliedGtids) -> GtidWait:
    return GtidWait({k.replace("_", "-"): v for k, v in channels.items()}, lambda n: "running")


def _at(*texts: str) -> AppliedGtids:
    applied = AppliedGtids(Clock())
    for text in texts:
        applied.taken(text, None)
        applied.applied()
    return applied


def test_the_channel_with_the_domain_answers() -> None:
    wait = _wait(from_dc1=_at("1-1-9"), from_dc3=_at("3-3-2"))
    answer = wait.check([g("1-1-8")])
    assert answer["applied"] and answer["gtids"][0]["channel"] == "from-dc1"
    assert answer["gtids"][0]["position"] == "1-1-9"
    behind = wait.check([g("1-1-8"), g("3-3-7")])
    assert not behind["applied"]
    assert "from-dc3 (running) has applied domain 3 up to 3-3-2, not 3-3-7" in behind["waiting_for"]


def test_a_domain_no_channel_receives_is_404_once_every_channel_knows_its_domains() -> None:
    fresh = _wait(from_dc1=_at("1-1-9"), from_dc3=AppliedGtids(Clock()))
    waiting = fresh.check([g("7-7-1")])  # from-dc3 passed nothing yet: it may be its domain
    assert not waiting["applied"] and "from-dc3" in waiting["waiting_for"]
    known = _wait(from_dc1=_at("1-1-9"), from_dc3=_at("3-3-2"))
    with pytest.raises(ControlError) as caught:
        known.check([g("7-7-1")])
    assert caught.value.status == 404 and "domain 7" in str(caught.value)


def test_a_domain_two_channels_receive_goes_by_server_id_or_must_be_named() -> None:
    wait = _wait(from_dc1=_at("0-1-9"), from_dc3=_at("0-3-4"))
    answer = wait.check([g("0-3-4")])
    assert answer["gtids"][0]["channel"] == "from-dc3"
    with pytest.raises(ControlError) as caught:
        wait.check([g("0-5-1")])
    assert caught.value.status == 400 and "channel=NAME" in str(caught.value)
    named = wait.check([g("0-5-1")], "from-dc1")
    assert named["gtids"][0]["channel"] == "from-dc1"
    with pytest.raises(ControlError) as unknown:
        wait.check([g("0-5-1")], "nope")
    assert unknown.value.status == 404


# ---------------------------------------------------------------- GET /v1/wait


class _Desk:
    def __init__(self, applied: AppliedGtids) -> None:
        self.applied = applied
        self._wait = GtidWait({"from-dc1": applied}, lambda n: "running, lag 0.1s")

    def channels(self) -> list[dict[str, Any]]:
        return [{"name": "from-dc1"}]

    def gtids_applied(self, gtids: Any, channel: str | None) -> dict[str, Any]:
        return self._wait.check(gtids, channel)

    def on_applied(self, listener: Any) -> None:
        self.applied.listen(listener)


@pytest.fixture()
def applied() -> AppliedGtids:
    return _at("1-1-9")


@pytest.fixture()
def client(applied: AppliedGtids) -> TestClient:
    desk = _Desk(applied)
    deps = ApiDeps(buffer=None, desk=lambda: desk, limits=ServerLimits(max_wait_ms=5000))
    return TestClient(create_app(deps))


def test_a_passed_gtid_is_answered_at_once(client: TestClient) -> None:
    answer = client.get("/v1/wait", params={"gtid": "1-1-9", "timeout_ms": "0"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["applied"] and body["gtids"][0]["channel"] == "from-dc1" and "waited_ms" in body


def test_a_gtid_not_passed_in_time_is_408_saying_where_the_channel_is(client: TestClient) -> None:
    answer = client.get("/v1/wait", params={"gtid": "1-1-10", "timeout_ms": "50"})
    assert answer.status_code == 408
    body = answer.json()
    assert body["error"] == "wait_timeout"
    assert "has applied domain 1 up to 1-1-9, not 1-1-10" in body["waiting_for"]


def test_a_commit_meanwhile_answers_the_wait(client: TestClient, applied: AppliedGtids) -> None:
    def commit_later() -> None:
        while not client.app.state.applied._waiters:  # type: ignore[attr-defined]
            threading.Event().wait(0.005)
        applied.taken("1-1-10", None)
        applied.applied()

    committer = threading.Thread(target=commit_later, daemon=True)
    committer.start()
    answer = client.get("/v1/wait", params={"gtid": "1-1-10", "timeout_ms": "5000"})
    committer.join(5)
    assert answer.status_code == 200 and answer.json()["gtids"][0]["position"] == "1-1-10"


@pytest.mark.parametrize(
    ("params", "status", "words"),
    [
        ({}, 400, "gtid is required"),
        ({"gtid": "1-1"}, 400, "not a MariaDB GTID"),
        ({"gtid": "1-1-x"}, 400, "not a MariaDB GTID"),
        ({"gtid": "1-1-1", "timeout_ms": "-1"}, 400, "timeout_ms must be 0..5000"),
        ({"gtid": "1-1-1", "timeout_ms": "5001"}, 400, "[api] max_wait_ms"),
        ({"gtid": "1-1-1", "timeout_ms": "soon"}, 400, "timeout_ms"),
        ({"gtid": ",".join(f"{d}-1-1" for d in range(65))}, 400, "at most 64"),
        ({"gtid": "1-1-1", "channel": "nope"}, 404, "no channel 'nope'"),
    ],
)
def test_bad_requests_are_refused_clearly(
    client: TestClient, params: dict[str, str], status: int, words: str
) -> None:
    answer = client.get("/v1/wait", params=params)
    assert answer.status_code == status
    assert words in answer.json()["message"]


def test_a_process_without_channels_answers_404() -> None:
    client = TestClient(create_app(ApiDeps(buffer=None, desk=lambda: None)))
    answer = client.get("/v1/wait", params={"gtid": "1-1-1"})
    assert answer.status_code == 404 and "runs no apply channels" in answer.json()["message"]
