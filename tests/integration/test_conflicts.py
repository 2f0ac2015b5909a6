"""Both datacenters write the SAME rows: they converge under lww and under a resolver, and every
conflict is logged in drc.conflicts on the side that decided it.

Two DRC nodes (replicator + API + channel from the other side) run against the sandbox's dc1
and dc2 with ``conflicts.priority = ["dc1", "dc2"]`` and two policies:

    cf_db.lww_t   lww on updated_at DATETIME(6) ON UPDATE CURRENT_TIMESTAMP(6)
    cf_db.res_t   resolver tests.integration.resolvers:merge_max

Scripted conflicts are made deterministic with locks: each side's session locks the key
(SELECT .. FOR UPDATE), both write, dc2 commits, then dc1. dc1's channel cannot apply dc2's
change before dc1's own write commits (it waits on the lock), and dc2 already wrote when dc1's
change arrives, so both sides see a conflict. Clock skew is injected with SET TIMESTAMP.
Then random interleavings with random skew run on both sides at once.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.conflicts import tombstones
from drc.conflicts.log import decode_row
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.integration.resolvers import merge_max, newest
from tests.support.apply import running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.servers import connect, forget_drc_state, fresh_database, query

SCHEMA = "cf_db"
CONFLICTS = conflicts_toml(
    conflict_rule("cf_db.lww_t", "lww", column="updated_at"),
    conflict_rule("cf_db.res_t", "resolver", resolver="tests.integration.resolvers:merge_max"),
    conflict_rule(
        "cf_db.rsv_t",
        "resolver",
        column="updated_at",
        resolver="tests.integration.resolvers:newest",
    ),
)
TABLES = (
    "CREATE TABLE lww_t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NOT NULL, "
    "updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
    "ON UPDATE CURRENT_TIMESTAMP(6))",
    "CREATE TABLE res_t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, n INT NOT NULL)",
    "CREATE TABLE rsv_t LIKE lww_t",
)
TABLE_NAMES = ("lww_t", "res_t", "rsv_t")
RANDOM_TABLES = ("lww_t", "rsv_t")  # the same workload, under lww and under a resolver
T0 = 1_900_000_000.0  # scripted clock: far from the real one, so nothing else ties with it


class Run:
    def __init__(
        self,
        sandbox: SandboxDescription,
        configs: dict[str, Path],
        nodes: dict[str, Node],
        workers: int = 1,
    ):
        self.sandbox, self.configs, self.nodes = sandbox, configs, nodes
        self.workers = workers  # connections each channel writes on
        self.dc1, self.dc2 = sandbox.server("dc1"), sandbox.server("dc2")

    def rows(self, server: ServerInfo, table: str) -> list[tuple[Any, ...]]:
        conn = connect(server, database=SCHEMA)
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM `{table}` ORDER BY id")
            rows = list(cur.fetchall())
        conn.close()
        return rows

    def checksum(self, server: ServerInfo, table: str) -> int:
        conn = connect(server, database=SCHEMA)
        with conn.cursor() as cur:
            cur.execute(f"CHECKSUM TABLE `{table}`")
            value = cur.fetchone()[1]
        conn.close()
        return int(value)

    def converged(self, timeout: float = 60) -> bool:
        def same() -> bool:
            return all(
                self.rows(self.dc1, t) == self.rows(self.dc2, t)
                for t in ("lww_t", "res_t", "rsv_t")
            )

        def idle() -> bool:  # heartbeats keep an idle channel's lag under about a second
            lags = [c.report()["lag_seconds"] for n in self.nodes.values() for c in n.channels]
            return all(lag is not None and lag < 1.5 for lag in lags)

        # Equal twice, a second apart, with both channels caught up: nothing left in flight.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if same() and idle():
                time.sleep(1.0)
                if same() and idle():
                    return True
            time.sleep(0.2)
        return False

    def diagnosis(self) -> str:
        lines = ["the datacenters did not converge"]
        for table in ("lww_t", "res_t", "rsv_t"):
            one, two = set(self.rows(self.dc1, table)), set(self.rows(self.dc2, table))
            lines.append(f"{table}: only dc1 {sorted(one - two)}; only dc2 {sorted(two - one)}")
            for key in sorted({r[0] for r in one ^ two}):
                for dc, server in (("dc1", self.dc1), ("dc2", self.dc2)):
                    for e in self.conflicts(server):
                        if e["table_name"] == table and e["key"] == {"id": key}:
                            lines.append(
                                f"  {dc} {key} {e['scn']} {e['kind']} {e['decision']}: "
                                f"{e['reason']}; local {e['local_row']} before "
                                f"{e['incoming_before']} after {e['incoming_after']}"
                            )
        for dc, node in self.nodes.items():
            lines += [f"{dc} {c.name}: {c.stats.as_dict()}" for c in node.channels]
        return "\n".join(lines)

    def conflicts(self, server: ServerInfo) -> list[dict[str, Any]]:
        conn = connect(server, cursorclass=pymysql.cursors.DictCursor)
        with conn.cursor() as cur:
            # Only this module's tables: other tests on the shared sandbox log conflicts too.
            cur.execute("SELECT * FROM drc.conflicts WHERE schema_name = %s ORDER BY id", (SCHEMA,))
            rows = list(cur.fetchall())
        conn.close()
        for row in rows:
            row["key"] = json.loads(row["primary_key"])
        return rows


@pytest.fixture(scope="module", params=[1, 3], ids=["one-connection", "parallel"])
def run(
    sandbox: SandboxDescription,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Run]:
    """Both nodes, their channels on one connection or on three (drc.apply.parallel: the
    decisions must be the same)."""
    for server in (sandbox.server("dc1"), sandbox.server("dc2")):
        forget_drc_state(server)  # each param deploys afresh: no checkpoint of the one before
        fresh_database(server, SCHEMA, *TABLES)
        _forget_conflicts(server)
    configs = write_configs(
        sandbox, tmp_path_factory.mktemp("conflicts"), schema=SCHEMA, extra=CONFLICTS,
        channel_extra=f"parallel_workers = {request.param}\n",
    )  # fmt: skip
    with running_nodes(configs) as nodes:
        result = Run(sandbox, configs, nodes, request.param)
        assert wait_for(lambda: all(_has_trigger(s) for s in (result.dc1, result.dc2)), 30)
        yield result


def _forget_conflicts(server: ServerInfo) -> None:
    """No log entry nor tombstone of this module's tables left by an earlier run."""
    statements = [f"DROP TABLE IF EXISTS drc.`{tombstones.name(SCHEMA, t)}`" for t in TABLE_NAMES]
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("CREATE DATABASE IF NOT EXISTS drc")
        for statement in statements:
            cur.execute(statement)
        if cur.execute("SHOW TABLES FROM drc LIKE 'conflicts'"):
            cur.execute("DELETE FROM drc.conflicts WHERE schema_name = %s", (SCHEMA,))
    conn.close()


