"""The channel loop against a scripted target and subscriber: grouping, checkpoints, DDL,
retries and waits, with a fake clock and sleep."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pymysql
import pytest

from drc.apply.channel import ApplyChannel
from drc.apply.control import Request, Stoppage
from drc.core.errors import FatalError
from drc.core.events import SchemaChange
from drc.core.target_errors import (
    ApplyError,
    CheckpointMismatchError,
    NoPrimaryKeyError,
    RetriesExhaustedError,
)
from tests.support.apply_fakes import FakeTarget, Harness, batch, dele, ins, scn, target, txn, upd


def test_batches_up_to_caught_up_are_one_target_transaction_with_the_checkpoint() -> None:
    fake = target()
    batches = [
        batch(1, txn(10, ins("t", id=1, v="a")), txn(20, ins("t", id=2, v="b")), newest=scn(40)),
        batch(2, txn(30, upd("t", {"id": 1, "v": None}, id=1, v="b")), txn(40, dele("t", id=2)),
              after=scn(20), newest=scn(40)),
    ]  # fmt: skip
    channel = Harness(fake, batches).run()
    assert len(fake.committed) == 1
    statements = fake.committed[0]
    assert statements[0].startswith("INSERT INTO `db`.`t` (`id`, `v`) VALUES (1, 'a'), (2, 'b')")
    assert statements[1] == "UPDATE `db`.`t` SET `id` = 1, `v` = 'b' WHERE `id` = 1"
    assert statements[2] == "DELETE FROM `db`.`t` WHERE `id` = 2"
    assert statements[3].startswith("INSERT INTO `drc`.`checkpoint`")
    assert fake.checkpoints["from-dc1"] == ("1:11:1:40", "dc1", "epoch-1", None)
    stats = channel.stats
    assert (stats.transactions, stats.rows, stats.commits, stats.last_scn) == (4, 4, 1, scn(40))
    report = channel.report()
    assert report["lag_seconds"] == pytest.approx(60.0) and report["state"] == "running"


def test_every_session_is_pinned_and_marked_as_drc() -> None:
    fake = target()
    connections: list[Any] = []

    def connect(**kwargs: Any) -> Any:
        assert kwargs["client_flag"] & pymysql.constants.CLIENT.FOUND_ROWS
        assert kwargs["binary_prefix"] is True
        connections.append(fake.connect(**kwargs))
        return connections[-1]

    harness = Harness(fake, [batch(1, txn(10, ins("t", id=1)))])
    harness.channel.target._connect = connect  # type: ignore[attr-defined]
    harness.run()
    assert connections[0].session == [
        "SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', "
        "time_zone = '+00:00', skip_replication = 1, @drc_apply = 1"
    ]


def test_group_closes_at_max_txns_but_never_inside_a_fragmented_transaction() -> None:
    fake = target()
    frag = [txn(20, ins("t", id=i), fragment=i, last_fragment=i == 2) for i in range(3)]
    batches = [batch(1, txn(10, ins("t", id=10)), *frag, txn(30, ins("t", id=30)), newest=scn(30))]
    Harness(fake, batches, max_txns_per_commit=2).run()
    assert [m[1] for m in fake.marks()] == ["1:11:1:20", "1:11:1:30"]
    first = [s for s in fake.committed[0] if "`checkpoint`" not in s]
    assert len(first) == 1 and "VALUES (10), (0), (1), (2)" in first[0]  # fragments together


def test_it_resumes_after_the_checkpoint_row_and_skips_replayed_transactions() -> None:
    fake = target(checkpoints={"from-dc1": ("1:11:1:20", "dc1", "e0", None)})
    harness = Harness(fake, [batch(1, txn(20, ins("t", id=1)), txn(30, ins("t", id=3)))])
    channel = harness.run()
    assert harness.started_after == scn(20)
    assert [w.split(" ON ")[0] for w in fake.writes()] == ["INSERT INTO `db`.`t` (`id`) VALUES (3)"]
    assert channel.stats.skipped == 1 and channel.stats.transactions == 1


def test_a_restart_in_the_middle_of_a_replay_still_knows_the_rewind_window() -> None:
    # Rewound from 1:11:1:50 to 1:11:1:20, then restarted: up to 50 is still a replay.
    rewinds = ['{"from": "1:11:1:50", "to": "1:11:1:20"}', '{"from": "1:11:1:15", "to": "0:0:0:0"}']
    fake = target(checkpoints={"from-dc1": ("1:11:1:20", "dc1", "e0", None)}, rewinds=rewinds)
    channel = Harness(fake, [batch(1, txn(30, ins("t", id=3)))]).run()
    assert channel.control.is_replay(scn(50)) and not channel.control.is_replay(scn(51))


def test_a_finished_replay_is_no_window_after_a_restart() -> None:
    rewinds = ['{"from": "1:11:1:50", "to": "1:11:1:20"}']
    fake = target(checkpoints={"from-dc1": ("1:11:1:60", "dc1", "e0", None)}, rewinds=rewinds)
    channel = Harness(fake, [batch(1, txn(70, ins("t", id=3)))]).run()
    assert channel.control.replay_until is None


def test_a_checkpoint_of_another_origin_is_refused() -> None:
    fake = target(checkpoints={"from-dc1": ("1:11:1:20", "dc9", None, None)})
    with pytest.raises(CheckpointMismatchError, match="origin 'dc9'"):
        Harness(fake, []).run()


def test_deadlock_rolls_back_and_reapplies_the_whole_group() -> None:
    fake = target()
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")
    fake.fail_once(lambda sql: sql.startswith("DELETE"), deadlock)
    harness = Harness(fake, [batch(1, txn(10, ins("t", id=1)), txn(20, dele("t", id=5)))])
    channel = harness.run()
    assert fake.rollbacks >= 1 and harness.slept == [0.05]
    assert len(fake.committed) == 1 and len(fake.writes()) == 2
    assert channel.stats.retries == 1 and channel.stats.transactions == 2


def test_lock_conflicts_beyond_retries_stop_the_channel_without_moving_the_checkpoint() -> None:
    fake = target()
    for _ in range(3):
        fake.fail_once(lambda sql: sql == "COMMIT", pymysql.err.OperationalError(1205, "Lock"))
    harness = Harness(fake, [batch(1, txn(10, ins("t", id=1)))], retries=2)
    with pytest.raises(RetriesExhaustedError):
        harness.run()
    assert fake.committed == [] and "from-dc1" not in fake.checkpoints
    assert harness.channel.stats.last_error is not None


def test_a_read_only_target_is_waited_for_and_nothing_is_lost() -> None:
    fake = target()
    for _ in range(8):
        read_only = pymysql.err.OperationalError(1290, "running with the --read-only option")
        fake.fail_once(lambda sql: sql.startswith("INSERT INTO `db`"), read_only)
    harness = Harness(fake, [batch(1, txn(10, ins("t", id=1)), txn(20, ins("t", id=2)))], retries=0)
    channel = harness.run()
    assert channel.stats.waits == 8 and len(harness.slept) == 8
    assert len(fake.writes()) == 1 and fake.checkpoints["from-dc1"][0] == "1:11:1:20"


def interrupted(fake: FakeTarget, finished: Callable[[], bool], **options: Any) -> Harness:
    """A channel whose catch-up run (up to SCN 20) was interrupted, its lease expired, until
    ``finished()``; the stream holds SCNs 10, 20 and 30. ``options``: the Harness's."""
    killed_run = (str(scn(20)), 3, 5, "host:7:abc", dt.datetime(2026, 1, 1))

    def catchup() -> tuple[Any, ...]:
        if not finished():
            return ("host:7:abc", 0, "t0", *killed_run)
        return ("", 0, "t1", None, None, None, None, None)  # finished: a new taken_at

    fake.catchup = catchup
    return Harness(fake, [batch(1, *(txn(n, ins("t", id=n)) for n in (10, 20, 30)))], **options)


