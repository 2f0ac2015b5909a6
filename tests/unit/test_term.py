"""Leadership terms, the leader's lease and the buffer's fence (drc.core.term, fencing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drc.core.errors import FencedError
from drc.core.scn import SCN
from drc.core.term import Lease, check_append, check_records, next_term
from drc.eventbuffer import EventBuffer
from drc.replicator.fencing import GroupBuffer, TermFile


def test_terms_strictly_increase() -> None:
    assert next_term(0) == 1
    assert next_term(41) == 42
    with pytest.raises(ValueError):
        next_term(-1)


def test_an_append_under_an_older_term_is_refused() -> None:
    check_append(3, 3)
    check_append(3, 4)
    with pytest.raises(FencedError, match="term 2 refused.*term 3"):
        check_append(3, 2)


def test_a_follower_refuses_records_of_a_deposed_leader() -> None:
    check_records(5, 5, 4)
    check_records(6, 5, 5)  # a newer leader than the one we knew: fine
    with pytest.raises(FencedError, match="term 6 leads now"):
        check_records(5, 6, 4)  # the old leader, woken, still serving
    with pytest.raises(FencedError, match="older|already holds"):
        check_records(4, 4, 5)  # older than what our own buffer holds
    with pytest.raises(FencedError, match="without a term"):
        check_records(None, 1, 0)


def test_the_lease_runs_from_the_confirmed_request_for_a_fraction_of_the_timeout() -> None:
    lease = Lease(session_timeout_s=4.0, fraction=0.5)
    assert not lease.valid(0.0)  # never confirmed
    lease.confirmed(sent_at=10.0)
    assert lease.valid(11.9)
    assert not lease.valid(12.0)  # 10 + 0.5 * 4
    assert "not confirmed" in (lease.why_not(12.5) or "")
    lease.confirmed(sent_at=9.0)  # a late answer to an older request never shortens it
    assert lease.until == 12.0


def test_a_paused_leader_wakes_up_without_a_lease() -> None:
    lease = Lease(session_timeout_s=2.0)
    lease.confirmed(sent_at=100.0)
    assert lease.valid(100.5)
    # SIGSTOP for 5 s: the monotonic clock moved on, the lease is gone before any request.
    assert not lease.valid(105.5)


def test_a_revoked_lease_never_comes_back() -> None:
    lease = Lease(session_timeout_s=2.0)
    lease.confirmed(sent_at=0.0)
    lease.revoke("its ZooKeeper session expired")
    lease.confirmed(sent_at=0.5)
    assert not lease.valid(0.6)
    assert lease.why_not(0.6) == "its ZooKeeper session expired"


def test_the_lease_fraction_leaves_a_margin() -> None:
    with pytest.raises(ValueError):
        Lease(1.0, fraction=1.0)


def test_the_term_file_only_moves_forward(tmp_path: Path) -> None:
    terms = TermFile(tmp_path)
    assert terms.term == 0
    terms.raise_to(3)
    assert TermFile(tmp_path).term == 3  # durable
    terms.raise_to(3)
    with pytest.raises(FencedError):
        terms.raise_to(2)
    assert TermFile(tmp_path).term == 3


def test_a_fenced_buffer_is_left_untouched(tmp_path: Path) -> None:
    buffer = GroupBuffer(lambda: EventBuffer.open(tmp_path / "buf", fsync="never"))
    scn = SCN(1, 1, 1, 100)
    buffer.append(scn, b"x", 0)
    buffer.commit()
    before = {p.name: p.read_bytes() for p in (tmp_path / "buf").iterdir() if p.is_file()}

    def deposed() -> None:
        raise FencedError("deposed")

    buffer.fence = deposed
    with pytest.raises(FencedError):
        buffer.append(SCN(1, 1, 1, 200), b"y", 0)
    with pytest.raises(FencedError):
        buffer.commit()
    buffer.close()
    after = {p.name: p.read_bytes() for p in (tmp_path / "buf").iterdir() if p.is_file()}
    assert after == before


def test_a_lease_that_runs_out_during_the_commit_leaves_the_files_as_they_were(
    tmp_path: Path,
) -> None:
    """The check-then-act gap of a paused leader: the fence allowed the commit to begin, the
    process stopped (SIGSTOP, a long pause) before the records were written, and the lease
    ran out meanwhile. The fence is asked again once they are written: nothing is visible and
    the files are cut back, so the old leader's buffer is unchanged (issue 24, item 5)."""
    buffer = GroupBuffer(lambda: EventBuffer.open(tmp_path / "buf", fsync="never"))
    buffer.append(SCN(1, 1, 1, 100), b"x", 0)
    buffer.commit()
    before = {p.name: p.read_bytes() for p in (tmp_path / "buf").iterdir() if p.is_file()}
    asked = []

    def lease_runs_out_mid_commit() -> None:
        asked.append(1)
        if len(asked) > 2:  # the append's and the commit's first check pass
            raise FencedError("lease ran out 30.3s ago")

    buffer.fence = lease_runs_out_mid_commit
    buffer.append(SCN(1, 1, 1, 200), b"y", 0)
    with pytest.raises(FencedError):
        buffer.commit()
    assert buffer.last_scn == SCN(1, 1, 1, 100)
    after = {p.name: p.read_bytes() for p in (tmp_path / "buf").iterdir() if p.is_file()}
    assert after == before
    buffer.reopen()
    assert buffer.last_scn == SCN(1, 1, 1, 100)
    buffer.close()


def test_reopen_drops_what_was_appended_but_not_committed(tmp_path: Path) -> None:
    buffer = GroupBuffer(lambda: EventBuffer.open(tmp_path / "buf", fsync="never"))
    buffer.append(SCN(1, 1, 1, 100), b"x", 0)
    buffer.commit()
    buffer.append(SCN(1, 1, 1, 200), b"y", 0)
    assert buffer.uncommitted
    buffer.reopen()
    assert not buffer.uncommitted
    assert buffer.last_scn == SCN(1, 1, 1, 100)
    buffer.append(SCN(1, 1, 1, 200), b"y", 0)  # capture reads it again
    buffer.commit()
    assert buffer.last_scn == SCN(1, 1, 1, 200)
    buffer.close()
