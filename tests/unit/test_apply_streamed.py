"""A large source transaction written into one open target transaction piece by piece
(drc.apply.streamed; the piece's size: drc.apply.group), against a scripted target."""

from __future__ import annotations

import pymysql
import pytest

from drc.apply import group as group_module
from drc.apply.group import Group, GroupLimits
from drc.core.scn import SCN
from drc.core.target_errors import ApplyError
from tests.support.apply_fakes import Harness, batch, ins, scn, target, txn


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_module, "STREAM_PIECE_ROWS", 2)


def fragments(position: int, count: int, rows_each: int = 1) -> list:  # type: ignore[type-arg]
    return [
        txn(position, *(ins("t", id=100 * f + r) for r in range(rows_each)), fragment=f,
            last_fragment=f == count - 1)
        for f in range(count)
    ]  # fmt: skip


def test_a_piece_is_due_once_the_unfinished_transaction_holds_its_size() -> None:
    group = Group()
    group.add(txn(10, ins("t", id=1)), 0.0)
    group.finished(txn(10), wrote=True)
    group.add(txn(20, ins("t", id=2), fragment=0, last_fragment=False), 0.0)
    assert not group.piece_due(scn(20), GroupLimits())  # one row of the unfinished one
    group.add(txn(20, ins("t", id=3), fragment=1, last_fragment=False), 0.0)
    assert group.piece_due(scn(20), GroupLimits())
    assert group.piece_due(scn(20), GroupLimits(max_bytes=1)) and not group.piece_due(
        scn(10), GroupLimits(max_bytes=10**9)
    )  # the tail is the unfinished transaction's alone
    taken = group.take_tail(scn(20))
    assert [t.fragment for t in taken] == [0, 1]
    assert [t.scn for t in group.transactions] == [scn(10)] and group.rows == 1


def test_a_large_transaction_is_written_in_pieces_and_committed_once_with_its_checkpoint() -> None:
    fake = target()
    big = fragments(20, 6)
    channel = Harness(fake, [batch(1, txn(10, ins("t", id=1)), *big, newest=scn(20))]).run()
    # The transaction before it committed on its own, then the large one in ONE transaction.
    assert [m[1] for m in fake.marks()] == ["1:11:1:10", "1:11:1:20"]
    writes = [s for s in fake.committed[1] if "`checkpoint`" not in s]
    assert len(writes) == 3  # three pieces of two fragments, each written as it came
    assert "VALUES (0), (100)" in writes[0] and "VALUES (400), (500)" in writes[2]
    stats = channel.stats
    assert (stats.transactions, stats.rows, stats.commits) == (2, 7, 2)


def test_a_small_fragmented_transaction_still_waits_for_its_group() -> None:
    fake = target()
    Harness(fake, [batch(1, txn(10, ins("t", id=1)), *fragments(20, 1), newest=scn(20))]).run()
    assert len(fake.committed) == 1  # no piece was due: one group, as before


def test_a_failure_after_the_first_piece_rolls_back_and_takes_the_transaction_again() -> None:
    fake = target()
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
    fake.fail_once(lambda sql: "VALUES (200), (300)" in sql, deadlock)
    harness = Harness(fake, [batch(1, *fragments(20, 6), newest=scn(20))])
    channel = harness.run()
    assert fake.rollbacks >= 1
    # Subscribed again after the checkpoint, before the transaction, and applied it whole once.
    assert harness.started_after == SCN.zero()
    assert [m[1] for m in fake.marks()] == ["1:11:1:20"]
    rows = [s for s in fake.committed[0] if "`checkpoint`" not in s]
    assert len(rows) == 3 and channel.stats.rows == 6 and channel.stats.retries == 1


def test_a_failed_commit_of_the_last_piece_takes_the_transaction_again() -> None:
    fake = target()
    fake.fail_once(lambda sql: sql == "COMMIT", pymysql.err.OperationalError(1205, "Lock"))
    channel = Harness(fake, [batch(1, *fragments(20, 4), newest=scn(20))]).run()
    assert len(fake.committed) == 1 and len(fake.committed[0]) == 3  # two pieces + checkpoint
    assert channel.stats.rows == 4 and channel.stats.transactions == 1


def test_a_rejected_change_stops_the_channel_at_the_large_transaction_with_nothing_applied() -> (
    None
):
    fake = target()
    rejected = pymysql.err.DataError(1406, "Data too long for column 'v'")
    fake.fail_once(lambda sql: "VALUES (200), (300)" in sql, rejected)
    fake.fail_once(
        lambda sql: sql.startswith("INSERT INTO `db`") and "(200)" in sql, rejected
    )  # the one-by-one fallback too
    fake.fail_once(lambda sql: sql.startswith("INSERT INTO `db`") and "(200)" in sql, rejected)
    harness = Harness(fake, [batch(1, *fragments(20, 6), newest=scn(20))])
    with pytest.raises(ApplyError) as caught:
        harness.run()
    assert fake.committed == [] and "from-dc1" not in fake.checkpoints
    stoppage = caught.value.stoppage
    assert stoppage is not None and stoppage.scn == scn(20)  # type: ignore[attr-defined]
