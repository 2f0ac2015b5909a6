"""FLOAT, DOUBLE and DECIMAL primary keys: deletes, key changes and updates arrive, both ways,
under every conflict policy, and no false conflict is logged (issue 24, 4).

Two DRC nodes (replicator + API + channel from the other side) run against the sandbox's dc1 and
dc2, as in test_conflicts. One table per policy (none, lww, keep, overwrite, resolver) and key
shape: the key column ``k`` alone or after an INT ``id``, as FLOAT, DOUBLE or DECIMAL. Each
datacenter inserts its own rows (edge values: 0.1, 1e-38, 1/3, the type's largest value, -0.0,
denormals), waits until the other side has them all, then deletes some, moves the key of two
(1/3 to 0.2, as in the issue), and updates two: one transaction per statement, so each change
reaches the other side's channel as a lookup of a row already there, never one made in the
same target transaction. Clients name rows by their unique ``v``, never by the key.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pymysql
import pytest

from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.servers import connect, fresh_database, retrying

SCHEMA = "fk_db"
POLICIES = ("plain", "lww", "keep", "overwrite", "resolver")
CONFLICTS = conflicts_toml(
    conflict_rule("fk_db.lww_*", "lww", column="updated_at"),
    conflict_rule("fk_db.keep_*", "keep"),
    conflict_rule("fk_db.overwrite_*", "overwrite"),
    conflict_rule("fk_db.resolver_*", "resolver", resolver="tests.integration.resolvers:merge_max"),
)


def _single(value: float) -> float:
    """What a FLOAT column holds (and reads back as ``k + 0e0``) for ``value``."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


@dataclass(frozen=True)
class KeyType:
    name: str
    sql: str
    values: tuple[Any, ...]  # dc1's rows (dc2's negated where the key is the value alone)
    moved_to: tuple[Any, Any]  # the new keys of rows 2 and 3
    zero_elsewhere: Any  # dc2's stand-in for -0.0 in a key of its own (0 = -0 as a key)

    def stored(self, value: Any) -> Any:
        return _single(value) if self.name == "float" else value


TYPES = (
    KeyType(
        "float",
        "FLOAT",
        (0.1, 1e-38, 1 / 3, 3.402823466e38, -0.0, 1e-45, 0.7, 1.1754944e-38),
        (0.2, 2.5),
        1.5,
    ),  # fmt: skip
    KeyType(
        "double",
        "DOUBLE",
        (0.1, 1e-38, 1 / 3, 1.7976931348623157e308, -0.0, 5e-324, 0.7, 2.2250738585072014e-308),
        (0.2, 2.5),
        1.5,
    ),  # fmt: skip
    KeyType(
        "decimal",
        "DECIMAL(30,15)",
        tuple(
            Decimal(v)
            for v in (
                "0.100000000000000",
                "0.000000000000001",
                "0.333333333333333",
                "999999999999999.999999999999999",
                "0.000000000000000",
                "-123.000000000000001",
                "0.700000000000000",
                "12.500000000000000",
            )
        ),
        (Decimal("0.200000000000000"), Decimal("2.500000000000000")),
        Decimal("1.500000000000000"),
    ),  # fmt: skip
)