def finish_run(fake: FakeTarget) -> None:
    """What finishing the run leaves: the checkpoint at its end."""
    fake.checkpoints["from-dc1"] = (str(scn(20)), "dc1", None, None)


def assert_streamed_after_the_run(fake: FakeTarget, channel: ApplyChannel) -> None:
    written = fake.writes()
    assert len(written) == 1 and "VALUES (30)" in written[0], "only what came after the run"
    assert fake.checkpoints["from-dc1"][0] == str(scn(30))
    assert channel.catchup_unfinished is None


def test_a_channel_waits_for_an_interrupted_catchup_run_then_streams_after_its_end() -> None:
    fake = target()
    waited: list[str] = []

    def sleep(_delay: float) -> None:
        waited.append(harness.channel.report()["error"])
        finish_run(fake)  # by a re-run of the catch-up

    harness = interrupted(fake, lambda: bool(waited), sleep=sleep)
    channel = harness.run()
    assert channel.stats.waits == 1, "waiting (status, metrics: state waiting)"
    assert "interrupted catch-up run host:7:abc" in waited[0]
    assert "drc catchup --config FILE --channel from-dc1" in waited[0]
    assert_streamed_after_the_run(fake, channel)


def test_a_channel_finishes_an_interrupted_catchup_run_itself_then_streams_after_its_end() -> None:
    fake = target()
    finished: list[bool] = []

    def finish(stopped: Any) -> None:
        assert not stopped(), "asked whether the channel is stopping"
        report = harness.channel.report()
        assert report["state"] == "waiting" and "finishing the interrupted" in report["error"]
        finished.append(True)
        finish_run(fake)

    harness = interrupted(fake, lambda: bool(finished), finish=finish)
    channel = harness.run()
    assert finished == [True] and channel.stats.waits == 0, "finished, not waited for"
    assert_streamed_after_the_run(fake, channel)


