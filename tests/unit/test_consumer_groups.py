"""Consumer groups' pure model: membership, the Tunnel state machine and the rebalancer."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.api.group_service import GroupService, MemoryGroupStore
from drc.config import DrcConfig, config_problems
from drc.core.consumer_groups import (
    CLOSED,
    CLOSING,
    OPEN,
    GroupSpec,
    GroupState,
    GroupStateError,
)
from drc.core.scn import SCN
from tests.support.config import BASE

TIMEOUT = 10.0


def new(ranges: int = 8) -> GroupState:
    return GroupState.new(GroupSpec("g", ranges=ranges, heartbeat_timeout_s=TIMEOUT))


def settle(state: GroupState, now: float) -> GroupState:
    """Rebalance, every member releasing what it is asked to, until nothing moves."""
    for _ in range(10):
        state = state.rebalance(now)
        for member in list(state.members):
            closing = [r.index for r in state.ranges if r.owner == member and r.state == CLOSING]
            state = state.heartbeat(member, now, closing)
        if state.rebalance(now) == state:
            return state
    raise AssertionError("the rebalance does not settle")


def owned(state: GroupState) -> dict[str, int]:
    counts = {m: 0 for m in state.members}
    for r in state.ranges:
        if r.owner is not None:
            counts[r.owner] += 1
    return counts


def test_members_share_the_ranges_evenly() -> None:
    state = new(8).join("a", 0).rebalance(0)
    assert owned(state) == {"a": 8}
    assert {r.version for r in state.ranges} == {1}
    state = settle(state.join("b", 1).join("c", 1), 1)
    assert sorted(owned(state).values()) == [2, 3, 3]
    assert all(r.state == OPEN for r in state.ranges)


def test_a_range_moves_through_closing_and_closed_with_a_new_version() -> None:
    state = new(2).join("a", 0).rebalance(0).join("b", 0).rebalance(0)
    closing = [r for r in state.ranges if r.state == CLOSING]
    assert len(closing) == 1 and closing[0].owner == "a" and closing[0].version == 1
    state.check_holder("a", closing[0].index, 1)  # still a's until released
    state = state.heartbeat("a", 1, [closing[0].index])
    assert state.ranges[closing[0].index].state == CLOSED
    state = state.rebalance(1)
    moved = state.ranges[closing[0].index]
    assert (moved.owner, moved.state, moved.version) == ("b", OPEN, 2)
    with pytest.raises(GroupStateError) as refused:
        state.check_holder("a", moved.index, 1)
    assert refused.value.status == 409


def test_a_dead_member_loses_its_ranges_at_once() -> None:
    state = settle(new(4).join("a", 0).join("b", 0), 0)
    state = state.heartbeat("a", TIMEOUT + 1).rebalance(TIMEOUT + 1)  # b missed them
    assert list(state.members) == ["a"]
    assert all(r.owner == "a" and r.state == OPEN for r in state.ranges)
    with pytest.raises(GroupStateError) as gone:
        state.heartbeat("b", TIMEOUT + 2)
    assert gone.value.status == 410


def test_commits_move_checkpoints_forward_only_for_the_holder() -> None:
    state = new(2).join("a", 0).rebalance(0)
    state = state.commit("a", 0, 1, SCN(1, 1, 1, 50))
    assert state.commit("a", 0, 1, SCN(1, 1, 1, 10)) is state
    assert state.position(0) == SCN(1, 1, 1, 50)
    with pytest.raises(GroupStateError):
        state.commit("a", 0, 0, SCN(1, 1, 1, 60))
    state = state.leave("a")
    assert state.ranges[0].checkpoint == "1:1:1:50" and state.ranges[0].state == CLOSED
    assert GroupState.from_json(state.to_json()) == state


def test_a_member_that_never_releases_loses_the_range_after_the_timeout() -> None:
    state = new(2).join("a", 0).rebalance(0).join("b", 0).rebalance(0)
    state = state.heartbeat("a", TIMEOUT).heartbeat("b", TIMEOUT)
    state = state.rebalance(TIMEOUT + 1)
    assert owned(state) == {"a": 1, "b": 1}


def test_reset_moves_every_version() -> None:
    state = new(2).join("a", 0).rebalance(0).reset(SCN(2, 1, 1, 4))
    assert [r.version for r in state.ranges] == [2, 2]
    assert state.position(1) == SCN(2, 1, 1, 4)


def test_spec_is_checked() -> None:
    for bad in ({"name": "a b"}, {"name": "g", "ranges": 0}, {"name": "g", "partitioning": "x"}):
        with pytest.raises(GroupStateError):
            GroupSpec(**bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ properties

EVENT = st.one_of(
    st.tuples(st.just("join"), st.integers(0, 5)),
    st.tuples(st.just("leave"), st.integers(0, 5)),
    st.tuples(st.just("beat"), st.integers(0, 5)),
    st.tuples(st.just("release"), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.floats(0, TIMEOUT * 2)),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.lists(EVENT, max_size=40))
def test_rebalance_invariants(count: int, events: list[tuple[str, float]]) -> None:
    state = new(count)
    now = 0.0
    for kind, arg in events:
        member = f"m{int(arg)}"
        before = state
        if kind == "join":
            state = state.join(member, now)
        elif kind == "leave":
            state = state.leave(member)
        elif kind in ("beat", "release") and member in state.members:
            closing = [r.index for r in state.ranges if r.owner == member and r.state == CLOSING]
            state = state.heartbeat(member, now, closing if kind == "release" else [])
        elif kind == "tick":
            now += arg
        dead = {m for m, t in state.members.items() if now - t > TIMEOUT}
        state = state.rebalance(now)
        for old, new_range in zip(before.ranges, state.ranges, strict=True):
            assert new_range.version >= old.version, "versions only grow"
            if new_range.owner != old.owner and new_range.owner is not None:
                assert new_range.version > old.version, "a new owner gets a new version"
        for r in state.ranges:
            assert r.owner is None or r.owner in state.members, "owned by live members only"
            assert r.owner not in dead, "a dead member's ranges move"
            assert (r.owner is None) == (r.state == CLOSED)
    if state.members:
        state = settle(state, now)
        counts = owned(state).values()
        assert sum(counts) == count, "every range is owned"
        assert max(counts) - min(counts) <= 1, "balanced within one"


# ------------------------------------------------------------------------------ from config


def test_config_groups_are_checked_and_created_once_by_the_leader() -> None:
    good = BASE + '[[consumer_groups]]\nname = "orders"\ntables = ["shop.orders"]\nranges = 4\n'
    config = DrcConfig.model_validate(tomllib.loads(good))
    assert config.consumer_groups[0].ranges == 4
    again = good + '[[consumer_groups]]\nname = "orders"\n'
    assert any("unique" in p for p in config_problems(again))
    bad = BASE + '[[consumer_groups]]\nname = "x"\nrows = {"shop.t" = "a ==="}\n'
    assert any("consumer group x" in p for p in config_problems(bad))

    made: list[str] = []

    def spec() -> GroupSpec:
        made.append("orders")
        return GroupSpec("orders", "shop.orders", ranges=4)

    leading = [False]
    groups = GroupService(MemoryGroupStore(), lambda: leading[0], configured=[spec])
    leading[0] = True
    groups.rebalance_all()
    groups.rebalance_all()
    assert groups.names() == ["orders"] and made == ["orders"]
