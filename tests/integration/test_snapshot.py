"""`drc snapshot` end to end on real servers: dc1 captured and served in process, its tables
copied into dc2 on real Spark (local mode) while writes go on, and joined to a running channel.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from drc.apply.service import build_channel
from drc.config import DrcConfig, load_config
from drc.core.errors import ConfigError
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo
from drc.snapshot.driver import run_snapshot
from drc.snapshot.origin import SnapshotError
from tests.support.apply import Running, apply_process_config, assert_same, running_nodes, serving
from tests.support.config import conflict_rule, server_toml
from tests.support.network import Proxy
from tests.support.servers import connect, execute, master_position, query
from tests.support.snapshot import Background, mark, prepare, seen, two_way_configs
from tests.support.waits import wait_for

pytestmark = pytest.mark.integration

TABLES = (
    "CREATE TABLE {s}.acct (id INT PRIMARY KEY, owner VARCHAR(40), bal DECIMAL(12,2), "
    "f FLOAT, d DATETIME(6), b VARBINARY(16), t TEXT)",
    "CREATE TABLE {s}.skey (code VARCHAR(20) PRIMARY KEY, n INT NOT NULL)",
    "CREATE TABLE {s}.comp (a INT, b VARCHAR(10), v INT, PRIMARY KEY (a, b))",
    "CREATE TABLE {s}.ev (kind VARCHAR(10), v INT)",  # keyless
)
JOINED = ("acct", "skey", "comp", "ev")


def load(server: ServerInfo, schema: str, rows: int) -> None:
    """The tables, and ``rows`` rows spread over them (values of every kind)."""
    execute(server, f"CREATE DATABASE {schema}", *(t.format(s=schema) for t in TABLES))
    rng = random.Random(7)
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        for start in range(0, rows, 2000):
            ids = range(start, min(start + 2000, rows))
            cur.executemany(
                f"INSERT INTO {schema}.acct VALUES (%s, %s, %s, %s, %s, %s, %s)",
                [(i, f"o'{i % 97}\\", i / 100, rng.random() * 1000,
                  f"2024-01-02 03:04:{i % 60:02d}.{i % 999999:06d}", bytes([i % 256, 0, 39]),
                  None if i % 5 else "é€😀") for i in ids],
            )  # fmt: skip
            cur.executemany(f"INSERT INTO {schema}.skey VALUES (%s, %s)",
                            [(f"k{i:07d}", i) for i in ids[::2]])  # fmt: skip
            cur.executemany(f"INSERT INTO {schema}.comp VALUES (%s, %s, %s)",
                            [(i % 50, f"b{i}", i) for i in ids[::2]])  # fmt: skip
            cur.executemany(f"INSERT INTO {schema}.ev VALUES (%s, %s)",
                            [("e", i % 10) for i in ids[::4]])  # fmt: skip
            conn.commit()
    conn.close()


class Writer(Background):
    """Writes to every table of ``schema`` (and ``other``) in a thread until stopped: inserts,
    updates, deletes, a primary key moved, identical keyless rows."""

    def __init__(self, server: ServerInfo, schema: str, other: str, rows: int) -> None:
        super().__init__(server)
        self.schema, self.other, self.rows = schema, other, rows

    def _write(self) -> None:
        s, rng, next_id = self.schema, random.Random(11), self.rows + 1_000_000
        conn = connect(self.server, autocommit=False)
        with conn.cursor() as cur:
            while not self.stop.is_set():
                i = rng.randrange(self.rows)
                cur.execute(f"UPDATE {s}.acct SET bal = bal + 1, t = %s WHERE id = %s",
                            (f"u{self.done}", i))  # fmt: skip
                cur.execute(f"INSERT INTO {s}.acct (id, owner) VALUES (%s, 'new')", (next_id,))
                cur.execute(f"DELETE FROM {s}.acct WHERE id = %s", (rng.randrange(self.rows),))
                cur.execute(f"UPDATE {s}.acct SET id = %s WHERE id = %s", (next_id + 1, i + 1))
                next_id += 2
                cur.execute(f"UPDATE {s}.skey SET n = n + 1 WHERE code = %s",
                            (f"k{rng.randrange(0, self.rows, 2):07d}",))  # fmt: skip
                cur.execute(f"REPLACE INTO {s}.skey VALUES (%s, 1)", (f"w{next_id}",))
                cur.execute(f"DELETE FROM {s}.comp WHERE a = %s AND b = %s",
                            (i % 50, f"b{i - i % 2}"))  # fmt: skip
                cur.execute(f"INSERT INTO {s}.comp VALUES (%s, %s, 1) ON DUPLICATE KEY UPDATE "
                            "v = v + 1", (rng.randrange(50), f"w{rng.randrange(500)}"))  # fmt: skip
                v = rng.randrange(10)
                cur.execute(f"INSERT INTO {s}.ev VALUES ('w', %s), ('w', %s)", (v, v))
                cur.execute(f"DELETE FROM {s}.ev WHERE v = %s LIMIT 1", (rng.randrange(10),))
                cur.execute(f"UPDATE {s}.ev SET v = v + 10 WHERE v = %s LIMIT 1", (v,))
                cur.execute(f"INSERT INTO {self.other}.o (n) VALUES (%s)", (self.done,))
                conn.commit()
                self.done += 1
                time.sleep(0.005)
        conn.close()


def config_file(
    tmp: Path,
    dc1: ServerInfo,
    dc2: ServerInfo,
    url: str,
    tables: list[str],
    origin_port: int | None = None,
    origin: ServerInfo | None = None,
) -> Path:
    """dc2's config: one channel from dc1, [channels.origin_db] reading dc1, and a conflict
    policy (overwrite) on two of the copied tables, so a false conflict would be logged."""
    origin_secret = tmp / "origin.password"
    origin = origin or dc1
    origin_secret.write_text(origin.password)
    path = apply_process_config(
        tmp, dc2, url, "snap", tables, max_commit_delay_ms=20, no_primary_key="match_whole_row"
    )
    origin_db = server_toml(
        "channels.origin_db", origin, password_file=origin_secret, port=origin_port
    )
    rules = conflict_rule("*.acct", "overwrite") + conflict_rule("*.comp", "overwrite")
    path.write_text(path.read_text() + f"{origin_db}\n{rules}")
    return path


def row_lock_waits(server: ServerInfo) -> int:
    return int(query(server, "SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'")[0][1])


def test_snapshot_under_writes_joins_a_running_channel_and_stays_equal(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema, other, rows = "snap_eq", "snap_other", 10_000
    prepare(dc1, dc2, schema, other)
    execute(dc1, f"CREATE DATABASE {other}",
            f"CREATE TABLE {other}.o (id INT AUTO_INCREMENT PRIMARY KEY, n INT)")  # fmt: skip
    execute(dc2, f"CREATE DATABASE {other}",
            f"CREATE TABLE {other}.o (id INT AUTO_INCREMENT PRIMARY KEY, n INT)")  # fmt: skip
    load(dc1, schema, rows)
    with serving(dc1, tmp_path / "buf", [f"{schema}.*", f"{other}.*"], master_position(dc1)) as (
        capture, url,
    ):  # fmt: skip
        execute(dc1, f"INSERT INTO {other}.o (n) VALUES (-1)")
        capture.wait_for(master_position(dc1))
        # The channel runs already, for another schema only; the snapshot joins the tables.
        config = load_config(config_file(tmp_path, dc1, dc2, url, [f"{other}.*"]))
        channel = build_channel(config.channels[0], config.target_or_source(),
                                conflicts=config.conflicts, datacenter="dc2")  # fmt: skip
        with Running(channel) as running:
            with Writer(dc1, schema, other, rows) as writer:
                wait_for(lambda: writer.done > 20, "writes before the snapshot")
                waits = row_lock_waits(dc1)
                lines: list[str] = []
                summary = run_snapshot(config, "snap", patterns=[f"{schema}.*"],
                                       master="local[2]", chunk_rows=1000, partitions=3,
                                       out=lines.append)  # fmt: skip
                assert row_lock_waits(dc1) == waits, "no writer waited for a row lock meanwhile"
                written = writer.done
                wait_for(lambda: writer.done > written + 50, "writes after the join")
            token = mark(dc1, schema)
            wait_for(lambda: seen(dc2, schema, token), "the last write applied", 180,
                     running=running)  # fmt: skip
        channel_stats = channel.stats
        running.stop()
    assert sorted(summary.copied) == sorted(f"{schema}.{t}" for t in JOINED)
    assert not summary.skipped and summary.chunks > 8
    assert any("created from the origin's definition" in line for line in lines)
    assert_same(dc1, dc2, schema)
    assert_same(dc1, dc2, other)
    logged = "SELECT * FROM drc.conflicts WHERE schema_name IN (%s, %s)"
    conflicts = query(dc2, logged, (schema, other))
    assert not conflicts, f"no false conflict: {conflicts}; windows {summary.windows}"
    assert channel_stats.last_error in (None, "") or "holds channel" in channel_stats.last_error
    ev = [w for w in summary.windows if w.source == (schema, "ev")][0]
    assert ev.copied_at == ev.converge_until, "the keyless table is one read at one position"
    assert query(dc2, "SELECT COUNT(*) FROM drc.snapshot_chunk") == [(0,)], "journal finished"


@pytest.mark.slow
def test_a_snapshot_killed_midway_and_run_again_ends_equal(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema, other, rows = "snap_kill", "snap_kill_o", 30_000
    with served(dc1, dc2, tmp_path, schema, other, rows) as path:
        with Writer(dc1, schema, other, rows):
            killed = subprocess.Popen(
                [sys.executable, "-m", "drc.cli", "snapshot", "--config", str(path), "--channel",
                 "snap", "--master", "local[1]", "--chunk-rows", "500", "--partitions", "1"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            try:
                wait_for(lambda: _copied(dc2) >= 5, "some chunks copied", 180)
            finally:
                os.killpg(killed.pid, signal.SIGKILL)
                killed.wait(30)
            config = load_config(path)
            summary = run_snapshot(config, "snap", master="local[2]", chunk_rows=500,
                                   out=lambda _l: None)  # fmt: skip
            assert 5 <= summary.resumed < summary.chunks, "killed midway; its chunks are kept"
        caught_up(config, dc1, dc2, schema)
    assert_same(dc1, dc2, schema)


@contextmanager
def served(
    dc1: ServerInfo, dc2: ServerInfo, tmp: Path, schema: str, other: str, rows: int
) -> Iterator[Path]:
    """``rows`` rows in ``schema`` on dc1 (and ``other``, for the Writer), dc1 captured and
    served; yields dc2's config."""
    prepare(dc1, dc2, schema, other)
    execute(dc1, f"CREATE DATABASE {other}",
            f"CREATE TABLE {other}.o (id INT AUTO_INCREMENT PRIMARY KEY, n INT)")  # fmt: skip
    load(dc1, schema, rows)
    with serving(dc1, tmp / "buf", [f"{schema}.*"], master_position(dc1)) as (capture, url):
        execute(dc1, f"UPDATE {schema}.acct SET bal = 1 WHERE id = 1")
        capture.wait_for(master_position(dc1))
        yield config_file(tmp, dc1, dc2, url, [f"{schema}.*"])


