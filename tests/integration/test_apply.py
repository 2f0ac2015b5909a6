"""Apply end to end: dc1 captured in process, served by the pull API, applied into dc2."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

from drc.apply.service import build_channel
from drc.replicator.assembler import FragmentLimits
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, assert_same, channel_config, serving
from tests.support.capture import read_all
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end

SCHEMA = "apply_conv"
TYPED = f"""CREATE TABLE {SCHEMA}.typed (
  id INT PRIMARY KEY, s VARCHAR(64) CHARACTER SET utf8mb4, d DECIMAL(20,6), dt DATETIME(6),
  ts TIMESTAMP(3) NULL, day DATE, tm TIME(6), b VARBINARY(32), blb BLOB, e ENUM('a','b','c'),
  st SET('x','y','z'), bits BIT(10), j JSON, f FLOAT, g DOUBLE, n BIGINT UNSIGNED)"""
ODD = f"CREATE TABLE {SCHEMA}.`we``ird %tab` (`k ey` INT PRIMARY KEY, `va%l` VARCHAR(20))"
COMP = f"CREATE TABLE {SCHEMA}.comp (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))"
COUNTER = f"CREATE TABLE {SCHEMA}.counter (id INT PRIMARY KEY, n INT NOT NULL)"
AUTO = f"CREATE TABLE {SCHEMA}.auto (id INT AUTO_INCREMENT PRIMARY KEY, v INT)"


def _text(rng: random.Random) -> str:
    return "".join(rng.choice("ab'\"\\%`é🎉 z") for _ in range(rng.randint(0, 20)))


def _typed_row(rng: random.Random, id_: int) -> tuple[object, ...]:
    micros = dt.timedelta(microseconds=rng.randint(0, 999999))
    return (
        id_, _text(rng), Decimal(rng.randint(-10**12, 10**12)) / 1000,
        dt.datetime(2024, 1, 1) + dt.timedelta(seconds=rng.randint(0, 10**8)) + micros,
        rng.choice([None, "2024-06-01 12:00:00.123"]),
        rng.choice(["0000-00-00", "2024-02-29", None]),
        # Negative TIMEs only in whole seconds: the capture mis-decodes a negative fraction.
        rng.choice([dt.timedelta(seconds=rng.randint(0, 3_000_000)) + micros,
                    dt.timedelta(seconds=-rng.randint(1, 3_000_000))]),
        rng.randbytes(rng.randint(0, 32)), rng.randbytes(rng.randint(0, 300)),
        rng.choice("abc"), ",".join(rng.sample("xyz", rng.randint(0, 3))), rng.randint(0, 1023),
        rng.choice(['{"k": [1, "é"]}', "[]", None]), rng.choice([0.1, -2.5, 3.25]),
        rng.random(), rng.choice([0, 2**64 - 1, 42]),
    )  # fmt: skip


def _workload(server: ServerInfo, seed: int, txns: int) -> None:
    rng = random.Random(seed)
    conn = connect(server, autocommit=False)
    ids: list[int] = []
    next_id, added_column = 1, False
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+05:00'")  # TIMESTAMPs still travel in UTC
        cur.execute(f"INSERT INTO {SCHEMA}.counter VALUES (1, 0), (2, 0)")
        for n in range(txns):
            kind = rng.random()
            if n == txns // 2:
                cur.execute(f"CREATE TABLE {SCHEMA}.later (id INT PRIMARY KEY, note TEXT)")
                cur.execute(f"ALTER TABLE {SCHEMA}.typed ADD COLUMN extra INT DEFAULT 5")
                added_column = True
            if kind < 0.35 or len(ids) < 5:
                rows = [_typed_row(rng, next_id + k) for k in range(rng.randint(1, 4))]
                marks = ", ".join(["%s"] * 16)
                cur.executemany(
                    f"INSERT INTO {SCHEMA}.typed VALUES ({marks}{', 7' if added_column else ''})",
                    rows,
                )
                ids += [r[0] for r in rows]
                next_id += len(rows)
            elif kind < 0.55:
                cur.execute(
                    f"UPDATE {SCHEMA}.typed SET s = %s, d = d + 1, st = 'x,z' WHERE id = %s",
                    (_text(rng), rng.choice(ids)),
                )
            elif kind < 0.65:
                cur.execute(
                    f"DELETE FROM {SCHEMA}.typed WHERE id = %s", (ids.pop(rng.randrange(len(ids))),)
                )
            elif kind < 0.8:
                cur.execute(
                    f"UPDATE {SCHEMA}.counter SET n = n + 1 WHERE id = %s", (rng.randint(1, 2),)
                )
            else:  # several statements and tables in one transaction
                cur.execute(
                    f"INSERT INTO {SCHEMA}.`we``ird %%tab` VALUES (%s, %s)", (n, _text(rng)[:20])
                )
                cur.execute(f"INSERT INTO {SCHEMA}.comp VALUES (%s, %s, 0)", (n % 7, f"k{n}"))
                cur.execute(
                    f"UPDATE {SCHEMA}.comp SET v = v + 1, a = a + 100 WHERE b = %s", (f"k{n}",)
                )
                cur.execute(f"UPDATE {SCHEMA}.counter SET n = n + 10 WHERE id = 1")
                if added_column:
                    cur.execute(f"REPLACE INTO {SCHEMA}.later VALUES (%s, %s)", (n % 5, _text(rng)))
            conn.commit()
        bulk = f"SELECT seq + 100000, 'bulk' FROM {SCHEMA}.seq_1_to_2500"
        cur.execute(f"INSERT INTO {SCHEMA}.typed (id, s) {bulk}")
        cur.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')")
        cur.execute(f"INSERT INTO {SCHEMA}.auto VALUES (0, 1), (5, 2)")
        conn.commit()
    conn.close()


def test_random_workload_converges(dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path) -> None:
    drop_everywhere(SCHEMA, dc1, dc2)
    start = position(dc1)
    execute(dc1, f"CREATE DATABASE {SCHEMA}", TYPED, ODD, COMP, COUNTER, AUTO)
    with serving(
        dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start, fragments=FragmentLimits(rows=500)
    ) as (
        _,
        url,
    ):
        channel = build_channel(channel_config("conv", url, [f"{SCHEMA}.*"]), apply_user(dc2))
        with Running(channel) as running:
            _workload(dc1, seed=3, txns=300)
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
    assert_same(dc1, dc2, SCHEMA)
    assert query(dc2, f"SELECT id FROM {SCHEMA}.auto ORDER BY id") == [(0,), (5,)]
    stats = channel.stats
    assert stats.ddl >= 8 and stats.transactions > 300 and stats.idempotent_fixes == 0
    assert stats.commits < stats.transactions  # grouped
    saved = query(dc2, "SELECT scn, origin FROM drc.checkpoint WHERE channel = 'conv'")
    assert saved == [(str(stats.last_scn), "dc1")]


def test_replaying_an_applied_range_changes_nothing(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "apply_replay"
    drop_everywhere(schema, dc1, dc2)
    start = position(dc1)
    execute(dc1, f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(20), n INT)")  # fmt: skip
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config("replay", url, [f"{schema}.*"])
        with Running(build_channel(config, apply_user(dc2))) as running:
            execute(dc1, *(f"INSERT INTO {schema}.t VALUES ({i}, 'a', 0)" for i in range(ROWS)))
            wait_end(dc2, schema, mark_end(dc1, schema), running)
            rewind = running.stats.last_scn
            _churn(dc1, schema)
            wait_end(dc2, schema, mark_end(dc1, schema), running)
        assert_same(dc1, dc2, schema)
        before = query(dc2, f"SELECT * FROM {schema}.t ORDER BY id")
        execute(dc2, f"UPDATE drc.checkpoint SET scn = '{rewind}' WHERE channel = 'replay'")
        replay = build_channel(config, apply_user(dc2))
        with Running(replay) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
    assert query(dc2, f"SELECT * FROM {schema}.t ORDER BY id") == before
    assert_same(dc1, dc2, schema)
    stats = replay.stats
    assert stats.transactions > ROWS
    assert stats.missing_updates > 0 and stats.missing_deletes > 0 and stats.duplicate_inserts > 0


ROWS = 900  # the replay's updates span several pipelined chunks, each with missing rows


def _churn(server: ServerInfo, schema: str) -> None:
    """Updates and deletes of rows that later go away, keys deleted and inserted again."""
    conn = connect(server)
    with conn.cursor() as cur:
        for i in range(0, ROWS, 2):
            cur.execute(f"UPDATE {schema}.t SET v = 'b', n = n + 1 WHERE id = %s", (i,))
        for i in range(0, ROWS, 3):
            cur.execute(f"DELETE FROM {schema}.t WHERE id = %s", (i,))
        for i in range(0, ROWS // 2, 3):
            cur.execute(f"INSERT INTO {schema}.t VALUES (%s, 'again', 9)", (i,))
        cur.execute(f"UPDATE {schema}.t SET v = 'final' WHERE v = 'again'")
        cur.execute(f"INSERT INTO {schema}.t VALUES (5000, 'new', 0), (5001, 'new', 0)")
        cur.execute(f"UPDATE {schema}.t SET n = 5 WHERE id >= 5000")
        cur.execute(f"UPDATE {schema}.t SET id = id + 1000 WHERE id = 1")
    conn.close()


def test_a_crash_between_ddl_and_its_checkpoint_replays_safely(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "apply_ddl_replay"
    drop_everywhere(schema, dc1, dc2)
    start = position(dc1)
    execute(dc1, f"CREATE DATABASE {schema}", f"CREATE TABLE {schema}.t (id INT PRIMARY KEY)")
    alter = f"ALTER TABLE {schema}.t ADD COLUMN c INT DEFAULT 3, ADD INDEX ic (c)"
    execute(
        dc1, f"INSERT INTO {schema}.t VALUES (1)", alter, f"INSERT INTO {schema}.t VALUES (2, 4)"
    )
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (capture, url):
        config = channel_config("ddl-replay", url, [f"{schema}.*"])
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
        stored = read_all(capture.buffer)
        at = next(i for i, t in enumerate(stored) if t.ddl and "ADD COLUMN" in t.ddl[0].statement)
        before, ddl = stored[at - 1].scn, stored[at].scn
        # As if the process died right after the ALTER ran: its checkpoint still before it.
        execute(dc2, f"UPDATE drc.checkpoint SET scn = '{before}', pending_ddl_scn = '{ddl}' "
                     "WHERE channel = 'ddl-replay'")  # fmt: skip
        replay = build_channel(config, apply_user(dc2))
        with Running(replay) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
    # drc.ddl_journal has the ALTER (and the end marker's CREATE TABLE IF NOT EXISTS, also in
    # the replayed range) as done: neither runs again.
    assert replay.stats.ddl == 0 and replay.stats.last_error is None
    assert_same(dc1, dc2, schema)
    saved = query(dc2, "SELECT pending_ddl_scn FROM drc.checkpoint WHERE channel = 'ddl-replay'")
    assert saved == [(None,)]