def test_a_failed_finish_of_an_interrupted_run_is_shown_and_tried_again_later() -> None:
    fake = target()
    tries: list[float] = []
    shown: list[str] = []

    def finish(_stopped: Any) -> None:
        tries.append(harness.now)
        if len(tries) == 1:
            raise OSError("remote away")
        finish_run(fake)

    def sleep(delay: float) -> None:
        harness.slept.append(delay)
        harness.now += delay
        shown.append(harness.channel.report()["error"])

    harness = interrupted(fake, lambda: len(tries) >= 2, finish=finish, sleep=sleep)
    channel = harness.run()
    assert tries[1] - tries[0] >= 30.0, "not hammered: tried again after FINISH_RETRY_S"
    assert any("its last try failed: OSError: remote away" in e for e in shown), "drc status"
    assert_streamed_after_the_run(fake, channel)


def test_a_target_that_is_down_at_start_is_waited_for() -> None:
    fake = target(down=True)

    def sleep(delay: float) -> None:
        harness.slept.append(delay)
        fake.down = len(harness.slept) < 3

    harness = Harness(fake, [batch(1, txn(10, ins("t", id=1)))], sleep=sleep)
    channel = harness.run()
    assert harness.slept == [0.5, 1.0, 2.0] and channel.stats.waits == 3
    assert fake.checkpoints["from-dc1"][0] == "1:11:1:10"


def test_ddl_is_bracketed_by_a_pending_marker_and_the_checkpoint() -> None:
    fake = target()
    ddl = (SchemaChange("db", "ALTER TABLE t ADD COLUMN c INT"),)
    batches = [batch(1, txn(10, ins("t", id=1)), txn(20, ddl=ddl), txn(30, ins("t", id=2)))]
    channel = Harness(fake, batches).run()
    marks = [m[1:] for m in fake.marks()]
    assert marks == [
        ("1:11:1:10", "epoch-1", "dc1", "1:11:1:20"),  # changes before it + the pending DDL
        ("1:11:1:20", "epoch-1", "dc1", None),  # the DDL ran
        ("1:11:1:30", "epoch-1", "dc1", None),
    ]
    assert fake.ddl == [("USE `db`", "ALTER TABLE t ADD COLUMN c INT")]
    assert channel.stats.ddl == 1 and channel.stats.transactions == 3


