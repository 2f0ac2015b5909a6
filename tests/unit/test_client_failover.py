"""The Subscriber's failover, backoff, epochs and error answers, against the fake API."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from drc.client import (
    ApiAuthError,
    ApiRequestError,
    ApiUnavailableError,
    BufferRebuiltError,
    PositionTooOldError,
    Subscriber,
)
from drc.client.subscriber import RECONNECT_MAX_S
from drc.core.errors import FatalError, RetriableError, ScnTooOldError
from drc.core.scn import SCN
from tests.support.fake_api import FakeApi, error, stream
from tests.support.fakes import FakeClock

A, B = "http://a", "http://b"
TOKEN = "s3cret-token-value"


class Sleeps(list[float]):
    """A fake sleep that records each delay and returns at once."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def subscriber(api: FakeApi, urls: tuple[str, ...] = (A, B), **kwargs: Any) -> Subscriber:
    kwargs.setdefault("sleep", Sleeps())
    return Subscriber(list(urls), transport=api.transport, **kwargs)


def too_old(oldest: str) -> Any:
    return lambda request: error(410, "scn_too_old", "retention", oldest=oldest)


def test_a_connection_error_fails_over_to_the_next_url_without_sleeping() -> None:
    api = FakeApi(stream(3))
    api.fail("a", "connect")
    sleeps = Sleeps()
    with subscriber(api, sleep=sleeps) as sub:
        batch = sub.get(timeout=5)
    assert batch.url == B and batch.transactions == tuple(stream(3))
    assert sleeps == []


def test_each_failed_round_sleeps_twice_as_long_up_to_the_maximum() -> None:
    api = FakeApi(stream(3))
    api.fail("a", "connect", "connect", "connect", "connect")
    api.fail("b", 503, 500, 502, 503)
    sleeps = Sleeps()
    with subscriber(api, sleep=sleeps, backoff_initial=1.0, backoff_max=3.0) as sub:
        batch = sub.get(timeout=5)
    assert sleeps == [1.0, 2.0, 3.0, 3.0]
    assert batch.url == A  # round-robin came back to the first URL
    assert [s.host for s in api.events_seen()][:9] == ["a", "b"] * 4 + ["a"]


def test_a_replicator_that_comes_back_is_pulled_again_within_a_few_seconds() -> None:
    api = FakeApi(stream(3))
    api.fail("a", *["connect"] * 12)  # down for a long while
    sleeps = Sleeps()
    with subscriber(api, urls=(A,), sleep=sleeps) as sub:
        batch = sub.get(timeout=5)
    assert batch.transactions == tuple(stream(3))
    assert len(sleeps) == 12 and max(sleeps) == RECONNECT_MAX_S <= 3


def test_the_backoff_starts_over_after_a_success() -> None:
    api = FakeApi(stream(4))
    api.fail("a", "connect", "connect")
    sleeps = Sleeps()
    with subscriber(api, urls=(A,), sleep=sleeps, max_events=2, prefetch=False) as sub:
        sub.ack(sub.get(timeout=5))
        api.fail("a", 503)
        sub.get(timeout=5)
    assert sleeps == [0.2, 0.4, 0.2]


def test_the_url_that_answers_is_kept_for_the_next_batches() -> None:
    api = FakeApi(stream(6))
    api.fail("a", "connect")
    with subscriber(api, max_events=2) as sub:
        for _ in range(3):
            batch = sub.get(timeout=5)
            assert batch.url == B
            sub.ack(batch)


def test_get_times_out_naming_each_url_and_its_last_failure() -> None:
    api = FakeApi(stream(3))
    api.fail("a", *["connect"] * 10_000)
    api.fail("b", *[503] * 10_000)
    with subscriber(api, sleep=lambda s: time.sleep(0.001)) as sub:
        with pytest.raises(ApiUnavailableError) as caught:
            sub.get(timeout=0.3)
    err = caught.value
    assert isinstance(err, RetriableError)
    assert set(err.errors) == {A, B}
    assert "Connection refused" in str(err) and "HTTP 503" in str(err)
    assert "Check the URLs" in str(err)


def test_a_get_that_timed_out_picks_up_the_retrying_fetch_later() -> None:
    api = FakeApi(stream(3))
    api.fail("a", *["connect"] * 50)
    with subscriber(api, urls=(A,), sleep=lambda s: time.sleep(0.002)) as sub:
        with pytest.raises(ApiUnavailableError):
            sub.get(timeout=0.01)
        assert sub.get(timeout=5).transactions == tuple(stream(3))


def test_the_epoch_is_sent_only_to_the_url_that_gave_it() -> None:
    api = FakeApi(stream(6))
    with subscriber(api, max_events=1, prefetch=False) as sub:
        sub.ack(sub.get(timeout=5))  # from a: learns a's epoch
        api.fail("a", "connect")
        sub.ack(sub.get(timeout=5))  # from b: no epoch sent, learns b's
        api.fail("b", "connect")
        sub.ack(sub.get(timeout=5))  # back on a with a's epoch
    sent = [(s.host, s.params.get("epoch")) for s in api.events_seen()]
    assert sent == [("a", None), ("a", "epoch-a"), ("b", None), ("b", "epoch-b"), ("a", "epoch-a")]