def caught_up(config: DrcConfig, dc1: ServerInfo, dc2: ServerInfo, schema: str) -> None:
    """dc2's channel run until dc1's last write to ``schema`` is applied."""
    channel = build_channel(config.channels[0], config.target_or_source(),
                            conflicts=config.conflicts, datacenter="dc2")  # fmt: skip
    with Running(channel) as running:
        token = mark(dc1, schema)
        wait_for(lambda: seen(dc2, schema, token), "the last write applied", 180,
                 running=running)  # fmt: skip


@pytest.mark.slow
def test_snapshot_on_the_sandbox_standalone_cluster(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """`drc snapshot --master spark://...` (the CLI, its driver in its own process) with the
    chunks copied by the sandbox's Spark worker while dc1 writes, then applied by the channel."""
    schema, other, rows = "snap_cluster", "snap_cluster_o", 4_000
    description = Sandbox(sandbox.dir).up(datacenters=len(sandbox.servers), with_spark=True)
    assert description.spark is not None
    with served(dc1, dc2, tmp_path, schema, other, rows) as path:
        with Writer(dc1, schema, other, rows):
            done = subprocess.run(
                [sys.executable, "-m", "drc.cli", "snapshot", "--config", str(path), "--channel",
                 "snap", "--master", description.spark.master_url, "--chunk-rows", "500",
                 "--partitions", "2"],
                capture_output=True, text=True, timeout=900, check=False,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"master {description.spark.master_url}" in done.stdout
        assert f"joined {schema}.acct" in done.stdout
        caught_up(load_config(path), dc1, dc2, schema)
    assert_same(dc1, dc2, schema)
    logged = ("SELECT scn, table_name, primary_key, kind, local_row, incoming_before, "
              "incoming_after FROM drc.conflicts WHERE schema_name = %s")  # fmt: skip
    assert query(dc2, logged, (schema,)) == [], "no false conflict"


def _copied(server: ServerInfo) -> int:
    try:
        found = query(
            server, "SELECT COUNT(*) FROM drc.snapshot_chunk WHERE copied_rows IS NOT NULL"
        )
    except Exception:  # not created yet
        return 0
    return int(found[0][0])


def test_bad_input_is_a_clear_error_or_a_named_skip(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "snap_bad"
    prepare(dc1, dc2, schema)
    execute(dc1, f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.differs (id INT PRIMARY KEY, v INT)",
            f"CREATE TABLE {schema}.full (id INT PRIMARY KEY)",
            f"INSERT INTO {schema}.full VALUES (1)")  # fmt: skip
    execute(dc2, f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.differs (id INT PRIMARY KEY, v BIGINT)",
            f"CREATE TABLE {schema}.full (id INT PRIMARY KEY)",
            f"INSERT INTO {schema}.full VALUES (2)")  # fmt: skip
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], master_position(dc1)) as (capture, url):
        execute(dc1, f"INSERT INTO {schema}.differs VALUES (1, 1)")
        capture.wait_for(master_position(dc1))
        config = load_config(config_file(tmp_path, dc1, dc2, url, [f"{schema}.*"]))
        with pytest.raises(SnapshotError, match="no table on the origin matches nope"):
            run_snapshot(config, "snap", patterns=["nope.*"], out=lambda _l: None)
        with pytest.raises(ConfigError, match="no channel named 'x'"):
            run_snapshot(config, "x", out=lambda _l: None)
        other = load_config(config_file(tmp_path, dc1, dc2, url, [f"{schema}.*"], origin=dc2))
        with pytest.raises(SnapshotError, match="is server_id 2, but the origin replicator"):
            run_snapshot(other, "snap", out=lambda _l: None)
        held = "SELECT owner FROM drc.catchup_lease WHERE expires_at > UTC_TIMESTAMP(6)"
        assert query(dc2, held) == [], "nothing copied: the channel is given back at once"
        execute(dc2, "DELETE FROM drc.snapshot_run", "DELETE FROM drc.snapshot_chunk")
        summary = run_snapshot(config, "snap", master="local[1]", out=lambda _l: None)
        assert "column v is bigint" in summary.skipped[f"{schema}.differs"]
        assert "already holds rows" in summary.skipped[f"{schema}.full"]
        assert not summary.copied
        assert query(dc2, f"SELECT v FROM {schema}.differs") == [], "nothing half-written"
        # The origin going away mid-copy: a clear error, the chunks copied kept for a re-run.
        execute(dc2, f"DROP TABLE {schema}.differs", f"DELETE FROM {schema}.full")
        execute(dc1, f"CREATE TABLE {schema}.big (id INT PRIMARY KEY, pad CHAR(200))")
        conn = connect(dc1, autocommit=False)
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {schema}.big VALUES (%s, 'x')", [(i,) for i in range(30_000)]
            )
        conn.commit()
        conn.close()
        proxy = Proxy(dc1.host, dc1.port)
        cut = config_file(tmp_path, dc1, dc2, url, [f"{schema}.*"], origin_port=proxy.port)
        threading.Thread(target=lambda: (wait_for(lambda: _copied(dc2) >= 3, "chunks", 120),
                                         proxy.cut()), daemon=True).start()  # fmt: skip
        with pytest.raises(SnapshotError, match="run the same command again"):
            run_snapshot(load_config(cut), "snap", master="local[1]", chunk_rows=200,
                         partitions=1, out=lambda _l: None)  # fmt: skip
        summary = run_snapshot(config, "snap", master="local[1]", chunk_rows=200,
                               out=lambda _l: None)  # fmt: skip
        assert summary.resumed >= 3 and not summary.skipped
    for table in ("differs", "full", "big"):
        rows: list[Any] = query(dc1, f"SELECT * FROM {schema}.{table} ORDER BY id")
        assert rows == query(dc2, f"SELECT * FROM {schema}.{table} ORDER BY id")


