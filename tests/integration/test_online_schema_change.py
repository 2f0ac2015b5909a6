"""pt-online-schema-change runs on dc1 while both datacenters write the table it alters.

Two DRC nodes (replicator + pull API + channel from the other side) run in this process
against the sandbox's dc1 and dc2. Each side's writer inserts, updates and deletes its own rows
(odd ids on dc1, even on dc2) of ``t`` and keeps what it expects them to hold; meanwhile the
real tool from Debian's percona-toolkit adds a column to ``t`` on dc1 (shadow table ``_t_new``,
triggers ``pt_osc_<db>_t_ins/upd/del``, chunked copy, RENAME cut-over, DROP of ``_t_old``).
Afterwards both sides hold the same table definition and the same rows, which are the rows the
writers expect (no lost or resurrected change), with no leftover shadow table or trigger and no
idempotent fix counted by either channel.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from drc.config import load_config
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.ledger import stored_changes
from tests.support.servers import connect, drop_everywhere, execute, query

SCHEMA = "osc_db"
ROWS_PER_SIDE = 1500
# What goes wrong when the other side writes during the copy (docs/operations.md, "Online
# schema change tools"): its writes reach the shadow table only through the copy of the tool's
# side (stale for rows it changes meanwhile) and its own copy of the triggers, whose rows can
# arrive after the cut-over renamed the shadow table away (the channel stops: no table _t_new).
TWO_WAY_GAP = "the other side's writes during the copy race the copy and the cut-over"
TOOL = shutil.which("pt-online-schema-change") or "/usr/bin/pt-online-schema-change"


def _seed(server: ServerInfo, parity: int) -> dict[int, tuple[str, int]]:
    rows = {i: (f"{server.datacenter}-{i}", 0) for i in range(parity, 2 * ROWS_PER_SIDE + 1, 2)}
    conn = connect(server, autocommit=False, database=SCHEMA)
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO t (id, v, n) VALUES (%s, %s, %s)", [(i, *r) for i, r in rows.items()]
        )
    conn.commit()
    conn.close()
    return rows


def _writer(
    server: ServerInfo,
    parity: int,
    expected: dict[int, tuple[str, int]],
    stop: threading.Event,
    errors: list[BaseException],
) -> None:
    """Writes this side's rows until ``stop``; ``expected`` follows what they should hold."""
    rng = random.Random(parity)
    next_id = 2 * ROWS_PER_SIDE + parity
    conn = connect(server, database=SCHEMA)
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                roll, ids = rng.random(), list(expected)
                if roll < 0.2:
                    cur.execute(
                        "INSERT INTO t (id, v, n) VALUES (%s, %s, 0)", (next_id, f"new-{next_id}")
                    )
                    expected[next_id] = (f"new-{next_id}", 0)
                    next_id += 2
                elif roll < 0.85:
                    key = rng.choice(ids)
                    cur.execute("UPDATE t SET n = n + 1 WHERE id = %s", (key,))
                    expected[key] = (expected[key][0], expected[key][1] + 1)
                else:
                    key = rng.choice(ids)
                    cur.execute("DELETE FROM t WHERE id = %s", (key,))
                    del expected[key]
    except BaseException as exc:  # reported by the test
        errors.append(exc)
    finally:
        conn.close()


