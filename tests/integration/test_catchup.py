"""Bulk catch-up end to end: dc1 captured and served in process (small segments), its backlog
replayed into dc2 by `drc catchup` on real Spark (local mode; the sandbox's standalone cluster
in a slow test), then handed over to a streaming channel."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from drc.apply.service import build_channel
from drc.catchup.driver import CatchupError, run_catchup
from drc.config import load_config
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo
from tests.support.apply import Running, apply_process_config, assert_same
from tests.support.catchup import (
    SCHEMA,
    TABLES,
    checkpoint_of,
    config_for,
    prepare,
    served,
    workload,
)
from tests.support.servers import connect, execute, master_position, query
from tests.support.waits import mark_end, wait_end

pytestmark = pytest.mark.integration


def test_catchup_of_a_backlog_equals_the_source_and_streaming_goes_on_from_it(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    prepare(dc1, dc2, SCHEMA)
    with served(dc1, tmp_path, SCHEMA) as (capture, url):
        execute(dc1, f"CREATE DATABASE {SCHEMA}", *TABLES)
        workload(dc1, SCHEMA, seed=14, txns=400, ddl_at=200)
        capture.wait_for(master_position(dc1))
        last = capture.buffer.last_scn
        config = load_config(config_for(tmp_path, dc2, url, "cu", SCHEMA))
        lines: list[str] = []
        summary = run_catchup(config, "cu", master="local[2]", partitions=3, out=lines.append)
        assert summary.to == last and checkpoint_of(dc2, "cu") == str(last)
        assert summary.ddl >= 4, "CREATE DATABASE, three CREATE TABLEs and the ALTER"
        assert summary.reduced < summary.changes, "hot rows reduced"
        assert any("segments fetched" in line for line in lines)
        assert "catch-up of cu done" in lines[-1]
        assert_same(dc1, dc2, SCHEMA)
        assert query(dc2, "SELECT COUNT(*) FROM drc.catchup_run") == [(0,)]
        # Handover: streaming resumes after the catch-up's checkpoint, no gap, no duplicate.
        channel = build_channel(config.channels[0], config.target_or_source())
        with Running(channel) as running:
            workload(dc1, SCHEMA, seed=15, txns=100, ddl_at=None)
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
        assert channel.stats.idempotent_fixes == 0, "nothing applied twice"
    assert_same(dc1, dc2, SCHEMA)


def test_streaming_waits_while_a_catchup_holds_the_channel_then_continues_from_it(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "catchup_hand"
    prepare(dc1, dc2, schema)
    with served(dc1, tmp_path, schema) as (capture, url):
        execute(dc1, f"CREATE DATABASE {schema}", *(t.replace(SCHEMA, schema) for t in TABLES))
        config = load_config(config_for(tmp_path, dc2, url, "hand", schema))
        first = build_channel(config.channels[0], config.target_or_source())
        with Running(first) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
        workload(dc1, schema, seed=3, txns=200, ddl_at=100)  # a backlog while it is stopped
        capture.wait_for(master_position(dc1))
        # The channel starts again as the catch-up does, and writes go on during both: the
        # channel holds off while the catch-up holds the lease, then streams from its end.
        channel = build_channel(config.channels[0], config.target_or_source())
        writer = subprocess.Popen([sys.executable, "-c", _writer(dc1, schema)])
        with Running(channel) as running:
            try:
                summary = run_catchup(config, "hand", master="local[2]", partitions=2,
                                      out=lambda _line: None)  # fmt: skip
            finally:
                writer.wait(timeout=120)
            assert summary.to > summary.after
            wait_end(dc2, schema, mark_end(dc1, schema), running)
        assert channel.stats.idempotent_fixes == 0, "the channel applied nothing twice"
    assert_same(dc1, dc2, schema)


def _writer(server: ServerInfo, schema: str) -> str:
    return (
        "import pymysql, time\n"
        f"c = pymysql.connect(host={server.host!r}, port={server.port}, user={server.user!r}, "
        f"password={server.password!r}, autocommit=True)\n"
        "cur = c.cursor()\n"
        "for n in range(150):\n"
        f"    cur.execute('INSERT INTO {schema}.events VALUES (\\'w\\', %s)', (n,))\n"
        f"    cur.execute('UPDATE {schema}.hot SET n = n + 1 WHERE id = 2')\n"
        "    time.sleep(0.01)\n"
    )


def test_a_range_whose_segments_are_gone_is_refused_and_nothing_is_written(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "catchup_gone"
    prepare(dc1, dc2, schema)
    with served(dc1, tmp_path, schema, retain_bytes=20000) as (capture, url):
        execute(dc1, f"CREATE DATABASE {schema}", *(t.replace(SCHEMA, schema) for t in TABLES))
        workload(dc1, schema, seed=5, txns=300, ddl_at=None)
        capture.wait_for(master_position(dc1))
        config = load_config(config_for(tmp_path, dc2, url, "gone", schema))
        with pytest.raises(CatchupError, match="no longer has the changes after") as raised:
            run_catchup(config, "gone", master="local[1]", out=lambda _line: None)
        assert "snapshot" in str(raised.value)
    assert query(dc2, "SHOW DATABASES LIKE %s", (schema,)) == []
    assert checkpoint_of(dc2, "gone") == ""


@pytest.mark.slow
def test_catchup_on_the_sandbox_standalone_cluster(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "catchup_cluster"
    description = Sandbox(sandbox.dir).up(datacenters=len(sandbox.servers), with_spark=True)
    assert description.spark is not None
    prepare(dc1, dc2, schema)
    with served(dc1, tmp_path, schema) as (capture, url):
        execute(dc1, f"CREATE DATABASE {schema}", *(t.replace(SCHEMA, schema) for t in TABLES))
        workload(dc1, schema, seed=21, txns=300, ddl_at=150)
        capture.wait_for(master_position(dc1))
        config = load_config(config_for(tmp_path, dc2, url, "cluster", schema))
        summary = run_catchup(config, "cluster", master=description.spark.master_url,
                              partitions=2, out=lambda _line: None)  # fmt: skip
        assert summary.ddl >= 1
    assert_same(dc1, dc2, schema)


LWW = "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20), ts DATETIME(6) NOT NULL)"
BASE = "2026-01-01 00:00:00"


def _lww_config(tmp: Path, target: ServerInfo, url: str) -> Path:
    """Two channels from dc1's `cl` into dc2: `lww-s` (streamed) into cl_s, `lww-c` (caught
    up) into cl_c, both under lww on ts."""
    base = apply_process_config(tmp, target, url, "lww-s", ["cl.*"]).read_text()
    head, channel = base.split("[[channels]]")
    channels = "".join(
        "[[channels]]" + channel.replace('"lww-s"', f'"lww-{k}"')
        + f'map_tables = {{ "cl.*" = "cl_{k}.*" }}\n'
        for k in ("s", "c")
    )  # fmt: skip
    conflicts = (
        '[conflicts]\npriority = ["dc1", "dc2"]\n'
        '[[conflicts.tables]]\ntable = "cl_*.t"\npolicy = "lww"\ncolumn = "ts"\n'
    )
    path = tmp / "lww.toml"
    path.write_text(head + channels + conflicts)
    return path


def _lww_rows(server: ServerInfo, db: str) -> None:
    execute(server, f"CREATE DATABASE {db}", LWW.format(db=db))
    conn = connect(server)
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {db}.t VALUES (%s, 'init', %s)",
                        [(k, BASE) for k in range(1, 61)])  # fmt: skip
    conn.close()


def _at(ms: int) -> str:
    return f"2026-01-01 00:00:{ms // 1000:02d}.{ms % 1000:03d}000"


def test_lww_catchup_decides_and_logs_conflicts_as_streaming_does(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    prepare(dc1, dc2, "cl")
    for db in ("cl_s", "cl_c"):
        execute(dc2, f"DROP DATABASE IF EXISTS {db}")
    execute(dc2, "DROP TABLE IF EXISTS drc.conflicts")
    _lww_rows(dc1, "cl")
    for db in ("cl_s", "cl_c"):
        _lww_rows(dc2, db)
    with served(dc1, tmp_path, "cl") as (capture, url):
        conn = connect(dc1)
        with conn.cursor() as cur:  # the remote backlog
            for k in range(1, 41):
                cur.execute(
                    "UPDATE cl.t SET v = %s, ts = %s WHERE id = %s", (f"r{k}", _at(k * 10), k)
                )
            for k in range(41, 51):
                cur.execute("DELETE FROM cl.t WHERE id = %s", (k,))
            for k in range(61, 76):
                cur.execute("INSERT INTO cl.t VALUES (%s, %s, %s)", (k, f"r{k}", _at(k * 10)))
            for k in range(1, 21):  # hot keys: changed again after the local write's time
                for step in (7, 8):
                    cur.execute("UPDATE cl.t SET v = %s, ts = %s WHERE id = %s",
                                (f"r{k}.{step}", _at(k * 10 + step), k))  # fmt: skip
            for k in range(71, 76):  # made and removed in the range, meeting a local row
                cur.execute("DELETE FROM cl.t WHERE id = %s", (k,))
            for k in range(21, 26):  # one key changed three times in one transaction
                cur.execute("BEGIN")
                for step in (1, 2, 3):
                    cur.execute("UPDATE cl.t SET v = %s, ts = %s WHERE id = %s",
                                (f"r{k}.{step}", _at(k * 10 + step * 2), k))  # fmt: skip
                cur.execute("COMMIT")
            for k in range(76, 79):  # made, removed and made again, meeting a local row
                cur.execute("INSERT INTO cl.t VALUES (%s, 'r', %s)", (k, _at(k * 10)))
                cur.execute("DELETE FROM cl.t WHERE id = %s", (k,))
                cur.execute("INSERT INTO cl.t VALUES (%s, 'r2', %s)", (k, _at(k * 10 + 4)))
        conn.close()
        for db in ("cl_s", "cl_c"):  # concurrent local writes, the same on both copies
            conn = connect(dc2)
            with conn.cursor() as cur:
                for k in range(1, 26):  # newer for even keys, older for odd ones
                    ms = k * 10 + (5 if k % 2 == 0 else -5)
                    cur.execute(f"UPDATE {db}.t SET v = %s, ts = %s WHERE id = %s",
                                (f"l{k}", _at(ms), k))  # fmt: skip
                for k in (45, 46):  # update of rows the remote deleted
                    cur.execute(f"UPDATE {db}.t SET v = 'l', ts = %s WHERE id = %s", (_at(999), k))
                for k in (*range(61, 66), *range(71, 79)):  # insert-insert
                    cur.execute(f"INSERT INTO {db}.t VALUES (%s, 'l', %s)", (k, _at(k * 10 + 1)))
            conn.close()
        capture.wait_for(master_position(dc1))
        last = str(capture.buffer.last_scn)
        config = load_config(_lww_config(tmp_path, dc2, url))
        streaming = build_channel(config.channels[0], config.target_or_source(),
                                  conflicts=config.conflicts, datacenter="dc2")  # fmt: skip
        with Running(streaming) as running:
            deadline = time.monotonic() + 60
            while checkpoint_of(dc2, "lww-s") != last and time.monotonic() < deadline:
                assert running.error is None, running.error
                time.sleep(0.1)
        summary = run_catchup(config, "lww-c", master="local[2]", partitions=3,
                              out=lambda _line: None)  # fmt: skip
    streamed, caught_up = (
        query(dc2, f"SELECT * FROM {db}.t ORDER BY id") for db in ("cl_s", "cl_c")
    )
    assert streamed == caught_up
    logged = [
        query(
            dc2,
            "SELECT scn, origin_time, table_name, primary_key, kind, policy, decision, reason, "
            "local_row, incoming_before, incoming_after, result_row FROM drc.conflicts "
            "WHERE channel = %s ORDER BY scn, primary_key",
            (name,),
        )  # fmt: skip
        for name in ("lww-s", "lww-c")
    ]
    assert logged[0] == logged[1], "the same entries: one per conflicting change, not per key"
    hot = [row for row in logged[0] if row[3] == '{"id":2}']
    assert [row[6] for row in hot] == ["local", "incoming"], "r2 loses, r2.7 wins, r2.8 applies"
    per_key = [row for row in logged[0] if row[3] == '{"id":22}']
    assert len(per_key) >= 2, "changes of one key in one transaction decided one by one"
    assert len(logged[0]) >= 40
    assert summary.conflicts == streaming.stats.conflicts == len(logged[0]), "the same counts"