def test_a_rebuilt_buffer_raises_and_the_app_may_accept_it() -> None:
    txns = stream(4)
    api = FakeApi(txns)
    with subscriber(api, urls=(A,), max_events=2, prefetch=False) as sub:
        first = sub.get(timeout=5)
        sub.ack(first)
        api.epochs["a"] = "rebuilt"
        with pytest.raises(BufferRebuiltError) as caught:
            sub.get(timeout=5)
        err = caught.value
        assert (err.url, err.expected, err.current, err.after) == (
            A,
            "epoch-a",
            "rebuilt",
            first.next,
        )
        assert "accept_rebuilt_buffer()" in str(err) and isinstance(err, FatalError)
        with pytest.raises(BufferRebuiltError):  # it does not go away by itself
            sub.get(timeout=5)
        sub.accept_rebuilt_buffer()
        batch = sub.get(timeout=5)
    assert batch.after == first.next and batch.transactions == tuple(txns[2:])
    assert batch.epoch == "rebuilt"


def test_on_rebuild_continue_drops_the_epoch_and_goes_on_from_the_same_scn() -> None:
    txns = stream(4)
    api = FakeApi(txns)
    with subscriber(api, urls=(A,), max_events=2, prefetch=False, on_rebuild="continue") as sub:
        first = sub.get(timeout=5)
        sub.ack(first)
        api.epochs["a"] = "rebuilt"
        batch = sub.get(timeout=5)
        sub.ack(batch)
        sub.get(timeout=5)
    assert batch.after == first.next and batch.transactions == tuple(txns[2:])
    sent = [(s.params["after"], s.params.get("epoch")) for s in api.events_seen()]
    assert sent[1:] == [
        (str(first.next), "epoch-a"),
        (str(first.next), None),
        (str(batch.next), "rebuilt"),
    ]


def test_too_old_on_one_url_fails_over_to_another() -> None:
    api = FakeApi(stream(3))
    api.fail("a", too_old("1:7:1:900"))
    with subscriber(api) as sub:
        assert sub.get(timeout=5).url == B


@pytest.mark.parametrize("urls", [(A,), (A, B)])
def test_too_old_everywhere_raises_with_the_oldest_scn(urls: tuple[str, ...]) -> None:
    api = FakeApi(stream(3))
    api.fail("a", too_old("1:7:1:900"))
    api.fail("b", too_old("1:7:1:500"))
    with subscriber(api, urls=urls) as sub, pytest.raises(PositionTooOldError) as caught:
        sub.get(timeout=5)
    err = caught.value
    assert isinstance(err, ScnTooOldError)
    assert err.oldest == SCN.parse("1:7:1:900") and err.after == SCN.zero()
    assert "does not skip ahead" in str(err)
    assert len(api.events_seen()) == len(urls)


def test_400_raises_at_once_with_the_servers_message_and_no_retry() -> None:
    api = FakeApi(stream(3))
    api.fail("a", lambda r: error(400, "bad_request", "tables: pattern 'x' must look like db.t"))
    with subscriber(api, token=TOKEN) as sub, pytest.raises(ApiRequestError) as caught:
        sub.get(timeout=5)
    err = caught.value
    assert (err.status, err.code) == (400, "bad_request")
    assert "pattern 'x' must look like db.t" in str(err) and A in str(err)
    assert len(api.events_seen()) == 1


def test_401_raises_at_once_saying_to_pass_the_token_and_never_showing_it() -> None:
    api = FakeApi(stream(3), token="the-right-one")
    api.fail("a", lambda r: error(401, "unauthorized", f"bad token {TOKEN}"))  # a careless server
    with subscriber(api, token=TOKEN) as sub:
        with pytest.raises(ApiAuthError) as caught:
            sub.get(timeout=5)
        text = f"{caught.value} {caught.value!r} {sub!r} {caught.value.server_message}"
    assert "--token" in text and "DRC_TOKEN" in text
    assert TOKEN not in text
    assert len(api.events_seen()) == 1


def test_the_token_is_sent_as_a_bearer_header() -> None:
    api = FakeApi(stream(3), token=TOKEN)
    with subscriber(api, token=TOKEN) as sub:
        sub.get(timeout=5)
    assert api.events_seen()[0].auth == f"Bearer {TOKEN}"


def test_a_transport_error_message_carries_no_token() -> None:
    api = FakeApi(stream(3))
    api.fail("a", *["connect"] * 10_000)
    with subscriber(api, urls=(A,), token=TOKEN, sleep=lambda s: time.sleep(0.001)) as sub:
        with pytest.raises(ApiUnavailableError) as caught:
            sub.get(timeout=0.1)
    assert TOKEN not in str(caught.value) and TOKEN not in repr(caught.value.errors)


