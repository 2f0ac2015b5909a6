"""Counter columns (conflicts.tables.delta_columns) on two real datacenters: increments made on
both at once all count, while the row's other columns still follow lww.

Two DRC nodes (replicator + API + the channel from the other side) run against the sandbox's
dc1 and dc2. ``cnt_db.stock`` is lww on ``updated_at`` (ON UPDATE CURRENT_TIMESTAMP(6)) with
two counters, an INT and a DECIMAL. Scripted clashes are made deterministic as in
test_conflicts.py: each side locks the key, both write, dc2 commits, then dc1.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from drc.apply.service import build_channel
from drc.conflicts import tombstones
from drc.conflicts.counters import CounterRangeError
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.core.target_errors import TargetSchemaError
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import Running, apply_user, channel_config, running_nodes, serving
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.servers import (
    connect,
    drop_everywhere,
    execute,
    forget_drc_state,
    fresh_database,
    position,
    retrying,
)
from tests.support.servers import query as select
from tests.support.waits import wait_for as wait_until

SCHEMA = "cnt_db"
CONFLICTS = conflicts_toml(
    conflict_rule("cnt_db.stock", "lww", column="updated_at", delta_columns=["qty", "balance"])
)
STOCK = (
    "CREATE TABLE stock (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty INT NOT NULL, "
    "balance DECIMAL(14,2) NOT NULL, updated_at DATETIME(6) NOT NULL "
    "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))"
)
T0 = 1_900_000_000.0  # scripted clock, far from the real one


class Run:
    def __init__(self, sandbox: SandboxDescription) -> None:
        self.dc1, self.dc2 = sandbox.server("dc1"), sandbox.server("dc2")

    def rows(self, server: ServerInfo) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in select(server, f"SELECT * FROM {SCHEMA}.stock ORDER BY id")]

    def row(self, server: ServerInfo, key: int) -> tuple[Any, ...] | None:
        found = [r for r in self.rows(server) if r[0] == key]
        return found[0] if found else None

    def settles(self, key: int, expected: Callable[[tuple[Any, ...]], bool]) -> tuple[Any, ...]:
        """Wait until both sides hold the same row for ``key``, one ``expected`` accepts."""

        def done() -> bool:
            one, two = self.row(self.dc1, key), self.row(self.dc2, key)
            return one is not None and one == two and expected(one)

        assert wait_for(done, 60), (self.row(self.dc1, key), self.row(self.dc2, key))
        found = self.row(self.dc1, key)
        assert found is not None
        return found

    def conflicts(self, server: ServerInfo, key: int) -> list[tuple[str, str, str]]:
        rows = select(
            server,
            "SELECT primary_key, kind, decision, reason FROM drc.conflicts "
            "WHERE schema_name = %s ORDER BY id",
            (SCHEMA,),
        )
        return [tuple(r[1:]) for r in rows if json.loads(r[0]) == {"id": key}]


@pytest.fixture(scope="module", params=[1, 3], ids=["one-connection", "parallel"])
def run(
    sandbox: SandboxDescription,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Run]:
    for server in (sandbox.server("dc1"), sandbox.server("dc2")):
        forget_drc_state(server)  # each param deploys afresh: no checkpoint of the one before
        fresh_database(server, SCHEMA, STOCK)
        _forget_conflicts(server)
    configs = write_configs(
        sandbox, tmp_path_factory.mktemp("counters"), schema=SCHEMA, extra=CONFLICTS,
        channel_extra=f"parallel_workers = {request.param}\n",
    )  # fmt: skip
    with running_nodes(configs):
        result = Run(sandbox)
        assert wait_for(lambda: all(_has_trigger(s) for s in (result.dc1, result.dc2)), 30)
        yield result


def _forget_conflicts(server: ServerInfo) -> None:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE DATABASE IF NOT EXISTS drc")
        cur.execute(f"DROP TABLE IF EXISTS drc.`{tombstones.name(SCHEMA, 'stock')}`")
        if cur.execute("SHOW TABLES FROM drc LIKE 'conflicts'"):
            cur.execute("DELETE FROM drc.conflicts WHERE schema_name = %s", (SCHEMA,))
    conn.close()


def _has_trigger(server: ServerInfo) -> bool:
    found = select(
        server,
        "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s "
        "AND EVENT_OBJECT_TABLE = 'stock'",
        (SCHEMA,),
    )
    return bool(found[0][0])


def seed(run: Run, key: int, qty: int, balance: str) -> None:
    """A row written on dc1 and replicated to dc2."""
    execute(
        run.dc1,
        f"INSERT INTO {SCHEMA}.stock (id, name, qty, balance) VALUES ({key}, 'seed', {qty}, "
        f"{balance})",
    )
    assert wait_for(lambda: run.row(run.dc2, key) is not None, 30)


def clash(run: Run, key: int, on_dc1: str, on_dc2: str, at: tuple[float, float]) -> None:
    """Both sides write ``key`` before either sees the other's write; ``at``: their clocks."""
    sessions = []
    for server, when in ((run.dc1, at[0]), (run.dc2, at[1])):
        conn = connect(server, autocommit=False, database=SCHEMA)
        cur = conn.cursor()
        cur.execute("SET TIMESTAMP = %s", (when,))
        cur.execute("SELECT * FROM stock WHERE id = %s FOR UPDATE", (key,))
        sessions.append((conn, cur))
    sessions[0][1].execute(on_dc1)
    sessions[1][1].execute(on_dc2)
    sessions[1][0].commit()
    time.sleep(0.3)  # dc1's channel now waits on dc1's lock with dc2's change in hand
    sessions[0][0].commit()
    for conn, _ in sessions:
        conn.close()


