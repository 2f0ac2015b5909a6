"""A full consumer group's phase (drc.core.group_full): chunks spread over the members, TERMINATED
by their owners' commits, and the incremental ranges held back until every chunk is."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drc.api.group_service import GroupService, MemoryGroupStore
from drc.core.consumer_groups import FULL_PHASE, OPEN, GroupSpec, GroupState, GroupStateError
from drc.core.group_full import (
    CHUNKS_PER_MEMBER,
    TERMINATED,
    ChunkRows,
    FullChunk,
    decode_bound,
    encode_bound,
)
from drc.core.scn import SCN

TIMEOUT = 10.0
START = "1:7:3:400"


def chunks(count: int) -> list[FullChunk]:
    return [FullChunk(i, "shop.orders", ("id",), encode_bound((i * 10,)) if i else None,
                      encode_bound((i * 10 + 10,)) if i < count - 1 else None)
            for i in range(count)]  # fmt: skip


def new(count: int = 6, ranges: int = 4) -> GroupState:
    spec = GroupSpec("g", ranges=ranges, heartbeat_timeout_s=TIMEOUT, start=START, full=True)
    return GroupState.new(spec, chunks(count))


def held(state: GroupState, member: str) -> list[int]:
    return [c["chunk"] for c in state.full_assignment(member)]


def finish(state: GroupState, member: str) -> GroupState:
    """``member`` commits what it holds, and what each commit gives it next."""
    while mine := [c for c in state.chunks if c.held_by(member)]:
        state = state.commit_chunk(member, mine[0].index, mine[0].version)
    return state


def test_chunks_are_spread_and_ranges_wait_for_the_full_phase() -> None:
    state = new(6).join("a", 0).rebalance(0)
    assert held(state, "a") == [0, 1], "a member holds CHUNKS_PER_MEMBER at a time"
    state = state.join("b", 0).rebalance(0)
    assert held(state, "b") == [2, 3], "a member joining later gets the waiting ones"
    assert [c.version for c in state.chunks] == [1, 1, 1, 1, 0, 0]
    assert state.full_running
    assert all(r.owner is None for r in state.ranges)
    assert state.assignment("a") == []
    with pytest.raises(GroupStateError) as refused:
        state.check_holder("a", 0, 0)
    assert refused.value.status == 409 and refused.value.code == FULL_PHASE


def test_ranges_open_after_every_chunk_terminated_and_read_after_the_start() -> None:
    state = new(6).join("a", 0).join("b", 0).rebalance(0)
    state = finish(state, "a").rebalance(1)
    assert state.full_running and all(r.owner is None for r in state.ranges)
    state = finish(state, "b").rebalance(2)
    assert not state.full_running
    assert all(c.state == TERMINATED for c in state.chunks)
    assert all(r.state == OPEN and r.owner in ("a", "b") for r in state.ranges)
    assert {item["checkpoint"] for item in state.assignment("a")} == {START}
    state.check_holder("a", *next((r.index, r.version) for r in state.ranges if r.owner == "a"))


def test_a_stale_or_foreign_commit_of_a_chunk_is_refused() -> None:
    state = new(2).join("a", 0).join("b", 0).rebalance(0)
    mine = state.chunks[held(state, "a")[0]]
    with pytest.raises(GroupStateError) as refused:
        state.commit_chunk("b", mine.index, mine.version)
    assert refused.value.status == 409
    with pytest.raises(GroupStateError):
        state.commit_chunk("a", mine.index, mine.version + 1)
    with pytest.raises(GroupStateError) as missing:
        state.check_chunk("a", 9, 1)
    assert missing.value.status == 404


def test_a_commit_gives_the_member_its_next_chunk_at_once() -> None:
    state = new(3).join("a", 0).rebalance(0).commit_chunk("a", 0, 1)
    assert held(state, "a") == [1, 2]
    assert state.chunks[2].version == 1


def test_a_dead_members_open_chunks_move_with_a_new_version_its_done_ones_stay() -> None:
    state = new(4).join("a", 0).join("b", 0).rebalance(0)
    (done, left), (b_first, _) = held(state, "a"), held(state, "b")
    state = state.commit_chunk("a", done, 1)
    state = state.heartbeat("b", TIMEOUT + 1).rebalance(TIMEOUT + 1)  # a is dead
    assert state.chunks[done].state == TERMINATED
    assert state.chunks[left].owner is None, "b holds its share already: the chunk waits"
    state = state.commit_chunk("b", b_first, 1)
    assert left in held(state, "b")
    assert state.chunks[left].version == 2
    with pytest.raises(GroupStateError):
        state.commit_chunk("a", left, 1)


def test_a_leaving_member_hands_its_chunks_back() -> None:
    state = new(4).join("a", 0).join("b", 0).rebalance(0).leave("a")
    assert all(c.owner in (None, "b") for c in state.chunks)
    state = state.join("c", 1).rebalance(1)
    assert held(state, "c") == [0, 2], "what a held"


def test_the_stored_form_keeps_the_chunks() -> None:
    state = new(3).join("a", 0).rebalance(0)
    state = state.serve_chunk("a", 0, 1, SCN.parse("1:7:3:900"))
    state = state.commit_chunk("a", 0, 1)
    again = GroupState.from_json(state.to_json())
    assert again == state
    assert again.chunks[0].read_at == "1:7:3:900"


def test_an_incremental_group_keeps_its_old_stored_form() -> None:
    state = GroupState.new(GroupSpec("g", ranges=2)).join("a", 0).rebalance(0)
    assert GroupState.from_json(state.to_json()) == state
    assert not state.full_running


def test_bounds_round_trip_through_the_stored_text() -> None:
    bound = (7, "x", b"\x00\xff", Decimal("1.50"), dt.datetime(2026, 1, 2, 3, 4, 5))
    assert decode_bound(encode_bound(bound)) == bound
    assert decode_bound(encode_bound(None)) is None


def test_a_full_spec_refuses_rows() -> None:
    with pytest.raises(GroupStateError) as refused:
        GroupSpec("g", rows={"a.b": "x = 1"}, full=True)
    assert refused.value.status == 400


class Planned:
    def plan(self, spec: GroupSpec) -> list[FullChunk]:
        return chunks(3)

    def read(self, chunk: FullChunk, start: SCN) -> ChunkRows:
        return ChunkRows(start, ["id"], [[chunk.index]])


def test_the_service_plans_a_full_group_and_refuses_one_it_cannot_read() -> None:
    spec = GroupSpec("g", ranges=2, start=START, full=True)
    with pytest.raises(GroupStateError) as refused:
        GroupService(MemoryGroupStore()).create(spec)
    assert refused.value.status == 400
    groups = GroupService(MemoryGroupStore(), full=Planned())
    assert len(groups.create(spec).chunks) == 3
    with pytest.raises(GroupStateError) as exists:
        groups.create(spec)
    assert exists.value.status == 409


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("join beat leave commit tick".split()),
                          st.sampled_from("abc")), max_size=40))  # fmt: skip
def test_no_range_is_handed_out_during_the_full_phase_and_done_chunks_stay_done(
    steps: list[tuple[str, str]],
) -> None:
    state, now, done = new(5, ranges=3), 0.0, set()
    for action, member in steps:
        known = member in state.members
        if action == "join":
            state = state.join(member, now)
        elif action == "beat" and known:
            state = state.heartbeat(member, now)
        elif action == "leave" and known:
            state = state.leave(member)
        elif action == "commit" and known:
            mine = [c for c in state.chunks if c.held_by(member)]
            if mine:
                state = state.commit_chunk(member, mine[0].index, mine[0].version)
                done.add(mine[0].index)
        elif action == "tick":
            now += TIMEOUT / 3
        state = state.rebalance(now)
        assert {c.index for c in state.chunks if c.state == TERMINATED} == done
        if state.full_running:
            assert all(r.owner is None for r in state.ranges)
        holds = {m: held(state, m) for m in state.members}
        assert all(len(h) <= CHUNKS_PER_MEMBER for h in holds.values())
        assert all(c.owner in state.members for c in state.chunks if c.held_by(str(c.owner)))
        if any(c.state == OPEN and c.owner is None for c in state.chunks):
            assert all(len(h) == CHUNKS_PER_MEMBER for h in holds.values()), "work waits"
