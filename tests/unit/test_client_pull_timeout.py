"""A pulling reader (``transport = "pull"``) notices a silent link within seconds, as a stream
does, and still waits for a server slow to build its page (issue #27, item 4)."""

from __future__ import annotations

import httpx
import pytest

from drc.client import http
from drc.core.scn import SCN
from tests.support.network import silent_server


def _page(request: httpx.Request) -> httpx.Response:
    body = {"epoch": "e1", "next": str(SCN.ZERO), "newest": None, "transactions": []}
    return httpx.Response(200, json=body, request=request)


def test_a_pull_is_given_up_a_few_seconds_past_its_wait_not_half_a_minute_later() -> None:
    assert http.PullTimeout(200).timeout.read <= 5.0
    assert http.PullTimeout(1000).timeout.read <= 5.0
    assert http.stream_timeout(1000).read <= 5.0  # the stream's, for comparison


def test_the_margin_doubles_after_each_read_timeout_in_a_row_and_resets_on_an_answer() -> None:
    reads: list[float] = []
    silent = [True]

    def handler(request: httpx.Request) -> httpx.Response:
        reads.append(request.extensions["timeout"]["read"])
        if silent[0]:
            raise httpx.ReadTimeout("timed out", request=request)
        return _page(request)

    client = http.make_client(None, httpx.MockTransport(handler))
    pulls = http.PullTimeout(200)
    for _ in range(6):
        with pytest.raises(http.Transient) as failed:
            pulls.get_events(client, "http://r", {}, False, None)
        assert failed.value.timed_out
    silent[0] = False
    pulls.get_events(client, "http://r", {}, False, None)
    pulls.get_events(client, "http://r", {}, False, None)
    margins = [round(read - 0.2, 3) for read in reads]
    assert margins == [3.0, 6.0, 12.0, 24.0, 30.0, 30.0, 30.0, 3.0]


def test_other_failures_leave_the_margin_alone() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "refused":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(503, json={"error": "x", "message": "later"}, request=request)

    client = http.make_client(None, httpx.MockTransport(handler))
    pulls = http.PullTimeout(200)
    for host in ("refused", "busy"):
        with pytest.raises(http.Transient) as failed:
            pulls.get_events(client, f"http://{host}", {}, False, None)
        assert not failed.value.timed_out
    assert pulls.margin_s == http.PULL_MARGIN_S


def test_a_silent_server_times_a_pull_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the SDK's own connections (drc.client.lean), against a server that accepts
    and never answers: the pull ends with a timed-out Transient (the margin made short here
    so the test does not wait seconds)."""
    monkeypatch.setattr(http, "PULL_MARGIN_S", 0.3)
    client = http.make_client(None)
    pulls = http.PullTimeout(100)
    with silent_server() as url, pytest.raises(http.Transient) as failed:
        pulls.get_events(client, url, {}, True, None)
    assert failed.value.timed_out
    assert pulls.margin_s == pytest.approx(0.6)
    http.close_client(client)