def _has_trigger(server: ServerInfo) -> bool:
    found = query(
        server,
        "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = %s "
        "AND EVENT_OBJECT_TABLE = 'lww_t'",
        (SCHEMA,),
    )
    return bool(found[0][0])


Write = Callable[[Any], None]


def clash(
    run: Run, table: str, key: int, on_dc1: Write, on_dc2: Write, *, at: tuple[float, float]
) -> None:
    """Both sides write ``key`` before either sees the other's write (see the module docstring).

    ``at``: each side's session clock (SET TIMESTAMP), the injected skew.
    """
    sessions = []
    for server, when in ((run.dc1, at[0]), (run.dc2, at[1])):
        conn = connect(server, autocommit=False, database=SCHEMA)
        cur = conn.cursor()
        cur.execute("SET TIMESTAMP = %s", (when,))
        cur.execute(f"SELECT * FROM `{table}` WHERE id = %s FOR UPDATE", (key,))
        sessions.append((conn, cur))
    on_dc1(sessions[0][1])
    on_dc2(sessions[1][1])
    sessions[1][0].commit()
    time.sleep(0.3)  # dc1's channel now waits on dc1's lock with dc2's change in hand
    sessions[0][0].commit()
    for conn, _ in sessions:
        conn.close()


def sql(statement: str, *params: Any) -> Write:
    return lambda cur: cur.execute(statement, params)