@pytest.mark.slow
def test_snapshot_into_a_two_way_pair_under_load_on_both_sides(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """Both datacenters run `drc run` with two-way load on tw2; dc2's channel is told about
    tw only by the snapshot. Afterwards dc2 also writes to tw, and both sides stay equal."""
    prepare(dc1, dc2, "tw", "tw2")
    for server in (dc1, dc2):
        execute(server, "CREATE DATABASE tw2", "CREATE TABLE tw2.o (id INT AUTO_INCREMENT "
                "PRIMARY KEY, n INT)")  # fmt: skip
    load(dc1, "tw", 10_000)
    configs = two_way_configs(sandbox, tmp_path / "cfg", ["tw2.*"], ["tw.*"])
    with running_nodes(configs):
        back = Reverse(dc2)
        with back, Writer(dc1, "tw", "tw2", 10_000) as writer:
            wait_for(lambda: writer.done > 20 and back.done > 20, "two-way writes")
            config = load_config(configs["dc2"])
            summary = run_snapshot(config, "from-dc1", patterns=["tw.*"], master="local[2]",
                                   chunk_rows=1000, out=lambda _l: None)  # fmt: skip
            written = writer.done
            wait_for(lambda: writer.done > written + 50, "writes after the join")
        with Reverse(dc2, "tw.acct", "bal"):  # the joined table now takes writes on dc2 too
            time.sleep(3)
        for here, there in ((dc1, dc2), (dc2, dc1)):
            token = mark(here, "tw")
            wait_for(partial(seen, there, "tw", token), f"{here.datacenter}'s last write", 180)
        wait_for(lambda: _rows(dc1, "tw2.o") == _rows(dc2, "tw2.o"), "tw2 converged", 120)
    assert sorted(summary.copied) == sorted(f"tw.{t}" for t in JOINED)
    assert_same(dc1, dc2, "tw")
    assert_same(dc1, dc2, "tw2")


class Reverse:
    """Writes on ``server`` in a thread: new rows of ``table`` with ids of their own (negative:
    the other side's AUTO_INCREMENT never reaches them), and updates of ``column``."""

    def __init__(self, server: ServerInfo, table: str = "tw2.o", column: str = "n") -> None:
        self.server, self.table, self.column, self.done = server, table, column, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Reverse:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)

    def _run(self) -> None:
        conn = connect(self.server)
        base = -1 - 1_000_000 * (self.table != "tw2.o")
        with conn.cursor() as cur:
            while not self.stop.wait(0.01):
                cur.execute(f"INSERT INTO {self.table} (id) VALUES (%s)", (base - self.done,))
                cur.execute(f"UPDATE {self.table} SET {self.column} = %s WHERE id = %s",
                            (self.done, base))  # fmt: skip
                self.done += 1
        conn.close()


def _rows(server: ServerInfo, table: str) -> int:
    return int(query(server, f"SELECT COUNT(*) FROM {table}")[0][0])
