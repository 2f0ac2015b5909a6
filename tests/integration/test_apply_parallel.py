"""Parallel apply (drc.apply.parallel) against a real target: a group's independent transactions
go out on several connections, every key ends as on the source, and a group whose parts
committed but whose checkpoint did not (a crash in between) is finished without applying
anything twice."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from drc.apply import audit
from drc.apply.service import build_channel
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, assert_same, channel_config, serving
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end, wait_for

SCHEMA = "apply_parallel"


def _workload(server: ServerInfo, txns: int, seed: int) -> None:
    """Inserts of new rows (independent), updates and deletes of a few hot rows (dependent),
    key changes, a UNIQUE key moving between rows, and a parent with its children (FK)."""
    rng = random.Random(seed)
    conn = connect(server, autocommit=False, database=SCHEMA)
    next_id, live = 1000, list(range(1, 21))
    with conn.cursor() as cur:
        for n in range(txns):
            roll = rng.random()
            if roll < 0.4:
                cur.executemany(
                    "INSERT INTO t (id, u, v) VALUES (%s, NULL, %s)",
                    [(next_id + k, f"n{n}") for k in range(rng.randint(1, 3))],
                )
                next_id += 3
            elif roll < 0.65:
                cur.execute("UPDATE t SET v = CONCAT(v, '+') WHERE id = %s", (rng.choice(live),))
            elif roll < 0.75:
                old = live.pop(rng.randrange(len(live)))
                cur.execute("UPDATE t SET id = %s WHERE id = %s", (next_id, old))
                live.append(next_id)
                next_id += 1
            elif roll < 0.85:  # the UNIQUE value moves from one row to another
                a, b = rng.sample(live, 2)
                cur.execute("UPDATE t SET u = NULL WHERE u = 'hot'")
                cur.execute("UPDATE t SET u = 'hot' WHERE id = %s", (a if n % 2 else b,))
            elif roll < 0.95:
                cur.execute("INSERT INTO parent VALUES (%s)", (n,))
                cur.execute("INSERT INTO child VALUES (%s, %s)", (n, n))
            else:
                cur.execute("DELETE FROM child WHERE parent_id < %s", (n - 5,))
                cur.execute("DELETE FROM parent WHERE id < %s", (n - 5,))
            conn.commit()
    conn.close()


def _create(dc1: ServerInfo, dc2: ServerInfo) -> Any:
    drop_everywhere(SCHEMA, dc1, dc2)
    start = position(dc1)
    execute(
        dc1,
        f"CREATE DATABASE {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, u VARCHAR(8) UNIQUE, v TEXT)",
        f"CREATE TABLE {SCHEMA}.parent (id INT PRIMARY KEY)",
        f"CREATE TABLE {SCHEMA}.child (id INT PRIMARY KEY, parent_id INT, "
        f"FOREIGN KEY (parent_id) REFERENCES {SCHEMA}.parent (id))",
        f"INSERT INTO {SCHEMA}.t VALUES " + ", ".join(f"({i}, NULL, 'r{i}')" for i in range(1, 21)),
    )
    return start


def test_independent_transactions_go_out_in_parts_and_end_as_the_source(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    start = _create(dc1, dc2)
    _workload(dc1, 600, seed=3)
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        config = channel_config(
            "par", url, [f"{SCHEMA}.*"], parallel_workers=4, max_txns_per_commit=100
        )
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
        assert running.error is None
        stats = running.stats
    assert_same(dc1, dc2, SCHEMA)
    assert stats.parallel_parts > 10, stats.as_dict()
    assert stats.idempotent_fixes == 0, stats.as_dict()  # nothing found applied already
    assert query(dc2, "SELECT COUNT(*) FROM drc.applied_parts WHERE channel = 'par'")[0][0] > 1


class _Crash(Exception):
    """The process died between a group's parts and its checkpoint."""


