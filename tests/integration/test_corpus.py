"""Another project's data-type scripts, carried through two live DRC nodes in both directions.

shared/corpus holds Debezium's MySQL/MariaDB test scripts (every type, odd identifiers, keyless
tables, zero dates under a changed sql_mode, CREATE TABLE .. LIKE, a stored function, DROP and
CREATE of a database). Each script is loaded on one side the way Debezium loads it, into a
database of its own; once the channels are idle, every table and schema object of those databases
must be identical on the other side: the same tables, SHOW CREATE TABLE, CHECKSUM TABLE and
multiset of rows, the same views, routines and triggers. Then the same again the other way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.corpus import (
    FIXED_DATABASES,
    PREFIX,
    corpus_files,
    database_of,
    drop_databases,
    ident,
    load,
)
from tests.support.servers import query


def snapshot(server: ServerInfo, databases: list[str]) -> dict[str, Any]:
    """Everything a user would compare: object definitions and table contents."""
    placeholders = ", ".join(["%s"] * len(databases))
    out: dict[str, Any] = {}
    tables = query(
        server,
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES "
        f"WHERE TABLE_SCHEMA IN ({placeholders}) ORDER BY 1, 2",
        databases,
    )
    for schema, table, kind in tables:
        name = f"{ident(schema)}.{ident(table)}"
        if kind == "VIEW":
            out[f"view {name}"] = query(
                server,
                "SELECT VIEW_DEFINITION, CHECK_OPTION, SECURITY_TYPE FROM information_schema.VIEWS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (schema, table),
            )
            continue
        create = query(server, f"SHOW CREATE TABLE {name}")[0][1]
        out[f"table {name}"] = re.sub(r" AUTO_INCREMENT=\d+", "", create)
        out[f"checksum {name}"] = query(server, f"CHECKSUM TABLE {name}")[0][1]
        rows = query(server, f"SELECT * FROM {name}")
        out[f"rows {name}"] = sorted(repr(row) for row in rows)
    out["routines"] = query(
        server,
        "SELECT ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE, ROUTINE_DEFINITION FROM "
        f"information_schema.ROUTINES WHERE ROUTINE_SCHEMA IN ({placeholders}) ORDER BY 1, 2",
        databases,
    )
    out["triggers"] = query(
        server,
        "SELECT TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_TABLE, ACTION_STATEMENT FROM "
        f"information_schema.TRIGGERS WHERE TRIGGER_SCHEMA IN ({placeholders}) ORDER BY 1, 2",
        databases,
    )
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [key for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]


@pytest.fixture
def nodes(sandbox: SandboxDescription, tmp_path: Path) -> Iterator[dict[str, Node]]:
    patterns = [f"{PREFIX}*.*", *(f"{db}.*" for db in FIXED_DATABASES)]
    configs = write_configs(sandbox, tmp_path, tables=patterns, no_primary_key="match_whole_row")
    with running_nodes(configs) as started:
        yield started


@pytest.mark.slow
@pytest.mark.parametrize("origin", ["dc1", "dc2"])
def test_the_corpus_arrives_identical(
    sandbox: SandboxDescription, nodes: dict[str, Node], origin: str
) -> None:
    source = sandbox.server(origin)
    other = next(s for s in sandbox.servers if s.datacenter != origin)
    databases = [database_of(path) for path in corpus_files()] + list(FIXED_DATABASES)
    drop_databases([source, other], databases)

    failed = []
    for path in corpus_files():
        try:
            load(source, path)
        except pymysql.MySQLError as exc:
            failed.append(f"{path.name}: {exc}")
    assert not failed, f"the corpus did not load on the source: {failed}"

    expected = snapshot(source, databases)
    assert sum(key.startswith("table ") for key in expected) > 100
    assert wait_for(lambda: snapshot(other, databases) == expected, 180, interval=1.0), differences(
        expected, snapshot(other, databases)
    )