def _ts(offset_s: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(T0 + offset_s, dt.UTC).replace(tzinfo=None)


# ------------------------------------------------------------------------------ tests


def test_concurrent_increments_on_both_datacenters_all_count(run: Run) -> None:
    seed(run, 1, 1000, "500.00")
    per_side = 150
    errors: list[BaseException] = []

    def hammer(server: ServerInfo, qty: int, money: str) -> None:
        try:
            conn = connect(server, database=SCHEMA)
            with conn.cursor() as cur:

                def both() -> None:  # now and then two increments in one transaction
                    cur.execute("BEGIN")
                    cur.execute("UPDATE stock SET qty = qty + %s WHERE id = 1", (qty,))
                    cur.execute("UPDATE stock SET balance = balance + %s WHERE id = 1", (money,))
                    cur.execute("COMMIT")

                def one() -> None:
                    cur.execute(
                        "UPDATE stock SET qty = qty + %s, balance = balance + %s WHERE id = 1",
                        (qty, money),
                    )

                for i in range(per_side):
                    retrying(both if i % 10 == 9 else one)
            conn.close()
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [
        threading.Thread(target=hammer, args=(run.dc1, -3, "0.25")),
        threading.Thread(target=hammer, args=(run.dc2, 2, "-1.10")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    qty, balance = 1000 + per_side * (2 - 3), Decimal("500.00") + per_side * Decimal("-0.85")
    final = run.settles(1, lambda r: r[2] == qty and r[3] == balance)
    assert final[1] == "seed"


def test_the_other_columns_follow_lww_and_the_increments_are_added_either_way(run: Run) -> None:
    seed(run, 2, 100, "10.00")
    # dc1's clock is ahead: its name wins, and each side still adds the other's increment
    clash(
        run, 2,
        "UPDATE stock SET name = 'dc1', qty = qty + 5, balance = balance - 1.50 WHERE id = 2",
        "UPDATE stock SET name = 'dc2', qty = qty + 7, balance = balance + 0.20 WHERE id = 2",
        at=(T0 + 50, T0 + 30),
    )  # fmt: skip
    final = run.settles(2, lambda r: r[2] == 112)
    # updated_at is dc1's on both: applying dc2's older change did not move it (ON UPDATE)
    assert final[1:] == ("dc1", 112, Decimal("8.70"), _ts(50))
    dc1, dc2 = run.conflicts(run.dc1, 2), run.conflicts(run.dc2, 2)
    assert [c[:2] for c in dc1] == [("update-update", "local")]
    assert [c[:2] for c in dc2] == [("update-update", "incoming")]
    assert "counters added to: qty +7, balance +0.20" in dc1[0][2]


def test_a_row_inserted_on_both_datacenters_holds_both_inserts(run: Run) -> None:
    clash(
        run, 3,
        "INSERT INTO stock (id, name, qty, balance) VALUES (3, 'dc1', 4, 1.00)",
        "INSERT INTO stock (id, name, qty, balance) VALUES (3, 'dc2', 6, 2.50)",
        at=(T0 + 10, T0 + 20),
    )  # fmt: skip
    final = run.settles(3, lambda r: r[2] == 10)
    assert final[1:] == ("dc2", 10, Decimal("3.50"), _ts(20))


def test_an_increment_racing_a_delete_follows_the_delete_decision_on_both_sides(run: Run) -> None:
    seed(run, 4, 50, "5.00")
    seed(run, 5, 50, "5.00")
    delete = "DELETE FROM stock WHERE id = {}"
    add = "UPDATE stock SET qty = qty + 9 WHERE id = {}"
    # the delete is newer: the row stays deleted everywhere, its increment with it
    clash(run, 4, delete.format(4), add.format(4), at=(T0 + 60, T0 + 40))
    # the increment is newer: the row comes back everywhere, as dc2 left it
    clash(run, 5, delete.format(5), add.format(5), at=(T0 + 40, T0 + 60))
    run.settles(5, lambda r: r[2] == 59)

    def gone() -> bool:
        return run.row(run.dc1, 4) is None and run.row(run.dc2, 4) is None

    assert wait_for(gone, 60), (run.row(run.dc1, 4), run.row(run.dc2, 4))
    assert [c[:2] for c in run.conflicts(run.dc1, 4)] == [("update-delete", "local")]
    assert [c[:2] for c in run.conflicts(run.dc2, 4)] == [("delete-update", "incoming")]
    assert [c[:2] for c in run.conflicts(run.dc2, 5)] == [("delete-update", "local")]


# ------------------------------------------------------------------------------ refusals


def _counters(schema: str, *columns: str) -> ConflictsConfig:
    rule = ConflictTableConfig(table=f"{schema}.t", policy="overwrite", delta_columns=columns)
    return ConflictsConfig(tables=(rule,))


def test_a_floating_point_or_nullable_counter_is_refused_when_the_channel_starts(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "cnt_bad"
    drop_everywhere(schema, dc1, dc2)
    for server in (dc1, dc2):
        execute(
            server,
            f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, f DOUBLE NOT NULL, n INT NULL)",
        )
    start = position(dc1)
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config("cnt-bad", url, [f"{schema}.*"])
        for column, words in (("f", "must be an integer or DECIMAL"), ("n", "is nullable")):
            channel = build_channel(
                config, apply_user(dc2), conflicts=_counters(schema, column), datacenter="dc2"
            )
            with Running(channel) as r:
                wait_until(lambda: r.error is not None, "the channel to refuse the counter")
            assert isinstance(r.error, TargetSchemaError)
            assert f"cnt_bad.t.{column}" in str(r.error) and words in str(r.error)


def test_a_sum_beyond_the_column_stops_the_channel_with_nothing_applied(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "cnt_range"
    drop_everywhere(schema, dc1, dc2)
    for server, n in ((dc1, 0), (dc2, 120)):  # dc2 counted 120 meanwhile
        execute(
            server,
            f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, n TINYINT NOT NULL)",
            f"INSERT INTO {schema}.t VALUES (1, {n})",
        )
    start = position(dc1)
    execute(dc1, f"UPDATE {schema}.t SET n = n + 10 WHERE id = 1")
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config("cnt-range", url, [f"{schema}.*"])
        channel = build_channel(
            config, apply_user(dc2), conflicts=_counters(schema, "n"), datacenter="dc2"
        )
        with Running(channel) as r:
            wait_until(lambda: r.error is not None, "the channel to stop")
    assert isinstance(r.error, CounterRangeError)
    assert "would become 130, outside the column's range [-128, 127]" in str(r.error)
    assert select(dc2, f"SELECT n FROM {schema}.t") == [(120,)]  # not clamped to 127