def test_a_pending_ddl_journalled_as_done_is_not_run_again() -> None:
    ddl = (SchemaChange("db", "ALTER TABLE t RENAME COLUMN v TO w"),)
    pending = target(checkpoints={"from-dc1": ("1:11:1:10", "dc1", None, "1:11:1:20")})
    pending.journal[("from-dc1", "1:11:1:20", 0)] = "done"
    channel = Harness(pending, [batch(1, txn(20, ddl=ddl))]).run()
    assert pending.ddl == [] and channel.stats.ddl == 0
    assert pending.checkpoints["from-dc1"] == ("1:11:1:20", "dc1", "epoch-1", None)


def test_a_running_ddl_whose_table_changed_ran_before_the_crash() -> None:
    ddl = (SchemaChange("db", "ALTER TABLE t RENAME COLUMN v TO w"),)
    pending = target(checkpoints={"from-dc1": ("1:11:1:10", "dc1", None, "1:11:1:20")})
    pending.journal[("from-dc1", "1:11:1:20", 0)] = "running"  # before: {} (no table then)
    channel = Harness(pending, [batch(1, txn(20, ddl=ddl))]).run()
    assert pending.ddl == [] and channel.stats.ddl == 0
    assert pending.journal[("from-dc1", "1:11:1:20", 0)] == "done"
    assert pending.checkpoints["from-dc1"] == ("1:11:1:20", "dc1", "epoch-1", None)


def test_a_failing_ddl_stops_the_channel_with_it_still_pending() -> None:
    exists = pymysql.err.OperationalError(1060, "Duplicate column name 'c'")
    ddl = (SchemaChange("db", "ALTER TABLE t ADD COLUMN c INT"),)
    fresh = target(checkpoints={"from-dc1": ("1:11:1:10", "dc1", None, None)})
    fresh.fail_once(lambda sql: sql.startswith("ALTER TABLE t"), exists)
    with pytest.raises(ApplyError, match="Duplicate column"):
        Harness(fresh, [batch(1, txn(20, ddl=ddl))]).run()
    # A restart finds it journalled as running with the same definitions: it runs it again.
    assert fresh.journal[("from-dc1", "1:11:1:20", 0)] == "running"
    assert fresh.checkpoints["from-dc1"] == ("1:11:1:10", "dc1", "epoch-1", "1:11:1:20")


def test_drc_originated_and_filtered_transactions_move_the_checkpoint_only_rarely() -> None:
    saved = {"from-dc1": ("1:11:1:5", "dc1", None, None)}
    fake = target(checkpoints=dict(saved))
    echoes = [txn(10 + i, ins("t", id=i), drc_originated=True) for i in range(3)]
    Harness(fake, [batch(1, *echoes, next_scn=scn(100))]).run()
    assert fake.committed == []  # an idle checkpoint write would echo back and forth
    far = target(checkpoints=dict(saved))
    Harness(far, [batch(1, *echoes, next_scn=scn(5, index=2))]).run()
    assert [m[1] for m in far.marks()] == ["1:11:2:5"]


def test_an_idle_channel_whose_lease_was_taken_meanwhile_goes_through_the_handover() -> None:
    """A snapshot joined tables while the channel had nothing to write (its changes all
    echoes): it commits once, through the handover, which reads the joined tables; with the
    lease untouched it writes nothing (an idle checkpoint write would echo back and forth)."""
    saved = {"from-dc1": ("1:11:1:5", "dc1", None, None)}
    echoes = [txn(10 + i, ins("t", id=i), drc_originated=True) for i in range(3)]
    for moved in (False, True):
        fake = target(checkpoints=dict(saved))
        harness = Harness(fake, [batch(1, *echoes, next_scn=scn(100))])

        def catchup(moved: bool = moved, harness: Harness = harness) -> tuple[Any, ...]:
            streaming = harness.started_after is not None  # taken and released since the start
            return ("snapshot:x", 0, "t1" if moved and streaming else "t0", *(None,) * 5)

        fake.catchup = catchup
        harness.run()
        assert [m[1] for m in fake.marks()] == (["1:11:1:100"] if moved else [])
        assert fake.writes() == []