def seed(run: Run, table: str, key: int, **values: Any) -> None:
    """A row written on dc1 and replicated to dc2 before the scripted clash."""
    conn = connect(run.dc1, database=SCHEMA)
    with conn.cursor() as cur:
        cur.execute("SET TIMESTAMP = %s", (T0,))
        columns = ", ".join(["id", *values])
        marks = ", ".join(["%s"] * (len(values) + 1))
        cur.execute(f"INSERT INTO {table} ({columns}) VALUES ({marks})", (key, *values.values()))
    conn.close()
    assert wait_for(lambda: any(r[0] == key for r in run.rows(run.dc2, table)), 30)


def entries_for(run: Run, server: ServerInfo, table: str, key: int) -> list[tuple[str, str]]:
    return [
        (e["kind"], e["decision"])
        for e in run.conflicts(server)
        if e["table_name"] == table and e["key"] == {"id": key}
    ]


def _at(offset_ms: float) -> float:
    return T0 + 10 + offset_ms / 1000


def _ts(offset_ms: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(_at(offset_ms), dt.UTC).replace(tzinfo=None)


# ------------------------------------------------------------------------------ lww, scripted


def test_lww_scripted_conflicts_converge_to_the_newer_write_and_are_logged(run: Run) -> None:
    seed(run, "lww_t", 1002, v="seed", n=0)
    seed(run, "lww_t", 1003, v="seed", n=0)
    seed(run, "lww_t", 1004, v="seed", n=0)
    seed(run, "lww_t", 1005, v="seed", n=0)
    ins = "INSERT INTO lww_t (id, v, n) VALUES (%s, %s, %s)"
    upd = "UPDATE lww_t SET v = %s, n = n + 1 WHERE id = %s"
    delete = "DELETE FROM lww_t WHERE id = %s"
    # insert-insert: dc2's row is newer
    clash(
        run,
        "lww_t",
        1001,
        sql(ins, 1001, "dc1", 1),
        sql(ins, 1001, "dc2", 2),
        at=(_at(10), _at(20)),
    )
    # update-update: dc1's clock runs ahead, so dc1's update is the newer one
    clash(run, "lww_t", 1002, sql(upd, "dc1", 1002), sql(upd, "dc2", 1002), at=(_at(50), _at(30)))
    # equal timestamps: dc1 comes first in conflicts.priority
    clash(run, "lww_t", 1003, sql(upd, "dc1", 1003), sql(upd, "dc2", 1003), at=(_at(40), _at(40)))
    # delete newer than the update: the row stays deleted on both sides
    clash(run, "lww_t", 1004, sql(delete, 1004), sql(upd, "dc2", 1004), at=(_at(60), _at(40)))
    # update newer than the delete: the row comes back everywhere
    clash(run, "lww_t", 1005, sql(delete, 1005), sql(upd, "dc2", 1005), at=(_at(40), _at(60)))

    # insert-delete: dc1 inserts then deletes (later) in one transaction; dc2 inserts between
    def insert_then_delete(cur: Any) -> None:
        cur.execute(ins, (1006, "dc1", 1))
        cur.execute("SET TIMESTAMP = %s", (_at(30),))
        cur.execute(delete, (1006,))

    clash(run, "lww_t", 1006, insert_then_delete, sql(ins, 1006, "dc2", 2), at=(_at(10), _at(20)))
    assert run.converged(), (run.rows(run.dc1, "lww_t"), run.rows(run.dc2, "lww_t"))

    final = {row[0]: row for row in run.rows(run.dc1, "lww_t")}
    assert final[1001][1:3] == ("dc2", 2) and final[1001][3] == _ts(20)
    assert final[1002][1] == "dc1" and final[1002][3] == _ts(50)
    assert final[1003][1] == "dc1"  # the tie
    assert 1004 not in final
    assert final[1005][1] == "dc2" and final[1005][3] == _ts(60)
    assert 1006 not in final

    expected = {  # key: (what dc1 logs, what dc2 logs)
        1001: ([("insert-insert", "incoming")], [("insert-insert", "local")]),
        1002: ([("update-update", "local")], [("update-update", "incoming")]),
        1003: ([("update-update", "local")], [("update-update", "incoming")]),
        1004: ([("update-delete", "local")], [("delete-update", "incoming")]),
        1005: ([("update-delete", "incoming")], [("delete-update", "local")]),
        1006: (
            [("insert-delete", "local")],
            [("insert-insert", "local"), ("delete-update", "incoming")],
        ),
    }
    for key, (on_dc1, on_dc2) in expected.items():
        assert entries_for(run, run.dc1, "lww_t", key) == on_dc1, key
        assert entries_for(run, run.dc2, "lww_t", key) == on_dc2, key
    for node in run.nodes.values():  # what `drc run` prints as it goes
        assert f"{node.channels[0].stats.conflicts} conflicts" in node.progress_line()


def test_the_tie_and_delete_reasons_say_why(run: Run) -> None:
    reasons = {
        e["key"]["id"]: e["reason"] for e in run.conflicts(run.dc2) if e["table_name"] == "lww_t"
    }
    assert "dc1 comes first in conflicts.priority" in reasons[1003]
    assert "deleted at" in reasons[1004]


# ------------------------------------------------------------------------------ resolver, scripted


def test_resolver_scripted_conflicts_converge_to_what_the_resolver_chose(run: Run) -> None:
    seed(run, "res_t", 2001, v="seed", n=0)
    seed(run, "res_t", 2002, v="seed", n=0)
    upd = "UPDATE res_t SET v = %s, n = %s WHERE id = %s"
    ins = "INSERT INTO res_t (id, v, n) VALUES (%s, %s, %s)"
    clash(run, "res_t", 2001, sql(upd, "a", 5, 2001), sql(upd, "b", 3, 2001), at=(_at(0), _at(0)))
    clash(
        run,
        "res_t",
        2002,
        sql("DELETE FROM res_t WHERE id = 2002"),
        sql(upd, "c", 7, 2002),
        at=(_at(0), _at(0)),
    )
    clash(run, "res_t", 2003, sql(ins, 2003, "z", 1), sql(ins, 2003, "y", 2), at=(_at(0), _at(0)))
    assert run.converged(), (run.rows(run.dc1, "res_t"), run.rows(run.dc2, "res_t"))

    final = {row[0]: row for row in run.rows(run.dc1, "res_t")}
    assert final[2001] == (2001, "b", 5)  # merged: the larger v and the larger n
    assert final[2002] == (2002, "c", 7)  # a row beats a delete
    assert final[2003] == (2003, "z", 2)
    assert entries_for(run, run.dc1, "res_t", 2001) == [("update-update", "custom")]
    assert entries_for(run, run.dc2, "res_t", 2001) == [("update-update", "custom")]
    assert entries_for(run, run.dc1, "res_t", 2002) == [("update-delete", "incoming")]
    assert entries_for(run, run.dc2, "res_t", 2002) == [("delete-update", "local")]


# ---------------------------------------------------------------------------- random interleavings


def _random_writer(server: ServerInfo, table: str, seed_: int, ops: int, keys: range) -> None:
    rng = random.Random(seed_)
    conn = connect(server, autocommit=False, database=SCHEMA)
    cur = conn.cursor()
    for n in range(ops):
        # skewed clocks, and now and then a timestamp both sides use (ties)
        now = time.time() + rng.uniform(-0.3, 0.3)
        if rng.random() < 0.15:
            now = float(int(time.time() * 10)) / 10
        cur.execute("SET TIMESTAMP = %s", (now,))
        key = rng.choice(keys)
        try:
            for _ in range(rng.randint(1, 2)):
                cur.execute(f"SELECT id FROM {table} WHERE id = %s FOR UPDATE", (key,))
                exists = cur.fetchone() is not None
                roll = rng.random()
                if not exists:
                    cur.execute(
                        f"INSERT INTO {table} (id, v, n) VALUES (%s, %s, %s)",
                        (key, f"{server.datacenter}-{n}", rng.randint(0, 1000)),
                    )
                elif roll < 0.3:
                    cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                else:
                    cur.execute(
                        f"UPDATE {table} SET v = %s, n = %s WHERE id = %s",
                        (f"{server.datacenter}-{n}", rng.randint(0, 1000), key),
                    )
                key = rng.choice(keys)
            conn.commit()
        except pymysql.err.OperationalError as exc:  # a deadlock with the channel: retry later
            if exc.args[0] not in (1205, 1213):
                raise
            conn.rollback()
        except pymysql.err.IntegrityError:  # the channel inserted the key meanwhile
            conn.rollback()
        time.sleep(rng.uniform(0, 0.01))
    conn.close()


@pytest.mark.slow
def test_random_interleavings_on_the_same_rows_converge(run: Run) -> None:
    writers = [
        threading.Thread(target=_random_writer, args=(server, table, seed_, 150, range(1, 13)))
        for table in RANDOM_TABLES
        for server, seed_ in ((run.dc1, 1), (run.dc2, 2))
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=300)
    assert run.converged(120), run.diagnosis()
    if run.workers > 1:  # some groups did go out in parts
        parts = [c.stats.parallel_parts for node in run.nodes.values() for c in node.channels]
        assert sum(parts) > 0, parts
    for table in RANDOM_TABLES:
        assert run.rows(run.dc1, table) == run.rows(run.dc2, table)
        assert run.checksum(run.dc1, table) == run.checksum(run.dc2, table)

    logged = {dc: run.conflicts(server) for dc, server in (("dc1", run.dc1), ("dc2", run.dc2))}
    random_keys = [e for entries in logged.values() for e in entries if e["key"]["id"] < 1000]
    assert len(random_keys) >= 5, "the random phase made (almost) no conflicts to test"
    for dc, entries in logged.items():
        # every conflict the channel resolved is in the log of the side that decided it
        counted = sum(c.stats.conflicts for c in run.nodes[dc].channels)
        assert counted == len(entries), (dc, counted, len(entries))
        by_table: dict[str, int] = {}  # what the status page shows per table
        for entry in entries:
            name = f"{entry['schema_name']}.{entry['table_name']}"
            by_table[name] = by_table.get(name, 0) + 1
        shown = [c.stats.conflicts_by_table for c in run.nodes[dc].channels]
        assert shown == [by_table], (dc, shown, by_table)
        for entry in entries:
            assert entry["datacenter"] == dc and entry["origin"] != dc
            _check_decision(entry)


def _check_decision(entry: dict[str, Any]) -> None:
    """Recompute the decision from what the log recorded."""
    local, before, after = (
        decode_row(entry[c]) for c in ("local_row", "incoming_before", "incoming_after")
    )
    decision, result = entry["decision"], decode_row(entry["result_row"])
    if entry["table_name"] == "res_t":
        chosen = merge_max(local, before, after, None)
        expected = {"local": local, "incoming": after, "custom": chosen}
        assert chosen == expected[decision] and result == chosen, entry
        return
    if local is None or after is None:
        return  # a delete: its time is in the reason, and the scripted tests check those
    if entry["table_name"] == "rsv_t":
        chosen = newest(local, before, after, None)
        assert chosen == {"local": local, "incoming": after}[decision], entry
        return
    incoming, mine = after["updated_at"], local["updated_at"]
    if incoming != mine:
        assert decision == ("incoming" if incoming > mine else "local"), entry
    else:  # the tie goes to dc1
        assert decision == ("incoming" if entry["origin"] == "dc1" else "local"), entry


# ------------------------------------------------------------------------------ the CLI


def test_conflicts_list_and_show_display_the_run(run: Run) -> None:
    runner = CliRunner()
    config = str(run.configs["dc1"])
    listed = runner.invoke(
        cli, ["conflicts", "list", "--config", config, "--table", "cf_db.lww_t", "--format", "json"]
    )
    assert listed.exit_code == 0, listed.output
    entries = json.loads(listed.output)
    by_key = {json.dumps(e["key"]) if "key" in e else "": e for e in entries}
    assert entries and all(
        e["table"].endswith("lww_t") or e.get("table_name") == "lww_t" for e in entries
    ), by_key
    one = next(e for e in entries if e["kind"] == "insert-insert")
    shown = runner.invoke(cli, ["conflicts", "show", str(one["id"]), "--config", config])
    assert shown.exit_code == 0, shown.output
    assert "insert-insert" in shown.output and "dc2" in shown.output and "dc1" in shown.output
    assert "updated_at" in shown.output and "*" in shown.output
    stats = runner.invoke(cli, ["conflicts", "stats", "--config", config])
    assert stats.exit_code == 0 and "lww" in stats.output and "resolver" in stats.output


def test_resolve_takes_one_side_on_every_datacenter_and_records_who(run: Run) -> None:
    ins = "INSERT INTO lww_t (id, v, n) VALUES (%s, %s, %s)"
    now = time.time()  # the present: the resolution's fresh timestamp must be the newest
    clash(run, "lww_t", 1201, sql(ins, 1201, "dc1", 1), sql(ins, 1201, "dc2", 2),
          at=(now - 2, now - 1))  # fmt: skip
    assert run.converged(), run.diagnosis()
    assert run.rows(run.dc1, "lww_t") == run.rows(run.dc2, "lww_t")
    entry = next(e for e in run.conflicts(run.dc1) if e["key"] == {"id": 1201})
    assert entry["decision"] == "incoming"  # dc2's row won: dc1 now holds ("dc2", 2)

    config = str(run.configs["dc1"])
    resolved = CliRunner().invoke(cli, [
        "conflicts", "resolve", str(entry["id"]), "--take", "local", "--yes",
        "--reason", "dc1's order is the real one", "--actor", "ops-test", "--config", config,
    ])  # fmt: skip
    assert resolved.exit_code == 0, resolved.output
    assert "v=dc1" in resolved.output and "took local" in resolved.output

    def taken(server: ServerInfo) -> bool:
        row = next((r for r in run.rows(server, "lww_t") if r[0] == 1201), None)
        return row is not None and row[1:3] == ("dc1", 1)

    assert wait_for(lambda: taken(run.dc1) and taken(run.dc2), 30), run.diagnosis()
    assert run.converged(), run.diagnosis()  # and it stays: no echo, no further conflict
    shown = CliRunner().invoke(
        cli, ["conflicts", "show", str(entry["id"]), "--config", config, "--format", "json"]
    )
    assert shown.exit_code == 0, shown.output
    [record] = json.loads(shown.output)["resolutions"]
    assert record["taken"] == "local" and record["actor"] == "ops-test"
    assert record["reason"] == "dc1's order is the real one"
    listed = CliRunner().invoke(
        cli, ["conflicts", "list", "--config", config, "--policy", "lww", "--format", "json"]
    )
    assert listed.exit_code == 0 and all(e["policy"] == "lww" for e in json.loads(listed.output))
