"""The one retry and backoff policy (drc.core.retry), with a fake clock and sleep."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from drc.core.errors import FatalError, RetriableError
from drc.core.retry import Backoff, GaveUp, Policy, Retrying, Stopped, retry
from tests.support.fakes import FakeClock, Script


class Down(RetriableError):
    pass


class Busy(Exception):
    pass


def run(script: Script, *policies: Policy, clock: FakeClock | None = None, **kwargs):  # type: ignore[no-untyped-def]
    clock = clock or FakeClock()
    told: list[Retrying] = []
    result = retry(
        script, *policies, sleep=clock.sleep, clock=clock, on_retry=told.append, **kwargs
    )
    return result, clock.slept, told


def test_delays_double_up_to_the_cap_and_start_over_after_a_reset() -> None:
    delays = Backoff(1.0, 3.0).delays()
    assert [delays.next() for _ in range(4)] == [1.0, 2.0, 3.0, 3.0]
    delays.reset()
    assert delays.next() == 1.0 and delays.failures == 1


def test_a_delay_after_thousands_of_failures_is_the_cap_not_an_overflow() -> None:
    assert Backoff(0.5, 2.0).delay(5000) == 2.0
    assert Backoff(0.5, 2.0, factor=10).delay(10**6) == 2.0


def test_a_cap_below_the_initial_delay_caps_it() -> None:
    assert Backoff(5.0, 2.0).delay(1) == 2.0


@given(
    initial=st.floats(0, 10),
    cap=st.floats(0, 100),
    factor=st.floats(1, 10),
    jitter=st.floats(0, 1),
    draws=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=40),
)
def test_delays_stay_within_the_cap_and_grow_until_jittered(
    initial: float, cap: float, factor: float, jitter: float, draws: list[float]
) -> None:
    plain = Backoff(initial, cap, factor)
    jittered = Backoff(initial, cap, factor, jitter)
    previous = 0.0
    for n, draw in enumerate(draws, start=1):
        delay = plain.delay(n)
        assert previous <= delay <= cap
        assert delay * (1 - jitter) - 1e-9 <= jittered.delay(n, lambda d=draw: d) <= delay
        previous = delay


def test_invalid_backoffs_and_policies_are_refused() -> None:
    for args in [(-1.0, 2.0), (1.0, 2.0, 0.5), (1.0, 2.0, 2.0, 1.5)]:
        with pytest.raises(ValueError):
            Backoff(*args)
    with pytest.raises(ValueError, match="attempts"):
        Policy(Backoff(1, 2), attempts=0)


def test_retriable_errors_are_retried_with_backoff_until_the_call_succeeds() -> None:
    script = Script(Down("a"), Down("b"), Down("c"))
    result, slept, told = run(script, Policy(Backoff(0.1, 0.3)))
    assert result == "done" and script.calls == 4
    assert slept == pytest.approx([0.1, 0.2, 0.3])
    assert [(str(t.error), t.failures) for t in told] == [("a", 1), ("b", 2), ("c", 3)]
    assert str(told[0]) == "Down: a; retry 1 in 0.1s"


def test_other_errors_propagate_at_once_without_a_wait() -> None:
    for error in (ValueError("bug"), FatalError("stop")):
        script = Script(error)
        with pytest.raises(type(error)):
            run(script, Policy(Backoff(1, 2)))
        assert script.calls == 1


def test_exception_types_or_a_predicate_say_what_is_retriable() -> None:
    by_type = Policy(Backoff(1, 1), retriable=(Busy, OSError))
    by_test = Policy(Backoff(1, 1), retriable=lambda e: "again" in str(e))
    assert run(Script(Busy(), ConnectionError()), by_type)[0] == "done"
    assert run(Script(ValueError("try again")), by_test)[0] == "done"
    with pytest.raises(Down):
        run(Script(Down("not listed")), by_type)


def test_attempts_limit_the_calls_then_give_up_naming_the_last_error() -> None:
    script = Script(*[Down(str(n)) for n in range(10)])
    with pytest.raises(GaveUp, match="Down: 2; still failing after 3 attempts") as info:
        run(script, Policy(Backoff(1, 4), attempts=3))
    assert script.calls == 3 and info.value.failures == 3
    assert info.value.last is info.value.__cause__ and str(info.value.last) == "2"


def test_a_deadline_gives_up_before_a_wait_that_would_pass_it() -> None:
    script = Script(*[Down("x")] * 10)
    with pytest.raises(GaveUp, match="within 5s"):
        run(script, Policy(Backoff(1, 10), deadline_s=5))
    assert script.calls == 3  # waited 1 and 2; the third wait (4) would end at 7 s


def test_each_policy_counts_its_own_failures() -> None:
    conflict = Policy(Backoff(0.05, 2), retriable=(Busy,), attempts=3)
    down = Policy(Backoff(0.5, 2), retriable=(Down,))
    script = Script(Busy(), Down("1"), Down("2"), Busy(), Down("3"))
    result, slept, told = run(script, conflict, down)
    assert result == "done"
    assert slept == [0.05, 0.5, 1.0, 0.1, 2.0]
    assert [t.policy is conflict for t in told] == [True, False, False, True, False]


def test_the_first_matching_policy_applies() -> None:
    first = Policy(Backoff(1, 1), retriable=(Busy,))
    second = Policy(Backoff(9, 9), retriable=(Exception,))
    assert run(Script(Busy()), first, second)[1] == [1]


def test_a_stop_before_or_during_the_wait_ends_the_loop_after_the_retry_is_told() -> None:
    told: list[Retrying] = []
    with pytest.raises(Stopped):
        retry(Script(Down("x")), Policy(Backoff(1, 1)), sleep=told.append, stopped=lambda: True,
              on_retry=told.append)  # fmt: skip
    assert [t.failures for t in told] == [1]  # told, never slept
    clock = FakeClock()
    with pytest.raises(Stopped):
        run(Script(Down("x"), Down("y")), Policy(Backoff(1, 1)), clock=clock,
            stopped=lambda: bool(clock.slept))  # fmt: skip
    assert clock.slept == [1]


def test_jitter_takes_a_random_part_off_each_delay() -> None:
    policy = Policy(Backoff(1.0, 8.0, jitter=0.5))
    _, slept, _ = run(Script(Down("a"), Down("b")), policy, draw=lambda: 0.5)
    assert slept == [0.75, 1.5]
