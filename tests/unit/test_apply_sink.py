"""The target adapter without a server: literal rendering, batches and their fallback, and the
translation of driver errors."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pymysql
import pytest

from drc.apply import checkpoint, plan, sql
from drc.apply.errors import (
    ApplyError,
    LockConflictError,
    TargetReadOnlyError,
    TargetUnavailableError,
)
from drc.apply.plan import DuplicateKey, TargetTable
from drc.apply.sink import TargetSession, TargetSettings, translate
from drc.core.events import Op, RowChange
from drc.core.scn import SCN
from tests.unit.test_apply_fakes import FakeTarget

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
def test_literals_are_what_pymysql_itself_would_send(value: object) -> None:
    conn = pymysql.connections.Connection(defer_connect=True, charset="utf8mb4", binary_prefix=True)
    conn.server_status = 0  # as after connecting with the pinned sql_mode
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


def test_a_batch_is_one_round_trip_after_a_savepoint() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    sent: list[str] = []
    cursor = session._cursor
    original = cursor.execute
    cursor.execute = lambda text, params=None: sent.append(text) or original(text, params)
    batch = session.batch()
    batch.extend(writes(upd(1, "a"), upd(2, "b"), RowChange("db", "t", Op.DELETE, {"id": 3}, None)))
    assert batch.finish() == plan.Effects(3)
    assert len(sent) == 1 and sent[0].startswith("SAVEPOINT drc_batch;\nUPDATE")


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


def test_the_next_chunk_is_rendered_while_the_server_runs_the_previous_one() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    events: list[str] = []
    render, conn = session.text, session._conn
    session.text = lambda statement: events.append("render") or render(statement)  # type: ignore[method-assign]
    send, read = conn._execute_command, conn._read_query_result
    conn._execute_command = lambda *a: events.append("send") or send(*a)
    conn._read_query_result = lambda: events.append("read") or read()
    batch = session.batch()
    batch.MAX_STATEMENTS = 2
    batch.extend(writes(*(upd(i, "x") for i in range(4))))
    assert conn.unread is not None  # the second chunk is still in flight
    assert batch.finish() == plan.Effects(4)
    assert events == ["render", "render", "send", "render", "render", "read", "send", "read"]


def test_a_fallback_in_a_chunk_in_flight_runs_before_the_next_chunk_is_sent() -> None:
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


def test_any_other_statement_waits_for_the_chunk_in_flight() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    effects = plan.Effects()
    session.send_batch(writes(upd(1, "a"), upd(2, "b")), effects)
    assert effects == plan.Effects()  # not read yet
    assert session.local_row("db", "t", {"id": 1}) is None  # would be out of sync otherwise
    assert effects == plan.Effects(2)


def test_the_checkpoint_write_rides_with_commit_in_one_round_trip() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    sent: list[str] = []
    cursor = session._cursor
    original = cursor.execute
    cursor.execute = lambda text, params=None: sent.append(text) or original(text, params)
    session.run_batch(writes(upd(1, "a"), upd(2, "b")))
    session.write_checkpoint(checkpoint.CheckpointRow("ch", SCN(1, 2, 3, 4), "dc1"))
    assert fake.checkpoints == {} and len(sent) == 1  # deferred
    session.commit()
    assert len(sent) == 2 and sent[1].endswith(";\nCOMMIT")
    assert fake.checkpoints["ch"][0] == str(SCN(1, 2, 3, 4)) and len(fake.writes()) == 2


def test_a_failed_checkpoint_write_commits_nothing() -> None:
    fake = FakeTarget()
    wait = pymysql.err.OperationalError(1205, "Lock wait timeout exceeded")
    fake.fail_once(lambda s: "`checkpoint`" in s, wait)
    session = session_on(fake)
    session.run_batch(writes(upd(1, "a"), upd(2, "b")))
    session.write_checkpoint(checkpoint.CheckpointRow("ch", SCN(1, 2, 3, 4), "dc1"))
    with pytest.raises(LockConflictError) as failed:
        session.commit()
    session.recover(failed.value)
    assert fake.committed == [] and fake.checkpoints == {} and fake.rollbacks == 1
    session.commit()  # the checkpoint write went with the rolled back attempt
    assert fake.committed == []


def test_a_checkpoint_write_goes_out_before_any_later_statement() -> None:
    fake = FakeTarget()
    session = session_on(fake)
    session.write_checkpoint(checkpoint.CheckpointRow("ch", SCN(1, 2, 3, 4), "dc1"))
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
