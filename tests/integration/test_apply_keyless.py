"""A table without a primary key ends with the same multiset of rows as its source.

Log and audit tables often have no key and hold identical rows; a row event inserts, updates or
deletes exactly one of them, and so must the channel (no_primary_key = "match_whole_row"):
identical rows inserted in separate transactions or by one statement are all kept, and an
update or delete of one of several identical rows changes exactly one. Both directions, and
across kill -9 of the applying process.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from drc.apply.service import build_channel
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import (
    ApplyProcess,
    Running,
    apply_process_config,
    apply_user,
    assert_same,
    channel_config,
    serving,
)
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end

TABLE = "(a INT, b VARCHAR(20), f FLOAT, d DOUBLE, j BLOB, t DATETIME(6))"
ROW = "(1, 'same', 1.1, 2.2, 'blob', '2026-11-23 10:00:00.5')"


def _identical_rows_workload(server: ServerInfo, schema: str) -> None:
    execute(
        server,
        f"INSERT INTO {schema}.log VALUES {ROW}",  # separate transactions
        f"INSERT INTO {schema}.log VALUES {ROW}",
        f"INSERT INTO {schema}.log VALUES {ROW}, {ROW}, {ROW}",  # one statement
        f"INSERT INTO {schema}.log VALUES (2, NULL, NULL, NULL, NULL, NULL), "
        "(2, NULL, NULL, NULL, NULL, NULL)",
        f"UPDATE {schema}.log SET b = 'changed' WHERE a = 1 LIMIT 1",  # one of five
        f"UPDATE {schema}.log SET b = 'changed' WHERE a = 1 AND b = 'same' LIMIT 1",
        f"DELETE FROM {schema}.log WHERE a = 1 AND b = 'same' LIMIT 1",  # one of three
        f"DELETE FROM {schema}.log WHERE a = 2 LIMIT 1",  # one of two NULL rows
        f"UPDATE {schema}.log SET f = 3.5 WHERE a = 1 AND b = 'changed' LIMIT 1",
    )


def _counts(server: ServerInfo, schema: str) -> list[tuple[object, ...]]:
    return query(
        server,
        f"SELECT a, b, f, d, j, t, COUNT(*) FROM {schema}.log GROUP BY a, b, f, d, j, t "
        "ORDER BY a, b, f",
    )


@pytest.mark.parametrize("direction", ["dc1_to_dc2", "dc2_to_dc1"])
def test_identical_rows_in_a_keyless_table_all_arrive(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, direction: str
) -> None:
    source, target = (dc1, dc2) if direction == "dc1_to_dc2" else (dc2, dc1)
    schema = f"keyless_{direction}"
    drop_everywhere(schema, source, target)
    start = position(source)
    execute(source, f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.log {TABLE}")
    _identical_rows_workload(source, schema)
    with serving(source, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config(f"keyless-{direction}", url, [f"{schema}.*"],
                                no_primary_key="match_whole_row")  # fmt: skip
        with Running(build_channel(config, apply_user(target))) as running:
            wait_end(target, schema, mark_end(source, schema), running)
            print("STATS", running.stats)
    assert sum(int(r[-1]) for r in _counts(source, schema)) == 5  # the workload's own check
    assert _counts(target, schema) == _counts(source, schema)
    assert_same(source, target, schema)


KILL_SCHEMA = "keyless_kill"


def _kill_config(tmp: Path, target: ServerInfo, url: str) -> Path:
    return apply_process_config(
        tmp, target, url, "keyless-kill", [f"{KILL_SCHEMA}.*"],
        no_primary_key="match_whole_row", max_txns_per_commit=20, max_commit_delay_ms=20,
    )  # fmt: skip


def _kill_workload(server: ServerInfo) -> None:
    """Few distinct rows, many copies of each: every change touches one of identical rows."""
    rng = random.Random(7)
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        for _ in range(600):
            value = rng.randint(1, 4)
            roll = rng.random()
            if roll < 0.6:
                copies = rng.randint(1, 3)
                cur.execute(f"INSERT INTO {KILL_SCHEMA}.log (a, b) VALUES "
                            + ", ".join(["(%s, 'same')"] * copies), [value] * copies)  # fmt: skip
            elif roll < 0.8:
                cur.execute(f"UPDATE {KILL_SCHEMA}.log SET b = 'upd' WHERE a = %s LIMIT 1",
                            (value,))  # fmt: skip
            else:
                cur.execute(f"DELETE FROM {KILL_SCHEMA}.log WHERE a = %s LIMIT 1", (value,))
            conn.commit()
            time.sleep(0.002)
    conn.close()


@pytest.mark.slow
def test_identical_rows_survive_kill_9_of_the_apply_process(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    drop_everywhere(KILL_SCHEMA, dc1, dc2)
    apply_user(dc2)
    start = position(dc1)
    execute(dc1, f"CREATE DATABASE {KILL_SCHEMA}", f"CREATE TABLE {KILL_SCHEMA}.log {TABLE}")
    with serving(dc1, tmp_path / "buf", [f"{KILL_SCHEMA}.*"], start) as (_, url):
        config = _kill_config(tmp_path, dc2, url)
        writer = threading.Thread(target=_kill_workload, args=(dc1,), daemon=True)
        rng = random.Random(20261123)
        with ApplyProcess(config, tmp_path / "apply.log", "--stats-every", "0.5") as apply:
            writer.start()
            for _ in range(4):
                time.sleep(rng.uniform(0.3, 0.9))
                apply.kill()
                apply.start()
            writer.join(timeout=300)
            wait_end(dc2, KILL_SCHEMA, mark_end(dc1, KILL_SCHEMA), timeout=120)
            assert apply.alive(), apply.tail()
    assert query(dc1, f"SELECT COUNT(*) > 300 FROM {KILL_SCHEMA}.log") == [(1,)]
    assert_same(dc1, dc2, KILL_SCHEMA)