@pytest.mark.parametrize("workers_after", [3, 1], ids=["same-config", "one-worker-after"])
def test_a_crash_between_the_parts_and_the_checkpoint_applies_nothing_twice(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, workers_after: int
) -> None:
    """``one-worker-after``: the channel restarted with ``parallel_workers = 1`` (a config
    change with that backlog pending) skips what the parts committed too (before: its one
    writer read no parts, and applied them again)."""
    start = _create(dc1, dc2)
    _workload(dc1, 300, seed=4)
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        config = channel_config(
            "crash", url, [f"{SCHEMA}.*"], parallel_workers=3, max_txns_per_commit=60
        )
        channel = build_channel(config, apply_user(dc2))
        session, writer = channel.target, channel.writer
        checkpoint_writes, run_parts = session.write, writer._run  # type: ignore[attr-defined,union-attr]
        groups: list[int] = []

        def parts(*args: Any) -> None:
            run_parts(*args)
            groups.append(len(args[0]))

        def write(writes: Any, extra: Any, row: Any, before: Any = None) -> Any:
            if len(groups) == 2:  # the checkpoint after the second group's parts
                session.close()  # its transaction is lost, as in a kill
                raise _Crash()
            return checkpoint_writes(writes, extra, row, before)

        session.write = write  # type: ignore[method-assign]
        writer._run = parts  # type: ignore[union-attr]
        with Running(channel) as crashed:
            wait_for(lambda: crashed.error is not None, "the channel to crash", 60)
        assert isinstance(crashed.error, _Crash)
        assert crashed.stats.parallel_parts > 0
        half = query(dc2, f"SELECT COUNT(*) FROM {SCHEMA}.t")[0][0]

        config = config.model_copy(update={"parallel_workers": workers_after})
        reopened = build_channel(config, apply_user(dc2))
        checkpoint = reopened.open()
        assert reopened.writer.half_written()  # a catch-up now would apply them again
        reopened.target.close()

        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
        assert running.error is None
        assert running.stats.idempotent_fixes == 0, running.stats.as_dict()
        assert running.channel._idempotency.dropped > 0  # the parts' transactions, skipped
    assert half > 20
    assert_same(dc1, dc2, SCHEMA)

    # A rewind to before the half-written group applies its transactions again: their rows in
    # drc.applied_parts go with the rewind, or the replay would skip them.
    rewinding = build_channel(config, apply_user(dc2))
    rewinding.open()
    rewinding.move_to(checkpoint, audit.record("crash", "rewind", "test", "", {}))
    rewinding.target.close()
    assert query(dc2, "SELECT COUNT(*) FROM drc.applied_parts WHERE channel = 'crash'") == [(0,)]


def test_a_large_transaction_goes_alone_piece_by_piece_between_parallel_groups(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, caplog: Any
) -> None:
    """A transaction past a piece's size (drc.apply.streamed) among parallel groups: written
    on the channel's own connection into one target transaction, the groups around it in
    parts, every key as on the source, nothing applied twice."""
    start = _create(dc1, dc2)
    conn = connect(dc1, autocommit=False, database=SCHEMA)
    with conn.cursor() as cur:  # 50,000 new rows, and hot rows the workload touches after
        cur.execute(
            "INSERT INTO t (id, u, v) SELECT seq + 1000000, NULL, CONCAT('big ', seq) "
            "FROM seq_1_to_50000"
        )
        cur.execute("UPDATE t SET v = CONCAT(v, ' in big') WHERE id <= 20")
    conn.commit()
    conn.close()
    _workload(dc1, 300, seed=5)
    caplog.set_level("INFO", logger="drc.apply.streamed")
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        config = channel_config(
            "par", url, [f"{SCHEMA}.*"], parallel_workers=4, max_txns_per_commit=100
        )
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
        assert running.error is None
        stats = running.stats
    assert_same(dc1, dc2, SCHEMA)
    assert "piece by piece" in caplog.text and "3 pieces" in caplog.text, caplog.text
    assert stats.parallel_parts > 1, stats.as_dict()
    assert stats.idempotent_fixes == 0, stats.as_dict()