@dataclass(frozen=True)
class Table:
    policy: str
    kind: KeyType
    composite: bool

    @property
    def name(self) -> str:
        return f"{self.policy}_{self.kind.name}{'_id' if self.composite else ''}"

    @property
    def key(self) -> tuple[str, ...]:
        return ("id", "k") if self.composite else ("k",)

    def create(self) -> str:
        key_columns = f"id INT NOT NULL, k {self.kind.sql} NOT NULL" if self.composite else (
            f"k {self.kind.sql} NOT NULL")  # fmt: skip
        return (
            f"CREATE TABLE {SCHEMA}.{self.name} ({key_columns}, v INT NOT NULL UNIQUE, "
            "n INT NOT NULL DEFAULT 0, updated_at DATETIME(6) NOT NULL DEFAULT "
            "CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), "
            f"PRIMARY KEY ({', '.join(self.key)}))"
        )

    def keys(self, side: int) -> list[Any]:
        """The key values side 1 (dc1) or 2 (dc2) inserts, then the two it moves rows to."""
        values = [*self.kind.values, *self.kind.moved_to]
        if self.composite or side == 1:
            return values
        return [_negated(v) if v != 0 else self.kind.zero_elsewhere for v in values]

    def row_key(self, side: int, value: Any) -> tuple[Any, ...]:
        return (side, value) if self.composite else (value,)

    def read(self) -> str:
        """The rows as compared: a FLOAT key read as the double it holds."""
        k = "k + 0e0" if self.kind.name == "float" else "k"
        columns = ", ".join([*(["id"] if self.composite else []), k, "v", "n", "updated_at"])
        return f"SELECT {columns} FROM {SCHEMA}.{self.name} ORDER BY {', '.join(self.key)}"


def _negated(value: Any) -> Any:
    return value.copy_negate() if isinstance(value, Decimal) else -value  # every digit kept


TABLES = [Table(p, kind, c) for p in POLICIES for kind in TYPES for c in (False, True)]


def _v(side: int, i: int) -> int:
    return 10 * side + i  # dc1's rows 10..17, dc2's 20..27


def expected(table: Table, side: int) -> list[tuple[Any, ...]]:
    """The rows of ``side`` after its workload (below): (key..., v) with the key as stored."""
    keys = [table.kind.stored(k) for k in table.keys(side)]
    rows = [(keys[8], _v(side, 2)), (keys[9], _v(side, 3) + 100), (keys[4], _v(side, 4) + 100),
            (keys[5], _v(side, 5) + 100), (keys[7], _v(side, 7))]  # fmt: skip
    return [(*table.row_key(side, k), v) for k, v in rows]


def _statements(table: Table, side: int) -> tuple[list[tuple[str, tuple[Any, ...]]], ...]:
    """(inserts, then the changes), each statement its own transaction."""
    name = f"{SCHEMA}.{table.name}"
    keys = table.keys(side)
    columns = ", ".join([*table.key, "v"])
    marks = ", ".join(["%s"] * (len(table.key) + 1))
    inserts = [
        (f"INSERT INTO {name} ({columns}) VALUES ({marks})",
         (*table.row_key(side, keys[i]), _v(side, i)))
        for i in range(8)
    ]  # fmt: skip
    v = [_v(side, i) for i in range(8)]
    changes = [
        (f"DELETE FROM {name} WHERE v IN (%s, %s)", (v[0], v[1])),  # 0.1 and 1e-38 at once
        (f"UPDATE {name} SET k = %s WHERE v = %s", (keys[8], v[2])),  # 1/3 -> 0.2
        (f"UPDATE {name} SET k = %s, v = v + 100 WHERE v = %s", (keys[9], v[3])),
        (f"UPDATE {name} SET v = v + 100 WHERE v IN (%s, %s)", (v[4], v[5])),
        (f"DELETE FROM {name} WHERE v = %s", (v[6],)),
    ]
    return inserts, changes