def _run_tool(server: ServerInfo, directory: Path) -> subprocess.CompletedProcess[str]:
    options = directory / "pt-osc.cnf"  # the password stays out of the process list
    options.write_text(f"[client]\nuser={server.user}\npassword={server.password}\n")
    options.chmod(0o600)
    dsn = f"F={options},h={server.host},P={server.port},D={SCHEMA},t=t"
    return subprocess.run(
        [
            TOOL,
            "--alter",
            "ADD COLUMN extra INT NOT NULL DEFAULT 7",
            "--execute",
            "--no-check-replication-filters",
            "--recursion-method=none",
            "--chunk-size=50",
            "--chunk-size-limit=0",
            dsn,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def _tables(server: ServerInfo) -> list[str]:
    found = query(
        server,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (SCHEMA,),
    )
    return sorted(r[0] for r in found)


def _count(server: ServerInfo) -> int:
    return int(query(server, f"SELECT COUNT(*) FROM {SCHEMA}.t")[0][0])


def _state(server: ServerInfo) -> dict[str, Any]:
    conn = connect(server, database=SCHEMA)
    with conn.cursor() as cur:
        cur.execute("SHOW CREATE TABLE t")
        definition = cur.fetchone()[1]
        cur.execute("SELECT id, v, n, extra FROM t ORDER BY id")
        rows = list(cur.fetchall())
        cur.execute("CHECKSUM TABLE t")
        checksum = cur.fetchone()[1]
    conn.close()
    tables = query(
        server,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
        (SCHEMA,),
    )
    triggers = query(
        server,
        "SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = %s",
        (SCHEMA,),
    )
    return {
        "definition": definition,
        "rows": rows,
        "checksum": checksum,
        "tables": sorted(r[0] for r in tables),
        "triggers": sorted(r[0] for r in triggers),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "writing",
    [
        ("dc1",),
        # Not run: it fails (very likely, not always: a strict xfail would flake CI). Run it
        # with --runxfail to see the gap; the design that closes it is in docs/operations.md.
        pytest.param(("dc1", "dc2"), marks=pytest.mark.xfail(run=False, reason=TWO_WAY_GAP)),
    ],
    ids=["tool-side-writes", "two-way-writes"],
)
def test_pt_online_schema_change_ends_equal(
    sandbox: SandboxDescription, tmp_path: Path, writing: tuple[str, ...]
) -> None:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    drop_everywhere(SCHEMA, dc1, dc2)
    configs = write_configs(sandbox, tmp_path, schema=SCHEMA)
    stop, stop_writers = threading.Event(), threading.Event()
    nodes = {dc: Node(load_config(path)) for dc, path in configs.items()}
    errors: list[BaseException] = []
    try:
        for node in nodes.values():
            node.start(stop)
        execute(
            dc1,
            f"CREATE DATABASE {SCHEMA}",
            f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40), n INT NOT NULL)",
        )
        assert wait_for(lambda: _tables(dc2) == ["t"], 30), "t did not reach dc2"
        expected = {1: _seed(dc1, 1), 2: _seed(dc2, 2)}
        for server in (dc1, dc2):
            assert wait_for(lambda s=server: _count(s) == 2 * ROWS_PER_SIDE, 60), (
                server.datacenter,
                _count(dc1),
                _count(dc2),
                [(dc, node.channels[0].stats) for dc, node in nodes.items()],
            )

        writers = [
            threading.Thread(target=_writer, args=(dc, p, expected[p], stop_writers, errors))
            for dc, p in ((dc1, 1), (dc2, 2))
            if dc.datacenter in writing
        ]
        for writer in writers:
            writer.start()
        try:
            done = _run_tool(dc1, tmp_path)
        finally:
            stop_writers.set()
            for writer in writers:
                writer.join(timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not errors, errors

        want = sorted((i, v, n, 7) for side in expected.values() for i, (v, n) in side.items())

        def converged() -> bool:
            one, two = _state(dc1), _state(dc2)
            return one == two and one["rows"] == want

        if not wait_for(converged, 120, interval=0.5):
            one, two = _state(dc1), _state(dc2)
            wrong = {
                dc: sorted(set(state["rows"]) ^ set(want))[:10]
                for dc, state in (("dc1", one), ("dc2", two))
            }
            definitions = (one["definition"], two["definition"])
            objects = {dc: (s["tables"], s["triggers"]) for dc, s in (("dc1", one), ("dc2", two))}
            pytest.fail(f"not converged: rows off {wrong}; {definitions}; {objects}")
        final = _state(dc1)
        time.sleep(1.0)  # let each replicator capture what its channel applied last
        captured = {dc: stored_changes(node, SCHEMA) for dc, node in nodes.items()}
        channels = {dc: node.channels[0].stats for dc, node in nodes.items()}
    finally:
        stop.set()
        for node in nodes.values():
            node.close()

    assert final["tables"] == ["t"] and final["triggers"] == []
    assert "`extra` int(11) NOT NULL DEFAULT 7" in final["definition"]
    # Every change, the copy's chunks included, crossed once and none came back.
    assert captured["dc2"][True] == captured["dc1"][False]
    assert captured["dc1"][True] == captured["dc2"][False]
    for stats in channels.values():
        assert stats.duplicate_inserts == stats.missing_updates == stats.missing_deletes == 0