def watched(harness: Harness) -> list[Any]:
    """The channel's target connections, each with its ``events`` (send, read, run)."""
    connections: list[Any] = []

    def connect(**kwargs: Any) -> Any:
        connections.append(harness.target.connect(**kwargs))
        return connections[-1]

    harness.channel.target._connect = connect  # type: ignore[attr-defined]
    return connections


def transactions_of(connection: Any) -> list[list[str]]:
    """Each apply transaction (one with a SAVEPOINT) as its commands: "send X" (no wait),
    "run X" (a round trip; X the statement's first words) and "read" (a reply read)."""
    texts = iter(connection.sent)
    found: list[list[str]] = []
    current: list[str] = []
    for event in connection.events:
        text = event if event == "read" else event.split(" ")[0] + " " + next(texts)[:30]
        current.append(text)
        if event in ("run COMMIT", "run ROLLBACK"):
            found.append(current)
            current = []
    return [t for t in found if "send SAVEPOINT drc_batch" in t]


LEASE_READ = "SELECT l.`owner`, l.`expires_at`"[:30]


def test_opening_a_channel_leaves_no_transaction_open() -> None:
    """A catch-up driver opens the channel and keeps its session idle for the whole run: an
    open read would hold its tables' metadata locks (and an old read view) all that time."""
    fake = target(rewinds=['{"from": "1:11:1:50", "to": "1:11:1:20"}'])
    harness = Harness(fake, [])
    connections = watched(harness)
    harness.channel.open()
    assert connections[0].events[-1] == "run COMMIT"
    assert harness.channel.control.replay_until is not None, "the rewinds were read"


def test_once_the_lease_was_seen_free_its_read_rides_ahead_of_the_writes() -> None:
    """No round trip of its own: the lease read (with its shared lock) is sent first, the
    writes and checkpoint behind it, and it is checked before COMMIT."""
    fake = target()
    harness = Harness(fake, [batch(n, txn(10 * n, ins("t", id=n))) for n in (1, 2, 3)])
    connections = watched(harness)
    harness.run()
    assert [m[1] for m in fake.marks()] == ["1:11:1:10", "1:11:1:20", "1:11:1:30"]
    first, *later = transactions_of(connections[0])
    assert f"run {LEASE_READ}" in first, "the first reads it before anything else"
    assert len(later) == 2
    for commands in later:
        assert commands[:3] == [f"send {LEASE_READ}", "send SAVEPOINT drc_batch",
                                "send INSERT INTO `db`.`t` (`id`) VA"], commands  # fmt: skip
        assert commands[3] == "send INSERT INTO `drc`.`checkpoint`"
        assert commands[4:] == ["read"] * 4 + ["run COMMIT"], "one round trip, then COMMIT"
    assert fake.rollbacks == 0


def test_a_catchup_that_ran_between_two_commits_is_seen_by_the_read_sent_ahead() -> None:
    """Taken and released between two commits (its checkpoint further on): the pipelined
    attempt is rolled back, the lease read first, and what the catch-up applied dropped."""
    fake = target()
    batches = [batch(1, txn(10, ins("t", id=1))), batch(2, txn(20, ins("t", id=2)),
               txn(30, ins("t", id=3)), txn(40, ins("t", id=4)), after=scn(10))]  # fmt: skip
    harness = Harness(fake, batches)

    def catchup() -> tuple[Any, ...]:
        if harness.subscriber.acked == [1, 2]:  # the catch-up ran: up to 30 is applied
            fake.checkpoints["from-dc1"] = (str(scn(30)), "dc1", None, None)
            return ("host:9:x", 0, "t1", *(None,) * 5)
        return ("", 0, "t0", *(None,) * 5)

    fake.catchup = catchup
    connections = watched(harness)
    harness.run()
    assert fake.rollbacks == 1, "the attempt sent ahead was rolled back"
    assert [m[1] for m in fake.marks()] == ["1:11:1:10", "1:11:1:40"]
    assert [w.split(" ON ")[0] for w in fake.writes()] == [
        "INSERT INTO `db`.`t` (`id`) VALUES (1)",
        "INSERT INTO `db`.`t` (`id`) VALUES (4)",  # 20 and 30 came with the catch-up
    ]
    rolled_back, retried = transactions_of(connections[0])[-2:]
    assert rolled_back[0] == f"send {LEASE_READ}" and rolled_back[-1] == "run ROLLBACK"
    assert retried[0] == f"run {LEASE_READ}", "read first once the lease moved"


