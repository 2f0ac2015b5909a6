"""Another project's data-type scripts, carried through two live DRC nodes in both directions.

shared/corpus holds Debezium's MySQL/MariaDB test scripts (every type, odd identifiers, keyless
tables, zero dates under a changed sql_mode, CREATE TABLE .. LIKE, a stored function, DROP and
CREATE of a database). Each script is loaded on one side the way Debezium loads it, into a
database of its own; once the channels are idle, every table and schema object of those databases
must be identical on the other side: the same tables, SHOW CREATE TABLE, CHECKSUM TABLE and
multiset of rows, the same views, routines and triggers. Then the same again the other way.
"""

from __future__ import annotations

import os
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
from tests.support.servers import connect, query

# The corpus is not shipped with DRC: shared/ beside the checkout, or DRC_CORPUS_DIR, or the
# workplace's copy (CI clones the repository elsewhere on the same machine).
CORPUS = next(
    (
        path
        for path in (
            Path(os.environ.get("DRC_CORPUS_DIR", "/nonexistent")),
            Path(__file__).resolve().parents[3] / "shared" / "corpus" / "debezium",
            Path("/work/shared/corpus/debezium"),
        )
        if path.is_dir()
    ),
    Path(__file__).resolve().parents[3] / "shared" / "corpus" / "debezium",
)
# Databases the scripts name themselves, besides the one each is loaded into.
FIXED_DATABASES = ("connector_test", "emptydb", "transactionpayload_test")
PREFIX = "dbz_"


def corpus_files() -> list[Path]:
    files = sorted(CORPUS.glob("*.sql"))
    if not files:
        pytest.fail(f"no corpus scripts in {CORPUS}: check out shared/ beside the repository")
    return files


def statements(script: str) -> Iterator[str]:
    """Debezium's loader: drop `--` lines, cut trailing `-- ` comments, split on `;`, `$$`->`;`."""
    kept = []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        kept.append(re.sub(r"\s--\s.*$", "", line))
    for piece in "\n".join(kept).split(";"):
        if piece.strip():
            yield piece.replace("$$", ";").strip()


def database_of(path: Path) -> str:
    return PREFIX + re.sub(r"\W", "_", path.stem)


def load(server: ServerInfo, path: Path) -> None:
    database = database_of(path)
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}`")
            cur.execute(f"USE `{database}`")
            for statement in statements(path.read_text()):
                cur.execute(statement)
                while cur.nextset():
                    pass
    finally:
        conn.close()


def _ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


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
        name = f"{_ident(schema)}.{_ident(table)}"
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


def _drop_databases(servers: list[ServerInfo], databases: list[str]) -> None:
    for server in servers:
        conn = connect(server)
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")  # a clean slate, not a replicated change
            for database in databases:
                cur.execute(f"DROP DATABASE IF EXISTS {_ident(database)}")
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("origin", ["dc1", "dc2"])
def test_the_corpus_arrives_identical(
    sandbox: SandboxDescription, nodes: dict[str, Node], origin: str
) -> None:
    source = sandbox.server(origin)
    other = next(s for s in sandbox.servers if s.datacenter != origin)
    databases = [database_of(path) for path in corpus_files()] + list(FIXED_DATABASES)
    _drop_databases([source, other], databases)

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
