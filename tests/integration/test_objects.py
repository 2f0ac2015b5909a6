"""Views, routines, triggers and events follow their DDL both ways (drc.apply.objects).

Two DRC nodes run in this process against the sandbox's dc1 and dc2. Each object kind is
created, altered and dropped on one side and must end with the same SHOW CREATE text on the
other (a trigger differs by DRC's @drc_apply guard only, and a trigger created unguarded gets
that guard on its own side too); a trigger's effect is not doubled on either side; an event is
DISABLE ON SLAVE where it was not created; nothing echoes back; a kind left out of a channel's
``objects`` is counted, not applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from drc.core import schema_objects
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.servers import connect, execute, query

SCHEMA = "objects_db"
SHOW = {"view": ("TABLE", 1), "function": ("FUNCTION", 2), "procedure": ("PROCEDURE", 2),
        "trigger": ("TRIGGER", 2), "event": ("EVENT", 3)}  # fmt: skip


@pytest.fixture(scope="module")
def nodes(
    sandbox: SandboxDescription, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Node]]:
    configs = write_configs(sandbox, tmp_path_factory.mktemp("objects"), schema=SCHEMA)
    # dc1 leaves events out of what it applies from dc2: those statements are only counted.
    text = configs["dc1"].read_text()
    configs["dc1"].write_text(
        text.replace("wait_ms = 200\n", 'wait_ms = 200\nobjects = ["view", "function", '
                     '"procedure", "trigger"]\n', 1)
    )  # fmt: skip
    for server in (sandbox.server("dc1"), sandbox.server("dc2")):
        _run(server, f"DROP DATABASE IF EXISTS {SCHEMA}")
    with running_nodes(configs) as running:
        _run(sandbox.server("dc1"), f"CREATE DATABASE {SCHEMA}")
        assert wait_for(lambda: _exists(sandbox.server("dc2"), "SCHEMATA", "SCHEMA_NAME",
                                        SCHEMA, "1"), 30)  # fmt: skip
        yield running


def _run(server: ServerInfo, *statements: str, database: str | None = None) -> None:
    execute(server, *statements, database=database)


def _query(server: ServerInfo, statement: str) -> list[tuple[Any, ...]]:
    return query(server, statement)


def _exists(server: ServerInfo, table: str, column: str, name: str, where: str) -> bool:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT 1 FROM information_schema.{table} WHERE {column} = %s AND {where}", (name,)
        )
        found = cur.fetchone() is not None
    conn.close()
    return found


def _show(server: ServerInfo, kind: str, name: str) -> str | None:
    word, column = SHOW[kind]
    try:
        rows = _query(server, f"SHOW CREATE {word} `{SCHEMA}`.`{name}`")
    except Exception:  # noqa: BLE001 - no such object
        return None
    return str(rows[0][column]) if rows else None


def _same_on(target: ServerInfo, source: ServerInfo, kind: str, name: str) -> bool:
    wanted = _show(source, kind, name)
    if wanted is not None and kind == "trigger":
        found = schema_objects.parse(wanted, SCHEMA)
        assert found is not None
        wanted = schema_objects.guard_trigger(wanted, found)
    return _show(target, kind, name) == wanted


def _objects(suffix: str) -> dict[str, list[str]]:
    """kind -> [create, alter, drop] statements for objects named with ``suffix``."""
    t, audit = f"t_{suffix}", f"audit_{suffix}"
    return {
        "view": [f"CREATE VIEW v_{suffix} AS SELECT id FROM {t}",
                 f"ALTER VIEW v_{suffix} AS SELECT id, v FROM {t}", f"DROP VIEW v_{suffix}"],
        "function": [f"CREATE FUNCTION `{SCHEMA}`.f_{suffix}(x INT) RETURNS INT DETERMINISTIC "
                     "RETURN x + 1", f"ALTER FUNCTION f_{suffix} COMMENT 'two'",
                     f"DROP FUNCTION f_{suffix}"],
        "procedure": [f"CREATE PROCEDURE p_{suffix}(IN a INT) BEGIN SELECT a; END",
                      f"ALTER PROCEDURE p_{suffix} COMMENT 'two'", f"DROP PROCEDURE p_{suffix}"],
        "trigger": [f"CREATE TRIGGER trg_{suffix} AFTER INSERT ON {t} FOR EACH ROW BEGIN "
                    f"INSERT INTO {audit} (tid) VALUES (NEW.id); END",
                    f"CREATE OR REPLACE TRIGGER trg_{suffix} AFTER INSERT ON {t} FOR EACH ROW "
                    f"INSERT INTO {audit} (tid) VALUES (NEW.id)", f"DROP TRIGGER trg_{suffix}"],
        "event": [f"CREATE EVENT e_{suffix} ON SCHEDULE EVERY 1 HOUR DISABLE DO "
                  f"DELETE FROM {audit} WHERE id < 0",
                  f"ALTER EVENT e_{suffix} ON SCHEDULE EVERY 2 HOUR", f"DROP EVENT e_{suffix}"],
    }  # fmt: skip


@pytest.mark.parametrize(("source", "target"), [("dc1", "dc2"), ("dc2", "dc1")])
def test_each_kind_created_altered_dropped_ends_identical(
    sandbox: SandboxDescription, nodes: dict[str, Node], source: str, target: str
) -> None:
    src, dst = sandbox.server(source), sandbox.server(target)
    suffix = source
    _run(src, f"CREATE TABLE t_{suffix} (id INT PRIMARY KEY, v INT)",
         f"CREATE TABLE audit_{suffix} (id INT AUTO_INCREMENT PRIMARY KEY, tid INT)",
         database=SCHEMA)  # fmt: skip
    statements = _objects(suffix)
    kinds = [k for k in statements if not (k == "event" and target == "dc1")]
    skipped_before = nodes[target].channels[0].stats.ddl_skipped
    for step in range(3):
        _run(src, *(statements[kind][step] for kind in statements), database=SCHEMA)
        for kind in kinds:
            name = {"view": "v", "function": "f", "procedure": "p", "trigger": "trg",
                    "event": "e"}[kind] + f"_{suffix}"  # fmt: skip
            assert wait_for(lambda k=kind, n=name: _same_on(dst, src, k, n), 30), (
                kind,
                step,
                _show(src, kind, name),
                _show(dst, kind, name),
            )
            if step < 2:
                assert _show(dst, kind, name) is not None
    if target == "dc1":  # dc1's channel leaves events out: 3 event statements counted
        assert wait_for(lambda: nodes["dc1"].channels[0].stats.ddl_skipped == skipped_before + 3,
                        30)  # fmt: skip
        assert not _exists(dst, "EVENTS", "EVENT_NAME", "e_dc2", "1")
    # No echo: neither channel saw its own DDL come back (only the other side's).
    for node in nodes.values():
        assert node.channels[0].stats.last_error is None


def test_trigger_effect_is_not_doubled(sandbox: SandboxDescription, nodes: dict[str, Node]) -> None:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    _run(dc1, "CREATE TABLE tt (id INT PRIMARY KEY, v INT)",
         "CREATE TABLE tt_audit (id INT AUTO_INCREMENT PRIMARY KEY, tid INT, made_on VARCHAR(8))",
         "CREATE TRIGGER tt_ins AFTER INSERT ON tt FOR EACH ROW "
         "INSERT INTO tt_audit (tid, made_on) VALUES (NEW.id, @@hostname)",
         # A trigger written with DRC's guard is applied as written and does not fire for
         # rows DRC applies on its own side either.
         "CREATE TRIGGER tt_upd AFTER UPDATE ON tt FOR EACH ROW IF @drc_apply IS NULL THEN "
         "INSERT INTO tt_audit (tid, made_on) VALUES (-NEW.id, 'upd'); END IF",
         database=SCHEMA)  # fmt: skip
    assert wait_for(lambda: _same_on(dc2, dc1, "trigger", "tt_upd"), 30)
    assert _show(dc2, "trigger", "tt_upd") == _show(dc1, "trigger", "tt_upd")
    assert wait_for(lambda: _same_on(dc2, dc1, "trigger", "tt_ins"), 30)
    _run(dc1, *(f"INSERT INTO tt VALUES ({i}, 0)" for i in range(1, 6)), database=SCHEMA)
    count = f"SELECT COUNT(*) FROM {SCHEMA}.tt"
    assert wait_for(lambda: _query(dc2, count) == [(5,)], 30)  # dc2 updates rows it has
    _run(dc2, *(f"UPDATE tt SET v = 1 WHERE id = {i}" for i in (1, 2)), database=SCHEMA)

    def audit(server: ServerInfo) -> list[tuple[Any, ...]]:
        return _query(server, f"SELECT tid FROM {SCHEMA}.tt_audit ORDER BY tid")

    # The audit ids are AUTO_INCREMENT on both sides (no auto_increment_offset here): dc1's
    # next audit row must come after dc2's have arrived, or both sides take the same id.
    assert wait_for(lambda: (-1,) in audit(dc1) and (-2,) in audit(dc1), 30), audit(dc1)
    _run(dc1, "UPDATE tt SET v = 2 WHERE id = 3", database=SCHEMA)

    wanted = [(-3,), (-2,), (-1,), (1,), (2,), (3,), (4,), (5,)]
    assert wait_for(lambda: audit(dc1) == audit(dc2) == wanted, 30), (audit(dc1), audit(dc2))
    rows = f"SELECT * FROM {SCHEMA}.tt ORDER BY id"
    assert _query(dc1, rows) == _query(dc2, rows)


def test_unguarded_trigger_fires_once_per_insert_on_both_sides(
    sandbox: SandboxDescription, nodes: dict[str, Node]
) -> None:
    """A trigger written without DRC's guard on dc1: DRC guards it there too (LocalTriggerGuard),
    so rows the channel applies on dc1 do not fire it a second time."""
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    _run(dc1, "CREATE TABLE ug (id INT PRIMARY KEY, v INT)",
         # Keys unique per server (an auto-increment key would let the applied audit row
         # overwrite a second one made by the trigger, hiding the doubling).
         "CREATE TABLE ug_audit (id BIGINT UNSIGNED PRIMARY KEY, tid INT)",
         "CREATE TRIGGER ug_ins AFTER INSERT ON ug FOR EACH ROW "
         "INSERT INTO ug_audit VALUES (UUID_SHORT(), NEW.id)",
         database=SCHEMA)  # fmt: skip

    # Both sides end with the same definition, DRC's wrapper included.
    def same() -> bool:
        return _show(dc1, "trigger", "ug_ins") == _show(dc2, "trigger", "ug_ins")

    assert wait_for(lambda: _same_on(dc2, dc1, "trigger", "ug_ins") and same(), 30), (
        _show(dc1, "trigger", "ug_ins"),
        _show(dc2, "trigger", "ug_ins"),
    )
    _run(dc1, "INSERT INTO ug VALUES (1, 0)", "INSERT INTO ug VALUES (2, 0)", database=SCHEMA)
    _run(dc2, "INSERT INTO ug VALUES (11, 0)", "INSERT INTO ug VALUES (12, 0)", database=SCHEMA)

    def audit(server: ServerInfo) -> list[tuple[Any, ...]]:
        return _query(server, f"SELECT tid FROM {SCHEMA}.ug_audit ORDER BY tid")

    wanted = [(1,), (2,), (11,), (12,)]
    rows = f"SELECT * FROM {SCHEMA}.ug ORDER BY id"
    assert wait_for(lambda: len(_query(dc1, rows)) == len(_query(dc2, rows)) == 4, 30)
    assert wait_for(lambda: audit(dc1) == audit(dc2) == wanted, 30), (audit(dc1), audit(dc2))
    assert _query(dc1, rows) == _query(dc2, rows)
    assert same()
    guarded = nodes["dc1"].service.replicator.stats.triggers_guarded  # type: ignore[union-attr]
    assert guarded >= 1


def test_event_is_disabled_on_the_other_side(
    sandbox: SandboxDescription, nodes: dict[str, Node]
) -> None:
    """An enabled event runs only where it was created (DISABLE ON SLAVE elsewhere, as native
    replication does), so its writes are not doubled."""
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    _run(dc1, "CREATE TABLE ev_t (id INT AUTO_INCREMENT PRIMARY KEY)",
         "CREATE EVENT ev_on ON SCHEDULE EVERY 1 HOUR STARTS '2030-01-01 00:00:00' "
         "DO INSERT INTO ev_t () VALUES ()",
         database=SCHEMA)  # fmt: skip
    status = (f"SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = '{SCHEMA}' "
              "AND EVENT_NAME = 'ev_on'")  # fmt: skip
    assert wait_for(lambda: _query(dc2, status) == [("SLAVESIDE_DISABLED",)], 30), _query(
        dc2, status
    )
    assert _query(dc1, status) == [("ENABLED",)]
    _run(dc1, "ALTER EVENT ev_on DISABLE", "ALTER EVENT ev_on ENABLE", database=SCHEMA)
    _run(dc1, "CREATE TABLE ev_marker (id INT PRIMARY KEY)", database=SCHEMA)
    assert wait_for(lambda: _exists(dc2, "TABLES", "TABLE_NAME", "ev_marker", "1"), 30)
    assert _query(dc2, status) == [("SLAVESIDE_DISABLED",)]
    assert _query(dc1, status) == [("ENABLED",)]
