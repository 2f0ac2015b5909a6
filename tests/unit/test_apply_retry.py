"""Retry policy and commit grouping, with a fake clock."""

from __future__ import annotations

import pytest

from drc.apply.group import IDLE_CHECKPOINT_BYTES, Group, GroupLimits, worth_saving
from drc.apply.retry import RetryPolicy, Stopped, call_with_retries
from drc.core.target_errors import (
    LockConflictError,
    RetriesExhaustedError,
    TargetFullError,
    TargetReadOnlyError,
    TargetUnavailableError,
)
from drc.mysql.errors import Kind, classify, translate
from tests.support.apply_fakes import ins, scn, txn
from tests.support.fakes import Script


@pytest.mark.parametrize(
    ("code", "kind"),
    [(1213, Kind.LOCK_CONFLICT), (1205, Kind.LOCK_CONFLICT), (2003, Kind.UNAVAILABLE),
     (2006, Kind.UNAVAILABLE), (2013, Kind.UNAVAILABLE), (0, Kind.UNAVAILABLE),
     (1290, Kind.READ_ONLY), (1836, Kind.READ_ONLY), (1114, Kind.FULL), (1021, Kind.FULL),
     (1146, Kind.FATAL), (None, Kind.FATAL)],
)  # fmt: skip
def test_error_codes_are_classified(code: int | None, kind: Kind) -> None:
    assert classify(code) is kind


def test_backoff_doubles_up_to_its_cap() -> None:
    policy = RetryPolicy(conflict_initial_s=0.1, conflict_max_s=0.5, wait_initial_s=1, wait_max_s=3)
    assert [policy.conflict_delay(n) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert [policy.wait_delay(n) for n in range(1, 5)] == [1, 2, 3, 3]


def run(script: Script, policy: RetryPolicy, stop_after: int | None = None):  # type: ignore[no-untyped-def]
    slept: list[float] = []
    recovered: list[BaseException] = []
    notes: list[Kind] = []
    result = call_with_retries(
        script,
        policy,
        recover=recovered.append,
        sleep=slept.append,
        stopped=lambda: stop_after is not None and len(slept) >= stop_after,
        note=lambda kind, exc, delay: notes.append(kind),
    )
    return result, slept, recovered, notes


def test_lock_conflicts_are_retried_with_backoff_then_succeed() -> None:
    script = Script(LockConflictError("deadlock", 1213), LockConflictError("wait", 1205))
    result, slept, recovered, notes = run(script, RetryPolicy(retries=2))
    assert result == "done" and script.calls == 3
    assert slept == [0.05, 0.1] and len(recovered) == 2
    assert notes == [Kind.LOCK_CONFLICT, Kind.LOCK_CONFLICT]


def test_lock_conflicts_beyond_the_limit_are_fatal() -> None:
    script = Script(*[LockConflictError("deadlock", 1213) for _ in range(4)])
    with pytest.raises(RetriesExhaustedError, match="after 3 retries") as info:
        run(script, RetryPolicy(retries=3))
    assert info.value.code == 1213 and script.calls == 4


def test_unavailable_and_read_only_targets_are_waited_for_without_limit() -> None:
    errors = [TargetUnavailableError("down")] * 30 + [TargetReadOnlyError("ro")] * 5
    result, slept, _, notes = run(Script(*errors), RetryPolicy(retries=0))
    assert result == "done" and len(slept) == 35 and max(slept) == RetryPolicy().wait_max_s <= 2
    assert notes.count(Kind.READ_ONLY) == 5


def test_a_full_target_is_waited_for_without_limit() -> None:
    full = translate(pymysql_like(1114, "The table 't' is full"), "applying SCN 1:1:1:4")
    assert isinstance(full, TargetFullError) and "space is freed" in str(full)
    assert isinstance(translate(pymysql_like(1021, "Disk full"), "committing"), TargetFullError)
    result, slept, _, notes = run(Script(*[full] * 40), RetryPolicy(retries=0))
    assert result == "done" and len(slept) == 40 and notes == [Kind.FULL] * 40


def pymysql_like(code: int, text: str) -> Exception:
    """An error shaped as the driver raises them: (code, message)."""
    return Exception(code, text)


def test_a_stop_request_ends_the_wait() -> None:
    with pytest.raises(Stopped):
        run(Script(*[TargetUnavailableError("down")] * 10), RetryPolicy(), stop_after=2)


def test_other_errors_are_not_retried() -> None:
    script = Script(ValueError("bug"))
    with pytest.raises(ValueError):
        run(script, RetryPolicy())
    assert script.calls == 1


def test_group_is_full_by_transactions_or_bytes() -> None:
    limits = GroupLimits(max_txns=2, max_bytes=1000, max_delay_s=0.5)
    group = Group()
    one = txn(10, ins("t", id=1, v="x" * 10))
    group.add(one, now=0.0)
    group.finished(one, wrote=True)
    assert not group.full(limits) and group.bytes == 8 + 8 + 10  # two values, one string
    group.add(txn(11, ins("t", id=2)), now=0.1)
    group.finished(txn(11), wrote=True)
    assert group.full(limits) and group.checkpoint == scn(11)
    assert GroupLimits(max_txns=100, max_bytes=10).max_bytes <= Group(bytes=10).bytes


def test_group_is_due_after_its_delay() -> None:
    limits = GroupLimits(max_delay_s=0.5)
    group = Group()
    assert not group.due(limits, 100.0) and group.remaining_s(limits, 100.0) is None
    group.add(txn(10, ins("t", id=1)), now=100.0)
    assert group.remaining_s(limits, 100.2) == pytest.approx(0.3)
    assert not group.due(limits, 100.4) and group.due(limits, 100.5)


def test_group_position_moves_past_filtered_batches_and_survives_clear() -> None:
    group = Group(checkpoint=scn(5))
    group.finished(txn(10), wrote=False)
    group.consumed(scn(20), "e1")
    group.consumed(scn(15), "e1")  # never backwards
    group.clear()
    assert (group.checkpoint, group.epoch, group.writes) == (scn(20), "e1", False)


def test_idle_checkpoint_moves_only_across_a_real_distance() -> None:
    assert not worth_saving(scn(100), scn(100))
    assert not worth_saving(scn(100), scn(50))
    assert not worth_saving(scn(100), scn(100 + IDLE_CHECKPOINT_BYTES - 1))
    assert worth_saving(scn(100), scn(100 + IDLE_CHECKPOINT_BYTES))
    assert worth_saving(scn(100), scn(4, index=2))