def test_a_catchup_holding_the_lease_stops_the_writes_sent_behind_the_read() -> None:
    fake = target()
    batches = [batch(1, txn(10, ins("t", id=1))), batch(2, txn(20, ins("t", id=2)))]
    harness = Harness(fake, batches)
    held: list[bool] = []

    def catchup() -> tuple[Any, ...]:
        holding = harness.subscriber.acked == [1, 2] and not harness.slept
        held.append(holding)
        return ("host:9:x", int(holding), "t1" if holding else "t0", *(None,) * 5)

    fake.catchup = catchup
    channel = harness.run()
    assert True in held and fake.rollbacks >= 1
    assert channel.stats.waits == 1, "waited for the catch-up, nothing committed meanwhile"
    assert [m[1] for m in fake.marks()] == ["1:11:1:10", "1:11:1:20"]


def test_a_table_without_primary_key_is_refused_and_the_stop_names_its_transaction() -> None:
    fake = target()
    n = ins("n", a=1)
    with pytest.raises(NoPrimaryKeyError, match="db.n has no primary key") as stopped:
        Harness(fake, [batch(1, txn(10, ins("t", id=1)), txn(20, n))]).run()
    # The group is retried one transaction at a time: the one before lands, the stop is exact.
    assert [m[1] for m in fake.marks()] == ["1:11:1:10"]
    stoppage = stopped.value.stoppage
    assert isinstance(stoppage, Stoppage)
    assert str(stoppage.scn) == "1:11:1:20" and stoppage.tables == {"db.n": 1}


def test_a_table_without_primary_key_is_matched_whole_row_when_configured() -> None:
    fake = target()
    Harness(fake, [batch(1, txn(10, ins("n", a=1)))], no_primary_key="match_whole_row").run()
    assert fake.writes() == ["INSERT INTO `db`.`n` (`a`) VALUES (1)"]


def test_idempotent_fixes_are_counted() -> None:
    fake = target(affected=lambda sql: 0 if sql.startswith(("UPDATE", "DELETE")) else None)
    batches = [batch(1, txn(10, upd("t", {"id": 1, "v": "a"}, id=1, v="b"), dele("t", id=2)))]
    channel = Harness(fake, batches).run()
    assert (channel.stats.missing_updates, channel.stats.missing_deletes) == (1, 1)
    assert channel.stats.idempotent_fixes == 2
    assert [s.split()[0] for s in fake.writes()] == ["UPDATE", "INSERT", "DELETE"]


def test_a_commit_that_landed_before_its_connection_was_lost_is_not_applied_again() -> None:
    """The target died right after a COMMIT was durable (kill -9 of MariaDB): the channel
    cannot know it landed until it reads its checkpoint again, which it does before trying
    again; applying the group twice would double a counter column or a keyless row."""
    fake = target()
    fake.lost_after_commit = 1
    group = batch(1, txn(10, ins("t", id=1)), txn(20, dele("t", id=5)))
    channel = Harness(fake, [group, batch(2, txn(30, ins("t", id=3)))]).run()
    assert [w.split(" ")[0] for w in fake.writes()] == ["INSERT", "DELETE", "INSERT"]
    assert [m[1] for m in fake.marks()][-1] == "1:11:1:30"
    assert channel.stats.waits == 1


