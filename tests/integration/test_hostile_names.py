"""Table names written to break SQL text replicate like any other, and never run as SQL.

A table created on dc1 (DDL), its rows inserted, updated and deleted there (DML), the
lww triggers and tombstone table the dc2 channel makes for it, a local delete on dc2 (the
trigger writes the name into the tombstone), a conflict (drc.conflicts names the table, and
``drc conflicts list`` shows it). The first name is the reviewer's attack of issue #12: it once
made dc2 run ``CREATE DATABASE pwn``. One channel serves every name (a module fixture), so the
module stays fast.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from drc.apply import checkpoint
from drc.apply.service import build_channel
from drc.cli.main import cli
from drc.conflicts import log as conflict_log
from drc.conflicts import tombstones
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.mysql.sql import quote
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.config import server_toml
from tests.support.servers import drop_everywhere, execute, position, query
from tests.support.waits import wait_for

pytestmark = pytest.mark.integration

SCHEMA = "hostile_names"
ATTACK = "x\\';CREATE DATABASE pwn;#"
NAMES = [
    ATTACK,
    "back\\slash",
    "trailing\\",
    "\\'",
    "it's",
    'say "hi"',
    "tick`name",
    "semi;colon",
    "hash#name",
    "dash--name",
    "all'\"`\\;#-- at once\\",
]
T = dt.datetime(2024, 1, 1, 12, 0, 0)


@pytest.fixture(scope="module")
def channel(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    """dc1 captured, a lww channel from dc1 applying to dc2 for every table of SCHEMA."""
    drop_everywhere(SCHEMA, dc1, dc2)
    drop_everywhere("pwn", dc1, dc2)
    execute(dc2, *checkpoint.create_statements(), *conflict_log.create_statements())
    _forget_channel(dc2)
    for server in (dc1, dc2):
        execute(server, f"CREATE DATABASE {SCHEMA}")
    lww = ConflictsConfig(
        priority=("dc1", "dc2"),
        tables=(ConflictTableConfig(table=f"{SCHEMA}.*", policy="lww", column="ts"),),
    )
    directory = tmp_path_factory.mktemp("hostile")
    with serving(dc1, directory / "buf", [f"{SCHEMA}.*"], position(dc1)) as (_, url):
        config = channel_config("hostile", url, [f"{SCHEMA}.*"])
        target = apply_user(dc2)
        with Running(build_channel(config, target, conflicts=lww, datacenter="dc2")) as running:
            yield running
    drop_everywhere(SCHEMA, dc1, dc2)
    _forget_channel(dc2)


def _forget_channel(server: ServerInfo) -> None:
    """What the channel left in drc (other tests count conflicts and checkpoints there)."""
    companions = [tombstones.drop_table(SCHEMA, name) for name in NAMES]
    execute(server, *companions, "DELETE FROM drc.conflicts WHERE channel = 'hostile'",
            "DELETE FROM drc.checkpoint WHERE channel = 'hostile'")  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_a_hostile_table_name_replicates_everywhere_a_name_goes(
    name: str, channel: Running, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    table = f"{quote(SCHEMA)}.{quote(name)}"
    execute(
        dc1,
        f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20), ts DATETIME(3) NOT NULL)",
        *(f"INSERT INTO {table} VALUES ({i}, 'dc1', '{T}')" for i in (1, 2, 3)),
    )
    rows = f"SELECT id, v FROM {table} ORDER BY id"
    wait_for(lambda: _rows(dc2, rows) == [(1, "dc1"), (2, "dc1"), (3, "dc1")], "the rows",
             running=channel)  # fmt: skip
    wait_for(lambda: len(_triggers(dc2, name)) == 3, "the lww triggers", running=channel)
    assert _databases(dc2, "pwn") == [], "a table name ran as SQL on the target"

    # a delete applied by the channel, then one made by an application on dc2 (the trigger)
    execute(dc1, f"DELETE FROM {table} WHERE id = 1")
    wait_for(lambda: _tomb(dc2, name) == [(1, SCHEMA, name, "dc1")], "the channel's tombstone",
             running=channel)  # fmt: skip
    execute(dc2, f"DELETE FROM {table} WHERE id = 2")
    assert _tomb(dc2, name) == [(1, SCHEMA, name, "dc1"), (2, SCHEMA, name, "dc2")]

    # a conflict: dc2 changed row 3 later than dc1 did, so dc2's row stays and it is logged
    execute(dc2, f"UPDATE {table} SET v = 'dc2', ts = '{T + dt.timedelta(seconds=10)}' "
                 "WHERE id = 3")  # fmt: skip
    execute(dc1, f"UPDATE {table} SET v = 'dc1 newer', ts = '{T + dt.timedelta(seconds=1)}' "
                 "WHERE id = 3")  # fmt: skip
    logged = "SELECT schema_name, table_name, kind, decision FROM drc.conflicts WHERE " \
             "table_name = %s"  # fmt: skip
    wait_for(lambda: query(dc2, logged, (name,)) == [(SCHEMA, name, "update-update", "local")],
             "the conflict logged", running=channel)  # fmt: skip
    assert _rows(dc2, rows) == [(3, "dc2")]
    assert _rows(dc1, rows) == [(2, "dc1"), (3, "dc1 newer")]
    listed = _conflicts_list(dc2, tmp_path, f"{SCHEMA}.{quote(name)}")  # as an operator would
    assert f"{SCHEMA}.{name}" in listed and "update-update" in listed

    assert _databases(dc2, "pwn") == [] and _databases(dc1, "pwn") == []
    assert channel.error is None


def _rows(server: ServerInfo, sql: str) -> list[Any] | None:
    try:
        return query(server, sql)
    except Exception:  # the table is not there yet
        return None


def _triggers(server: ServerInfo, name: str) -> list[Any]:
    sql = ("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s "
           "AND EVENT_OBJECT_TABLE = %s")  # fmt: skip
    return query(server, sql, (SCHEMA, name))


def _tomb(server: ServerInfo, name: str) -> list[Any] | None:
    companion = f"{quote(tombstones.SCHEMA)}.{quote(tombstones.name(SCHEMA, name))}"
    return _rows(server, f"SELECT id, `drc$schema`, `drc$table`, `drc$origin` FROM {companion} "
                         "ORDER BY id")  # fmt: skip


def _databases(server: ServerInfo, name: str) -> list[Any]:
    return query(server, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE "
                 "SCHEMA_NAME = %s", (name,))  # fmt: skip


def _conflicts_list(server: ServerInfo, directory: Path, table: str) -> str:
    config = directory / "dc2.toml"
    config.write_text(
        f'[datacenter]\nname = "dc2"\n{server_toml("source", server)}\n'
        f'[replicator]\nbuffer_dir = "{directory / "buffer"}"\n'
    )
    args = ["conflicts", "list", "--table", table, "--config", str(config)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.output
