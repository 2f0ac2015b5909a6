"""Bulk catch-up (real Spark, local mode) of a backlog holding an online schema change tool's
run, with ``online_schema_change = "replay"``: dc2 ends with the tool's ALTER run on the table
and dc1's rows, never having seen the shadow table or its triggers. The backlog is replayed in
two catch-up runs, the first ending in the middle of the tool's copy: the second one reads the
pending ALTER back from drc.osc_pending. The statements are pt-online-schema-change's own
(tests/integration/test_online_schema_change.py runs the real tool under streaming)."""

from __future__ import annotations

from pathlib import Path

import pytest

from drc.catchup.driver import run_catchup
from drc.config import load_config
from drc.sandbox.sandbox import ServerInfo
from tests.support.catchup import checkpoint_of, config_for, prepare, served
from tests.support.servers import execute, master_position, query

pytestmark = pytest.mark.integration

SCHEMA = "osc_cu"
S = f"`{SCHEMA}`"
NEW = f"{S}.`_t_new`"
TRIGGERS = [
    f"CREATE TRIGGER {S}.`pt_osc_{SCHEMA}_t_del` AFTER DELETE ON {S}.`t` FOR EACH ROW "
    f"DELETE IGNORE FROM {NEW} WHERE {NEW}.`id` <=> OLD.`id`",
    f"CREATE TRIGGER {S}.`pt_osc_{SCHEMA}_t_upd` AFTER UPDATE ON {S}.`t` FOR EACH ROW "
    f"REPLACE INTO {NEW} (`id`, `v`) VALUES (NEW.`id`, NEW.`v`)",
    f"CREATE TRIGGER {S}.`pt_osc_{SCHEMA}_t_ins` AFTER INSERT ON {S}.`t` FOR EACH ROW "
    f"REPLACE INTO {NEW} (`id`, `v`) VALUES (NEW.`id`, NEW.`v`)",
]


def _writes(server: ServerInfo, start: int) -> None:
    """Inserts, updates and deletes of ``t`` (which the tool's triggers carry into _t_new)."""
    statements = []
    for i in range(start, start + 30):
        statements.append(f"INSERT INTO {S}.t (id, v) VALUES ({1000 + i}, {i})")
        statements.append(f"UPDATE {S}.t SET v = v + 1 WHERE id = {i * 3 % 200 + 1}")
        if i % 5 == 0:
            statements.append(f"DELETE FROM {S}.t WHERE id = {i * 7 % 200 + 1}")
    execute(server, *statements)


def _catchup(tmp_path: Path, dc2: ServerInfo, url: str, to: object) -> None:
    path = config_for(tmp_path, dc2, url, "cu-osc", SCHEMA, online_schema_change="replay")
    summary = run_catchup(load_config(path), "cu-osc", to=to, master="local[2]",  # type: ignore[arg-type]
                          partitions=2, out=print)  # fmt: skip
    assert summary.to == to and checkpoint_of(dc2, "cu-osc") == str(to)


@pytest.mark.slow
def test_catchup_replays_a_tools_alter_across_two_runs(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    prepare(dc1, dc2, SCHEMA)
    execute(dc2, "DROP TABLE IF EXISTS drc.osc_pending")
    with served(dc1, tmp_path, SCHEMA) as (capture, url):
        execute(dc1, f"CREATE DATABASE {S}", f"CREATE TABLE {S}.t (id INT PRIMARY KEY, v INT)")
        execute(dc1, *(f"INSERT INTO {S}.t VALUES ({i}, {i})" for i in range(1, 201)))
        execute(
            dc1,
            f"CREATE TABLE {NEW} (`id` int(11) NOT NULL, `v` int(11) DEFAULT NULL, "
            "PRIMARY KEY (`id`)) ENGINE=InnoDB",
            f"ALTER TABLE {NEW} ADD COLUMN extra INT NOT NULL DEFAULT 7",
            *TRIGGERS,
            f"INSERT LOW_PRIORITY IGNORE INTO {NEW} (`id`, `v`) SELECT `id`, `v` FROM {S}.t "
            "WHERE id <= 100 LOCK IN SHARE MODE",
        )
        _writes(dc1, 0)
        capture.wait_for(master_position(dc1))
        middle = capture.buffer.last_scn
        _catchup(tmp_path, dc2, url, middle)
        pending = query(dc2, "SELECT table_name, shadow, state, alters FROM drc.osc_pending")
        assert pending == [
            ("t", "_t_new", "copying", '["ADD COLUMN extra INT NOT NULL DEFAULT 7"]')
        ]
        assert query(dc2, f"SHOW TABLES FROM {S}") == [("t",)]

        execute(
            dc1,
            f"INSERT LOW_PRIORITY IGNORE INTO {NEW} (`id`, `v`) SELECT `id`, `v` FROM {S}.t "
            "WHERE id > 100 LOCK IN SHARE MODE",
        )
        _writes(dc1, 30)
        execute(
            dc1,
            f"RENAME TABLE {S}.`t` TO {S}.`_t_old`, {NEW} TO {S}.`t`",
            f"DROP TABLE IF EXISTS {S}.`_t_old`",
            *(f"DROP TRIGGER IF EXISTS {S}.`pt_osc_{SCHEMA}_t_{e}`" for e in ("del", "upd", "ins")),
            f"UPDATE {S}.t SET extra = 8 WHERE id % 10 = 0",
        )
        _writes(dc1, 60)
        capture.wait_for(master_position(dc1))
        _catchup(tmp_path, dc2, url, capture.buffer.last_scn)

    def state(server: ServerInfo) -> tuple[object, ...]:
        return (
            query(server, f"SHOW CREATE TABLE {S}.t")[0][1],
            query(server, f"SELECT id, v, extra FROM {S}.t ORDER BY id"),
            query(server, f"SHOW TABLES FROM {S}"),
            query(server, f"SELECT trigger_name FROM information_schema.triggers "
                          f"WHERE trigger_schema = '{SCHEMA}'"),
        )  # fmt: skip

    assert state(dc2) == state(dc1)
    assert "`extra` int(11) NOT NULL DEFAULT 7" in state(dc2)[0]  # type: ignore[operator]
    assert query(dc2, "SELECT COUNT(*) FROM drc.osc_pending") == [(0,)]