def test_a_stopped_channel_holds_no_target_transaction_open_while_it_waits() -> None:
    """Waiting for an operator's fix, the failed attempt is rolled back: its locks (the rows,
    the missing table's name) would block that very fix (CREATE TABLE) and local writers."""
    fake = target()
    gone = pymysql.err.ProgrammingError(1146, "Table 'db.t' doesn't exist")
    for _ in range(2):  # the group, then its one transaction written alone
        fake.fail_once(lambda sql: sql.startswith("INSERT INTO `db`.`t`"), gone)
    harness = Harness(fake, [batch(1, txn(10, ins("t", id=1)))], hold_on_error=True)
    thread = threading.Thread(target=harness.run, daemon=True)
    thread.start()
    for _ in range(500):
        if harness.channel.control.stoppage is not None:
            break
        time.sleep(0.01)
    try:
        assert harness.channel.control.stoppage is not None
        assert fake.rollbacks >= 1 and fake.committed == []
    finally:
        harness.stop.set()
        thread.join(5)


def test_after_a_skip_the_status_keeps_the_stop_only_as_last_stop() -> None:
    fake = target()
    batches = [batch(1, txn(10, ins("t", id=1)), txn(20, ins("n", a=1)))]
    harness = Harness(fake, batches, hold_on_error=True)
    channel = harness.channel
    thread = threading.Thread(target=harness.run, daemon=True)
    thread.start()
    for _ in range(500):
        if channel.control.stoppage is not None:
            break
        time.sleep(0.01)
    stopped = channel.report()
    assert stopped["state"] == "stopped" and "db.n has no primary key" in stopped["last_error"]
    assert channel.control.stoppage is not None
    skip = Request("skip", "test", "no key here", scn=channel.control.stoppage.scn)
    channel.control.submit(skip).wait(5)
    thread.join(5)
    continued = channel.report()
    assert continued["state"] != "stopped" and not thread.is_alive()
    assert continued["last_error"] is None
    stop = {"at": 1_700_000_100.0, "error": stopped["error"]}
    assert "NoPrimaryKeyError" in stop["error"]
    assert stopped["last_stop"] == continued["last_stop"] == stop


def test_the_gtids_passed_move_only_when_what_holds_them_is_committed() -> None:
    fake = target()
    batches = [
        batch(1, replace(txn(10, ins("t", id=1, v="a")), gtid="1-1-10"),
              replace(txn(20, ins("t", id=2), drc_originated=True), gtid="1-1-20"),
              newest=scn(20)),
    ]  # fmt: skip
    harness = Harness(fake, batches)
    gtids = harness.channel.progress.gtids
    assert gtids.position() == {}
    harness.run()
    assert len(fake.committed) == 1
    # the echo (not applied here) counts as passed: the channel moved past it
    assert {d: str(g) for d, g in gtids.position().items()} == {1: "1-1-20"}


def test_ddl_in_a_fragment_before_the_last_stops_the_channel_losing_nothing() -> None:
    """The capture stores DDL only on a transaction's last fragment; DDL before it would move
    the checkpoint to the SCN its later fragments share, and they would be dropped."""
    create = (SchemaChange("db", "CREATE TABLE db.t2 (id INT)"),)
    fake = target(checkpoints={"from-dc1": ("1:11:1:10", "dc1", None, None)})
    batches = [
        batch(1, txn(15, ins("t", id=9)),
              txn(20, ins("t", id=1), ddl=create, last_fragment=False),
              txn(20, ins("t", id=2), fragment=1), after=scn(10)),
    ]  # fmt: skip
    with pytest.raises(FatalError, match="DDL in fragment 0, before its last") as raised:
        Harness(fake, batches).run()
    assert isinstance(raised.value.stoppage, Stoppage) and raised.value.stoppage.scn == scn(20)
    assert fake.ddl == [] and fake.committed == []
    assert fake.checkpoints["from-dc1"] == ("1:11:1:10", "dc1", None, None)