def test_a_5xx_with_a_non_json_body_is_still_transient() -> None:
    api = FakeApi(stream(3))
    api.fail("a", lambda r: httpx.Response(502, text="<html>bad gateway</html>"))
    with subscriber(api) as sub:
        assert sub.get(timeout=5).url == B


def test_a_slow_answer_times_out_without_blaming_a_failure() -> None:
    api = FakeApi(stream(3))
    api.delay_s = 0.3
    with subscriber(api, urls=(A,)) as sub:
        with pytest.raises(ApiUnavailableError, match="server slow") as caught:
            sub.get(timeout=0.02)
        assert caught.value.errors == {}
        assert sub.get(timeout=5).transactions == tuple(stream(3))


# -- the server's long-poll limit (429 / 503 with Retry-After) ---------------------------------


def busy(status: int, retry_after: str = "2") -> Any:
    code = "too_many_long_polls" if status == 429 else "long_polls_full"

    def answer(request: httpx.Request) -> httpx.Response:
        response = error(status, code, "this token already holds 200 waiting long polls")
        response.headers["Retry-After"] = retry_after
        return response

    return answer


@pytest.mark.parametrize("status", [429, 503])
def test_a_refused_long_poll_is_retried_at_once_without_waiting_on_the_same_url(
    status: int,
) -> None:
    api = FakeApi(stream(3))
    api.fail("a", busy(status))
    sleeps = Sleeps()
    with subscriber(api, sleep=sleeps, wait_ms=5000, prefetch=False) as sub:
        batch = sub.get(timeout=5)
    assert batch.url == A and batch.transactions == tuple(stream(3))
    assert sleeps == [], "no back-off before the pull that does not wait"
    waits = [s.params["wait_ms"] for s in api.events_seen("a")]
    assert waits[:2] == ["5000", "-1"] and api.events_seen("b") == []


def test_while_refused_empty_answers_pause_briefly_then_long_polls_resume() -> None:
    api = FakeApi([])
    api.fail("a", busy(503, retry_after="3"))
    sleeps, clock = Sleeps(), FakeClock()
    options: dict[str, Any] = {"wait_ms": 1000, "backoff_initial": 0.25, "prefetch": False}
    with subscriber(api, urls=(A,), sleep=sleeps, clock=clock, **options) as sub:
        first = sub.get(timeout=5)
        sub.ack(first)
        clock.now += 1.0  # still within Retry-After: another pull that does not wait
        sub.ack(sub.get(timeout=5))
        clock.now += 2.5  # past it: a long poll again
        sub.ack(sub.get(timeout=5))
    assert [s.params["wait_ms"] for s in api.events_seen("a")] == ["1000", "-1", "-1", "1000"]
    assert sleeps == [0.25, 0.25], "one short pause per empty answer while refused"


def test_refused_even_without_waiting_backs_off_and_never_raises() -> None:
    api = FakeApi(stream(2))
    api.fail("a", busy(429), busy(429), busy(503))
    sleeps = Sleeps()
    with subscriber(api, urls=(A,), sleep=sleeps, backoff_initial=0.5) as sub:
        batch = sub.get(timeout=5)
    assert batch.transactions == tuple(stream(2))
    assert sleeps and all(0 < s <= 10 for s in sleeps), "a back-off, not a tight loop"


def memory_full(retry_after: str) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        response = error(503, "reader_memory_full", "readers hold all of its reader memory")
        response.headers["Retry-After"] = retry_after
        return response

    return answer


def test_a_server_out_of_reader_memory_is_asked_again_after_its_retry_after() -> None:
    api = FakeApi(stream(2))
    api.fail("a", memory_full("4"), memory_full("4"))
    api.fail("b", 503)  # no Retry-After: the back-off alone
    sleeps = Sleeps()
    with subscriber(api, sleep=sleeps, backoff_initial=0.5, backoff_max=8.0) as sub:
        batch = sub.get(timeout=5)
    assert batch.transactions == tuple(stream(2))
    assert sleeps == [4.0], "the round's longest Retry-After, over the 0.5 s back-off"


def test_a_read_that_timed_out_counts_the_silence_since_the_last_answer() -> None:
    """A silent link is noticed when a read times out (up to wait_ms + 30 s on pulls): the
    error says how long nothing answered, not how long since that timeout."""
    api = FakeApi(stream(4))
    clock = FakeClock(100.0)

    def silent_for_30_s(request: httpx.Request) -> httpx.Response:
        clock.now += 30.0
        raise httpx.ReadTimeout("timed out", request=request)

    with subscriber(api, urls=(A,), clock=clock, max_events=2, prefetch=False,
                    sleep=lambda s: time.sleep(0.001)) as sub:  # fmt: skip
        sub.ack(sub.get(timeout=5))  # answered at 100
        api.fail("a", silent_for_30_s, *["connect"] * 10_000)
        with pytest.raises(ApiUnavailableError, match=r"no API URL answered for 30\.0s"):
            sub.get(timeout=0.3)
