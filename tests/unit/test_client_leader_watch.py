"""A reader of a ``zk://`` group follows a leadership change at once (issue 24, items 1-2):
the change hangs up what waits on the old leader and the next request goes to the new one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from drc.client import http
from drc.client.discovery import DataChanges
from drc.client.fetcher import Fetcher
from drc.core.scn import SCN
from tests.support.fake_api import FakeApi, stream
from tests.support.network import silent_server

GROUP = "zk://zk:2181/drc/dc1"


class FakeWatch:
    """drc.client.discovery.LeaderWatch as the test drives it."""

    made: list[FakeWatch] = []

    def __init__(self, spec: str, on_change: Callable[[], None]) -> None:
        self.spec = spec
        self.on_change = on_change
        self.members = ["http://a", "http://b"]
        self.closed = False
        FakeWatch.made.append(self)

    def urls(self) -> list[str]:
        return list(self.members)

    def close(self) -> None:
        self.closed = True


def fetcher(transport: httpx.BaseTransport | None = None, wait_ms: int = 1000) -> Fetcher:
    FakeWatch.made.clear()
    return Fetcher(
        [GROUP],
        http.make_client(None, transport),
        {"max_events": "100"},
        token=None,
        binary=True,
        wait_ms=wait_ms,
        on_rebuild="raise",
        backoff_initial=0.01,
        backoff_max=0.05,
        sleep=None,
        watch=FakeWatch,
    )


def test_a_new_leader_is_read_from_next_although_the_old_one_still_answers() -> None:
    api = FakeApi(stream(3))
    f = fetcher(api.transport)
    assert f.urls == ("http://a", "http://b")
    url, _page = f.fetch(SCN.ZERO, threading.Event())
    assert url == "http://a"
    watch = FakeWatch.made[0]
    watch.members = ["http://b", "http://a"]  # b took office
    watch.on_change()
    url, _page = f.fetch(SCN.ZERO, threading.Event())
    assert url == "http://b"
    f.close()
    assert watch.closed


@pytest.fixture
def silent() -> Iterator[str]:
    with silent_server() as url:
        yield url


def test_a_leadership_change_hangs_up_a_pull_waiting_on_a_silent_leader(silent: str) -> None:
    client = http.make_client(None)
    _hang_up_a_pull(client, silent + "/v1/events", 60.0)
    http.close_client(client)


def test_a_leadership_change_ends_a_stream_from_a_silent_leader_at_once(silent: str) -> None:
    f = fetcher()
    watch = FakeWatch.made[0]
    watch.members = [silent]
    f._rediscover()  # noqa: SLF001 (the silent server leads)
    got: list[object] = []
    f_thread = threading.Thread(target=lambda: got.append(_fetch_or_error(f)))
    f_thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    watch.members = ["http://127.0.0.1:9"]  # a new leader (not listening: fails fast)
    watch.on_change()
    time.sleep(0.3)
    assert f.last_errors, "the request to the silent leader was hung up"
    assert f.current_url == "http://127.0.0.1:9"
    assert time.monotonic() - started < 2
    f.close()
    f_thread.join(5)


def _fetch_or_error(f: Fetcher) -> object:
    cancel = threading.Event()
    threading.Timer(1.5, cancel.set).start()
    try:
        return f.fetch(SCN.ZERO, cancel)
    except BaseException as exc:
        return exc


def test_the_stream_read_timeout_follows_the_heartbeat_not_a_long_margin() -> None:
    assert http.stream_timeout(1000).read <= 5.0
    assert http.stream_timeout(300).read <= 2.5


@pytest.fixture
def answers_once() -> Iterator[str]:
    with silent_server(first_reply=b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") as url:
        yield url


def test_a_request_hung_up_by_a_leadership_change_is_not_tried_again_on_a_new_connection(
    answers_once: str,
) -> None:
    """A kept-alive connection the server closed is reopened once, transparently; one the
    reader hung up itself (the leader changed) is not: the retry would wait on the old
    leader for its whole timeout (a 10 s failover in one of ten pauses)."""
    client = http.make_client(None)
    http.send(client, answers_once + "/v1/history", {}, "*/*", httpx.Timeout(30.0), None)
    _hang_up_a_pull(client, answers_once + "/v1/history", 30.0)
    http.close_client(client)


def _hang_up_a_pull(client: httpx.Client, url: str, timeout_s: float) -> None:
    """A request to ``url`` waiting in a thread ends at once with Transient when the client's
    requests are hung up (what a leadership change does), and is not sent again."""
    got: list[BaseException] = []

    def pull() -> None:
        try:
            http.send(client, url, {}, "*/*", httpx.Timeout(timeout_s), None)
        except BaseException as exc:
            got.append(exc)

    thread = threading.Thread(target=pull)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    http.abort_requests(client)
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 2, "not hung up, or tried again"
    assert isinstance(got[0], http.Transient)


def test_a_data_watch_tells_each_change_after_the_first_reading_until_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    told: list[str] = []
    ended = threading.Event()

    def on_change() -> None:
        told.append("changed")
        if len(told) == 2:
            raise RuntimeError("a handler's bug")

    watch = DataChanges(on_change, ended.is_set, "the test's handler")
    assert watch(b"a", None) and told == []  # the first reading is no change
    assert watch(b"a", None) and told == []
    assert watch(None, None) and len(told) == 1  # deleted
    assert watch(b"b", None) and len(told) == 2  # created; the handler's bug is only logged
    assert "the test's handler failed" in caplog.text
    ended.set()
    assert not watch(b"c", None) and len(told) == 2  # ends the watch