def _run(server: ServerInfo, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            for text, params in statements:  # each its own (autocommit) transaction
                retrying(lambda t=text, p=params: cur.execute(t, p))
    finally:
        conn.close()


def rows(server: ServerInfo, table: Table, with_time: bool = True) -> list[tuple[Any, ...]]:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(table.read())
            found = [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()
    width = len(table.key) + 1
    return found if with_time else [r[:width] for r in found]


def conflicts(server: ServerInfo) -> list[dict[str, Any]]:
    conn = connect(server, cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT table_name, primary_key, kind, decision, local_row FROM drc.conflicts "
                "WHERE schema_name = %s ORDER BY id",
                (SCHEMA,),
            )
            return list(cur.fetchall())
    finally:
        conn.close()


@dataclass
class Run:
    dc1: ServerInfo
    dc2: ServerInfo
    nodes: dict[str, Node]
    seconds: float = 0.0

    def settled(self, table: Table) -> bool:
        want = sorted(expected(table, 1) + expected(table, 2))
        one, two = rows(self.dc1, table, False), rows(self.dc2, table, False)
        return sorted(one) == sorted(two) == want


def _triggers(server: ServerInfo) -> int:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(DISTINCT EVENT_OBJECT_TABLE) FROM information_schema.TRIGGERS "
                "WHERE EVENT_OBJECT_SCHEMA = %s",
                (SCHEMA,),
            )
            return int(cur.fetchone()[0])
    finally:
        conn.close()


@pytest.fixture(scope="module")
def run(sandbox: SandboxDescription, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Both nodes up, both workloads run, and all the rows settled (or the wait given up)."""
    began = time.monotonic()
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    for server in (dc1, dc2):
        fresh_database(server, SCHEMA, *(t.create() for t in TABLES))
    configs = write_configs(sandbox, tmp_path_factory.mktemp("floatkeys"), schema=SCHEMA,
                            extra=CONFLICTS)  # fmt: skip
    with running_nodes(configs) as nodes:
        result = Run(dc1, dc2, nodes)
        lww = sum(t.policy == "lww" for t in TABLES)
        assert wait_for(lambda: _triggers(dc1) == _triggers(dc2) == lww, 60, interval=0.2)
        work = {side: _statements_all(side) for side in (1, 2)}
        _run_both(result, [work[1][0], work[2][0]])
        counted = 8 * 2 * len(TABLES)
        assert wait_for(lambda: _count(dc1) == _count(dc2) == counted, 60, 0.2), "inserts"
        _run_both(result, [work[1][1], work[2][1]])
        wait_for(lambda: all(result.settled(t) for t in TABLES), 60, interval=0.5)
        time.sleep(1.0)  # anything still in flight would show now
        result.seconds = time.monotonic() - began
        yield result


def _statements_all(side: int) -> tuple[list[tuple[str, tuple[Any, ...]]], ...]:
    inserts, changes = [], []
    for table in TABLES:
        mine = _statements(table, side)
        inserts += mine[0]
        changes += mine[1]
    return inserts, changes


def _run_both(run: Run, work: list[list[tuple[str, tuple[Any, ...]]]]) -> None:
    """Both sides' statements at once; a client's error fails the run."""
    with ThreadPoolExecutor(2) as pool:
        done = [pool.submit(_run, s, w) for s, w in zip((run.dc1, run.dc2), work, strict=True)]
        for future in done:
            future.result(timeout=60)


def _count(server: ServerInfo) -> int:
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            total = 0
            for table in TABLES:
                cur.execute(f"SELECT COUNT(*) FROM {SCHEMA}.{table.name}")
                total += int(cur.fetchone()[0])
            return total
    finally:
        conn.close()


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_deletes_key_changes_and_updates_arrive_row_for_row(run: Run, table: Table) -> None:
    one, two = rows(run.dc1, table), rows(run.dc2, table)
    assert one == two, f"{table.name}: dc1 {one}\ndc2 {two}"
    width = len(table.key) + 1
    assert sorted(r[:width] for r in one) == sorted(expected(table, 1) + expected(table, 2))


def test_no_conflict_is_logged_and_no_change_needed_a_fix(run: Run) -> None:
    for server in (run.dc1, run.dc2):
        logged = conflicts(server)
        assert logged == [], f"{server.datacenter}: " + json.dumps(logged, default=str)[:3000]
    for dc, node in run.nodes.items():
        for channel in node.channels:
            stats = channel.stats.as_dict()
            assert stats["idempotent_fixes"] == 0 and stats["conflicts"] == 0, (dc, stats)
    print(f"float keys: workload applied and settled in {run.seconds:.1f}s")
