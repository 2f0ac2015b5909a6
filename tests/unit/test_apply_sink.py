"""The target adapter without a server: literal rendering, batches and their fallback, and the
translation of driver errors."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pymysql
import pytest
from pymysql.constants import SERVER_STATUS

from drc.apply import checkpoint, plan
from drc.apply.sink import TargetSession
from drc.core.events import Op, RowChange
from drc.core.scn import SCN
from drc.core.target_errors import (
    ApplyError,
    LockConflictError,
    TargetReadOnlyError,
    TargetUnavailableError,
)
from drc.core.target_table import TargetTable
from drc.mysql import session as session_module
from drc.mysql import sql
from drc.mysql.driver import TargetSettings
from drc.mysql.errors import DuplicateKey, translate
from tests.support.apply_fakes import FakeTarget

T = TargetTable("db", "t", ("id", "v"), ("id",))
SETTINGS = TargetSettings("127.0.0.1", 3306, "apply", "secret")


def test_settings_never_show_the_password() -> None:
    assert "secret" not in repr(SETTINGS) and "apply@127.0.0.1:3306" in repr(SETTINGS)


@pytest.mark.parametrize(
    "value",
    [0, -(2**63), 2**64 - 1, "", "it's", "back\\slash", "nul\x00 and \n\r\x1a", "🎉", None,
     True, 1.5, -0.0, 1e300, b"\x00'\\\xff", Decimal("-0.001"), dt.date(2024, 2, 29),
     Decimal("1E+2"), Decimal("-0E-30"), dt.datetime(2024, 1, 2, 3, 4, 5, 6),
     dt.datetime(99, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
     dt.timedelta(hours=-838, seconds=-1)],
)  # fmt: skip
@pytest.mark.parametrize("status", [0, SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES])
def test_literals_are_what_pymysql_itself_would_send(value: object, status: int) -> None:
    conn = pymysql.connections.Connection(defer_connect=True, charset="utf8mb4", binary_prefix=True)
    conn.server_status = status  # 0: as after connecting with the pinned sql_mode
    session = TargetSession(SETTINGS)
    session._conn = conn
    statement = sql.Statement("SELECT %s, `a%%b`", (value,))
    assert session.text(statement) == conn.cursor().mogrify(statement.sql, statement.params)


def session_on(fake: FakeTarget) -> TargetSession:
    session = TargetSession(SETTINGS, fake.connect)
    session.open()
    return session


def writes(*changes: RowChange) -> list[plan.Write]:
    planner = plan.Planner()
    out: list[plan.Write] = []
    for change in changes:
        out += planner.add(change, T)
    return out + planner.finish()


def upd(id_: int, v: str) -> RowChange:
    return RowChange("db", "t", Op.UPDATE, {"id": id_, "v": "old"}, {"id": id_, "v": v})


def test_a_batch_is_one_round_trip_after_a_savepoint_one_statement_per_command() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    conn = session._conn
    conn.events.clear()
    batch = session.batch()
    batch.extend(writes(upd(1, "a"), upd(2, "b"), RowChange("db", "t", Op.DELETE, {"id": 3}, None)))
    assert batch.finish() == plan.Effects(3)
    assert conn.events == [
        "send SAVEPOINT", "send UPDATE", "send UPDATE", "send DELETE", "read", "read", "read",
        "read",
    ]  # fmt: skip
    assert all(";" not in text for text in conn.sent)


def test_a_missing_row_in_a_batch_replays_the_batch_one_by_one_with_its_fallback() -> None:
    fake = FakeTarget(
        affected=lambda s: 0 if s.startswith("UPDATE `db`.`t` SET `id` = 2") else None
    )
    session = session_on(fake)
    effects = session.run_batch(writes(upd(1, "a"), upd(2, "b"), upd(3, "c")))
    session.commit()
    assert effects == plan.Effects(3, missing_updates=1)
    assert [s.split(" WHERE")[0].split(" ON ")[0] for s in fake.writes()] == [
        "UPDATE `db`.`t` SET `id` = 1, `v` = 'a'",
        "UPDATE `db`.`t` SET `id` = 2, `v` = 'b'",
        "INSERT INTO `db`.`t` (`id`, `v`) VALUES (2, 'b')",  # right after its update
        "UPDATE `db`.`t` SET `id` = 3, `v` = 'c'",
    ]


def test_a_duplicate_key_in_a_batch_also_takes_the_careful_path() -> None:
    fake = FakeTarget()
    dup = pymysql.err.IntegrityError(1062, "Duplicate entry '9' for key 'PRIMARY'")
    for _ in range(2):  # in the batch, then again when run on its own
        fake.fail_once(lambda s: s.startswith("UPDATE `db`.`t` SET `id` = 9"), dup)
    session = session_on(fake)
    moved = RowChange("db", "t", Op.UPDATE, {"id": 1, "v": "x"}, {"id": 9, "v": "x"})
    effects = session.run_batch(writes(upd(5, "a"), moved))
    assert effects == plan.Effects(2, duplicate_inserts=1)


def test_batches_are_bounded() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    batch = session.batch()
    batch.MAX_STATEMENTS = 2
    batch.extend(writes(*(upd(i, "x") for i in range(5))))
    assert batch.finish() == plan.Effects(5)
    assert len(fake.committed) == 0 and len(session._conn.pending) == 5
    assert session._conn.events.count("send SAVEPOINT") == 3  # 2 + 2 + 1


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (pymysql.err.OperationalError(1213, "Deadlock"), LockConflictError),
        (pymysql.err.OperationalError(1205, "Lock wait timeout"), LockConflictError),
        (pymysql.err.OperationalError(2003, "Can't connect"), TargetUnavailableError),
        (pymysql.err.OperationalError(2013, "Lost connection"), TargetUnavailableError),
        (pymysql.err.InterfaceError(0, ""), TargetUnavailableError),
        (ConnectionResetError(104, "reset"), TargetUnavailableError),
        (pymysql.err.OperationalError(1290, "--read-only"), TargetReadOnlyError),
        (pymysql.err.InternalError(1836, "read-only mode"), TargetReadOnlyError),
        (pymysql.err.IntegrityError(1062, "Duplicate entry"), DuplicateKey),
        (pymysql.err.ProgrammingError(1146, "Table 'x.y' doesn't exist"), ApplyError),
    ],
)
def test_driver_errors_are_translated_once_at_the_boundary(exc: BaseException, kind: type) -> None:
    translated = translate(exc, "a write to db.t")
    assert type(translated) is kind
    assert "db.t" in str(translated)


# ---------------------------------------------------------------- pipelining and round trips


def test_the_next_chunk_is_rendered_and_sent_before_the_previous_one_is_read() -> None:
    """The server has the next chunk queued while the apply reads the replies of the last."""
    fake = FakeTarget()
    session = session_on(fake)
    render, conn = session.text, session._conn
    conn.events.clear()
    session.text = lambda statement: conn.events.append("render") or render(statement)  # type: ignore[method-assign]
    batch = session.batch()
    batch.MAX_STATEMENTS = 2
    batch.extend(writes(*(upd(i, "x") for i in range(4))))
    assert conn.unread  # the second chunk is still in flight
    assert batch.finish() == plan.Effects(4)
    chunk = ["send SAVEPOINT", "send UPDATE", "send UPDATE"]
    assert conn.events == ["render", "render", *chunk, "render", "render", *chunk, *["read"] * 6]
    savepoints = [t for t in conn.sent if t.startswith("SAVEPOINT")]
    assert savepoints == ["SAVEPOINT drc_batch", "SAVEPOINT drc_batch_b"]  # both may be rolled to


def test_at_most_two_chunks_are_in_flight_and_their_savepoints_take_turns() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    conn = session._conn
    conn.events.clear()
    batch = session.batch()
    batch.MAX_STATEMENTS = 1
    batch.extend(writes(*(upd(i, "x") for i in range(4))))
    chunk = ["send SAVEPOINT", "send UPDATE"]
    assert conn.events == [*chunk, *chunk, "read", "read", *chunk, "read", "read", *chunk]
    assert batch.finish() == plan.Effects(4)
    savepoints = [t.split()[1] for t in conn.sent if t.startswith("SAVEPOINT")]
    assert savepoints == ["drc_batch", "drc_batch_b", "drc_batch", "drc_batch_b"]


def test_a_fallback_in_a_chunk_undoes_the_next_chunk_in_flight_and_sends_it_again() -> None:
    fake = FakeTarget(
        affected=lambda s: 0 if s.startswith("UPDATE `db`.`t` SET `id` = 1") else None
    )
    session = session_on(fake)
    batch = session.batch()
    batch.MAX_STATEMENTS = 2
    batch.extend(writes(*(upd(i, "x") for i in range(4))))
    assert batch.finish() == plan.Effects(4, missing_updates=1)
    session.commit()
    assert [s.split(" WHERE")[0].split(" VALUES")[0] for s in fake.writes()] == [
        "UPDATE `db`.`t` SET `id` = 0, `v` = 'x'",
        "UPDATE `db`.`t` SET `id` = 1, `v` = 'x'",
        "INSERT INTO `db`.`t` (`id`, `v`)",  # the fallback, before the next chunk
        "UPDATE `db`.`t` SET `id` = 2, `v` = 'x'",
        "UPDATE `db`.`t` SET `id` = 3, `v` = 'x'",
    ]
    rollbacks = [t for t in session._conn.sent if t.startswith("ROLLBACK TO")]
    assert rollbacks == ["ROLLBACK TO SAVEPOINT drc_batch"]  # the first chunk's: both undone


def test_a_fallback_sends_the_next_chunk_and_the_checkpoint_behind_it_again() -> None:
    fake = FakeTarget(
        affected=lambda s: 0 if s.startswith("UPDATE `db`.`t` SET `id` = 0") else None
    )
    session = session_on(fake)
    first, second = plan.Effects(), plan.Effects()
    session.send_batch(writes(upd(0, "x"), upd(1, "x")), first)
    session.send_batch(writes(upd(2, "x")), second)
    session.write_checkpoint(ROW)
    session.commit()
    assert first == plan.Effects(2, missing_updates=1) and second == plan.Effects(1)
    (committed,) = fake.committed
    assert [s.split(" WHERE")[0].split(" (")[0] for s in committed] == [
        "UPDATE `db`.`t` SET `id` = 0, `v` = 'x'",
        "INSERT INTO `db`.`t`",
        "UPDATE `db`.`t` SET `id` = 1, `v` = 'x'",
        "UPDATE `db`.`t` SET `id` = 2, `v` = 'x'",
        "INSERT INTO `drc`.`checkpoint`",  # once, after the chunk sent again
    ]


def test_a_deadlock_in_the_next_chunk_wins_over_a_fallback_in_the_first() -> None:
    """The server rolled the whole transaction back: no savepoint is left to roll back to."""
    fake = FakeTarget(
        affected=lambda s: 0 if s.startswith("UPDATE `db`.`t` SET `id` = 0") else None
    )
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found")
    fake.fail_once(lambda s: s.startswith("UPDATE `db`.`t` SET `id` = 2"), deadlock)
    session = session_on(fake)
    session.send_batch(writes(upd(0, "x"), upd(1, "x")), plan.Effects())
    session.send_batch(writes(upd(2, "x"), upd(3, "x")), plan.Effects())
    with pytest.raises(LockConflictError) as failed:
        session.commit()
    conn = session._conn
    assert not conn.unread and "run COMMIT" not in conn.events
    assert not any(t.startswith("ROLLBACK TO") for t in conn.sent)
    session.recover(failed.value)
    assert fake.committed == [] and conn.pending == []


def test_any_other_statement_waits_for_the_chunk_in_flight() -> None:
    fake = FakeTarget()
    fake.tables[("db", "t")] = (T.columns, T.primary_key)
    session = session_on(fake)
    effects = plan.Effects()
    session.send_batch(writes(upd(1, "a"), upd(2, "b")), effects)
    assert effects == plan.Effects()  # not read yet
    assert session.local_row("db", "t", {"id": 1}) is None  # would be out of sync otherwise
    assert effects == plan.Effects(2)


ROW = checkpoint.CheckpointRow("ch", SCN(1, 2, 3, 4), "dc1")


def test_the_checkpoint_write_is_pipelined_behind_the_last_chunk_and_commit_waits_for_it() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    conn = session._conn
    conn.events.clear()
    effects = plan.Effects()
    session.send_batch(writes(upd(1, "a"), upd(2, "b")), effects)
    session.write_checkpoint(ROW)
    assert conn.events[-1] == "send INSERT" and "read" not in conn.events  # no wait yet
    session.commit()
    assert conn.events == [
        "send SAVEPOINT", "send UPDATE", "send UPDATE", "send INSERT", "read", "read", "read",
        "read", "run COMMIT",
    ]  # two round trips: the pipeline, then COMMIT  # fmt: skip
    assert effects == plan.Effects(2)
    assert fake.checkpoints["ch"][0] == str(SCN(1, 2, 3, 4)) and len(fake.writes()) == 2


def test_a_failed_checkpoint_write_commits_nothing() -> None:
    fake = FakeTarget()
    wait = pymysql.err.OperationalError(1205, "Lock wait timeout exceeded")
    fake.fail_once(lambda s: "`checkpoint`" in s, wait)
    session = session_on(fake)
    session.send_batch(writes(upd(1, "a"), upd(2, "b")), plan.Effects())
    session.write_checkpoint(ROW)
    with pytest.raises(LockConflictError) as failed:
        session.commit()
    assert "run COMMIT" not in session._conn.events and not session._conn.unread
    session.recover(failed.value)
    assert fake.committed == [] and fake.checkpoints == {} and fake.rollbacks == 1
    session.commit()  # the checkpoint write went with the rolled back attempt
    assert fake.committed == []


def test_a_deadlock_mid_pipeline_never_commits_what_ran_after_it() -> None:
    # The server rolls the whole transaction back at a deadlock; the writes and the checkpoint
    # pipelined after it still run, in a new transaction that the retry must roll back.
    fake = FakeTarget()
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found")
    fake.fail_once(lambda s: s.startswith("UPDATE `db`.`t` SET `id` = 2"), deadlock)
    session = session_on(fake)
    session.send_batch(writes(upd(1, "a"), upd(2, "b"), upd(3, "c")), plan.Effects())
    session.write_checkpoint(ROW)
    conn = session._conn
    with pytest.raises(LockConflictError) as failed:
        session.commit()
    assert len(conn.pending) == 2  # upd 3 and the checkpoint, in the implicit new transaction
    assert "run COMMIT" not in conn.events and not conn.unread
    assert "run ROLLBACK" not in " ".join(conn.events)  # no fallback on a lost transaction
    session.recover(failed.value)
    assert conn.pending == [] and fake.committed == [] and fake.checkpoints == {}
    assert session._conn is conn  # every reply was read: the connection is reused
    effects = session.run_batch(writes(upd(1, "a"), upd(2, "b"), upd(3, "c")))  # the retry
    session.write_checkpoint(ROW)
    session.commit()
    assert effects == plan.Effects(3) and len(fake.writes()) == 3 and "ch" in fake.checkpoints


def test_a_failed_write_mid_pipeline_falls_back_and_writes_the_checkpoint_again() -> None:
    fake = FakeTarget()
    dup = pymysql.err.IntegrityError(1062, "Duplicate entry '9' for key 'PRIMARY'")
    for _ in range(2):  # in the pipeline, then again when run on its own
        fake.fail_once(lambda s: s.startswith("UPDATE `db`.`t` SET `id` = 9"), dup)
    session = session_on(fake)
    moved = RowChange("db", "t", Op.UPDATE, {"id": 1, "v": "x"}, {"id": 9, "v": "x"})
    effects = plan.Effects()
    session.send_batch(writes(moved, upd(5, "a")), effects)
    session.write_checkpoint(ROW)
    session.commit()
    assert effects == plan.Effects(2, duplicate_inserts=1)
    (committed,) = fake.committed
    assert [s.split(" ")[0] for s in committed] == ["DELETE", "INSERT", "UPDATE", "INSERT"]
    assert committed[-1].startswith("INSERT INTO `drc`.`checkpoint`")  # once, after the rerun


def test_a_fatal_error_mid_pipeline_reads_every_reply_and_commits_nothing() -> None:
    fake = FakeTarget()
    gone = pymysql.err.ProgrammingError(1146, "Table 'db.t' doesn't exist")
    for _ in range(2):
        fake.fail_once(lambda s: s.startswith("UPDATE `db`.`t` SET `id` = 1"), gone)
    session = session_on(fake)
    session.send_batch(writes(upd(1, "a"), upd(2, "b")), plan.Effects())
    session.write_checkpoint(ROW)
    with pytest.raises(ApplyError, match="1146"):
        session.commit()
    assert not session._conn.unread and "run COMMIT" not in session._conn.events
    session.close()
    assert fake.committed == []


def test_a_connection_lost_mid_pipeline_is_dropped() -> None:
    fake = FakeTarget()
    lost = pymysql.err.OperationalError(2013, "Lost connection to server during query")
    fake.fail_once(lambda s: s.startswith("UPDATE `db`.`t` SET `id` = 2"), lost)
    session = session_on(fake)
    session.send_batch(writes(upd(1, "a"), upd(2, "b"), upd(3, "c")), plan.Effects())
    with pytest.raises(TargetUnavailableError):
        session.settle()
    assert session._conn is None and fake.committed == []


def test_selects_are_pipelined_and_a_failed_one_is_raised_after_every_reply_is_read() -> None:
    fake = FakeTarget()
    fake.fail_once(lambda s: "`id` = 2" in s, pymysql.err.OperationalError(1205, "Lock wait"))
    session = session_on(fake)
    conn = session._conn
    probes = [sql.Statement("SELECT * FROM `db`.`t` WHERE `id` = %s", (i,)) for i in range(4)]
    assert [rows for _, rows in session.select_many(probes[:2], "probing")] == [[], []]
    with pytest.raises(LockConflictError):
        session.select_many(probes, "probing")
    assert conn.events[-8:] == ["send SELECT"] * 4 + ["read"] * 4 and not conn.unread
    assert session._conn is conn


def test_select_rounds_are_bounded_by_count_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "SELECTS_PER_ROUND_TRIP", 3)
    monkeypatch.setattr(session_module, "SELECT_BYTES_PER_ROUND_TRIP", 10)
    texts = ["aaaa", "bbbb", "c", "dddddddddddd", "e", "f", "g", "h"]
    rounds = list(session_module.select_rounds(texts))
    assert rounds == [["aaaa", "bbbb", "c"], ["dddddddddddd"], ["e", "f", "g"], ["h"]]


def test_a_checkpoint_write_goes_out_before_any_later_statement() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    session.write_checkpoint(ROW)
    session.execute(sql.Statement("DELETE FROM `db`.`t` WHERE `id` = %s", (1,)))
    session.commit()
    assert [s.split(" ")[0:3] for s in fake.committed[0]] == [
        ["INSERT", "INTO", "`drc`.`checkpoint`"], ["DELETE", "FROM", "`db`.`t`"]
    ]  # fmt: skip


def test_a_failed_attempt_with_a_chunk_in_flight_drops_the_connection() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    session.send_batch(writes(upd(1, "a"), upd(2, "b")), plan.Effects())
    first = session._conn
    session.recover(ApplyError("a planning bug while the chunk ran", None))
    assert first.closed and fake.rollbacks == 0  # a rollback now would be out of sync
    session.run_batch(writes(upd(3, "c")))
    assert fake.connects == 2
