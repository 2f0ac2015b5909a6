"""The target's UNIQUE keys, triggers and foreign keys as apply reads them, and a group whose
writes are batched by shape across each other ending as its changes one by one
(drc.apply.shapes)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from drc.apply import plan
from drc.apply.checkpoint import CheckpointRow
from drc.apply.sink import TargetSession
from drc.core.events import Op, RowChange
from drc.core.scn import SCN
from drc.mysql.driver import TargetSettings
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import apply_user
from tests.support.servers import connect, execute

DB = "shapes"
TABLES = (
    "CREATE TABLE plain (id INT PRIMARY KEY, u INT, v INT)",
    "CREATE TABLE uniq (id INT PRIMARY KEY, u VARCHAR(20), v INT, w INT, UNIQUE KEY uv (v, w),"
    " UNIQUE KEY uu (u))",
    "CREATE TABLE audited (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE guarded (id INT PRIMARY KEY, v INT)",
    "CREATE TABLE parent (id INT PRIMARY KEY)",
    "CREATE TABLE child (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES parent (id))",
    "CREATE TABLE log (n INT AUTO_INCREMENT PRIMARY KEY, id INT)",
    "CREATE TRIGGER audited_ai AFTER INSERT ON audited FOR EACH ROW INSERT INTO log (id) "
    "VALUES (NEW.id)",
    "CREATE TRIGGER guarded_ai AFTER INSERT ON guarded FOR EACH ROW IF @drc_apply IS NULL THEN "
    "INSERT INTO log (id) VALUES (NEW.id); END IF",
)


@pytest.fixture()
def session(dc2: ServerInfo) -> Iterator[TargetSession]:
    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"USE {DB}")
        for statement in TABLES:
            cur.execute(statement)
    conn.close()
    target = TargetSession(apply_user(dc2))
    target.ensure_checkpoint_table()
    try:
        yield target
    finally:
        target.close()


def test_unique_keys_triggers_and_foreign_keys_are_read(session: TargetSession) -> None:
    plain, uniq = session.table(DB, "plain"), session.table(DB, "uniq")
    assert (plain.unique_keys, plain.keeps_order) == ((), False)
    assert sorted(uniq.unique_keys) == [("u",), ("v", "w")]
    assert session.table(DB, "audited").keeps_order  # its trigger fires for DRC's writes
    assert not session.table(DB, "guarded").keeps_order  # guarded by @drc_apply
    assert session.table(DB, "parent").keeps_order
    assert session.table(DB, "child").keeps_order


def test_a_user_who_cannot_see_triggers_keeps_every_tables_order(
    session: TargetSession, dc2: ServerInfo
) -> None:
    """Without TRIGGER, information_schema shows a user no trigger at all: the planner must
    not take that for "no trigger" and reorder writes a trigger may see."""
    user, password = "drc_apply_notrig", "no-trigger-secret"
    execute(
        dc2,
        f"DROP USER IF EXISTS '{user}'@'%'",
        f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON *.* TO '{user}'@'%'",
        log_bin=False,
    )
    blind = TargetSession(TargetSettings(dc2.host, dc2.port, user, password))
    try:
        assert blind.table(DB, "audited").keeps_order
        assert blind.table(DB, "plain").keeps_order  # no trigger, but it cannot know
    finally:
        blind.close()
    execute(dc2, f"GRANT TRIGGER ON {DB}.* TO '{user}'@'%'", log_bin=False)
    seeing = TargetSession(TargetSettings(dc2.host, dc2.port, user, password))
    try:
        assert not seeing.table(DB, "plain").keeps_order
        assert seeing.table(DB, "audited").keeps_order
    finally:
        seeing.close()
        execute(dc2, f"DROP USER '{user}'@'%'", log_bin=False)


def _change(op: Op, before: dict[str, Any] | None, after: dict[str, Any] | None) -> RowChange:
    return RowChange(DB, "uniq", op, before, after)


def _rows(server: ServerInfo) -> list[tuple[Any, ...]]:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, u, v, w FROM {DB}.uniq ORDER BY id")
        rows = list(cur.fetchall())
    conn.close()
    return rows


def test_a_group_batched_by_shape_ends_as_one_by_one(
    session: TargetSession, dc2: ServerInfo
) -> None:
    def r(id_: int, u: str | None, v: int, w: int | None) -> dict[str, Any]:
        return {"id": id_, "u": u, "v": v, "w": w}

    changes = [
        _change(Op.INSERT, None, r(1, "a", 1, 1)),
        _change(Op.INSERT, None, r(2, "b", 2, None)),
        _change(Op.UPDATE, r(1, "a", 1, 1), r(1, "c", 1, 1)),  # frees u = 'a'
        _change(Op.INSERT, None, r(3, "A", 3, None)),  # takes it (case-insensitive): waits
        _change(Op.DELETE, r(2, "b", 2, None), None),
        _change(Op.INSERT, None, r(4, "d", 2, None)),  # (2, NULL) never collides
        _change(Op.DELETE, r(3, "A", 3, None), None),
    ]
    table = session.table(DB, "uniq")
    planner = plan.Planner()
    writes = [w for c in changes for w in planner.add(c, table)] + planner.finish()
    assert len(writes) < len(changes)
    row = CheckpointRow("shapes", SCN.parse("1:1:1:1"), "dc1", "e")
    effects = session.write(writes, [], row)
    assert effects.fixes == 0
    assert _rows(dc2) == [(1, "c", 1, 1), (4, "d", 2, None)]
    effects = session.write(writes, [], row)  # a replay converges, and counts its fixes
    assert _rows(dc2) == [(1, "c", 1, 1), (4, "d", 2, None)]
    assert effects.fixes > 0
