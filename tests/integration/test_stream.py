"""A channel on GET /v1/stream (and, for comparison, on pulls) while its connection to the
API is cut at random moments mid-stream, as a server killed under it would: dc2 ends equal to
dc1 row for row, nothing was applied twice (no idempotent fix, the checkpoint never went
back), and a streaming channel did read the stream, not pulls."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import httpx
import pytest

from drc.api import streamwire, wire
from drc.apply.service import build_channel
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, assert_same, channel_config, serving
from tests.support.capture import checkpoint_scns
from tests.support.network import Proxy
from tests.support.servers import connect, drop_everywhere, execute, position
from tests.support.waits import mark_end, wait_end

SCHEMA = "stream_db"
TXNS = 600
CUTS = 4


def _workload(server: ServerInfo, cuts_done: threading.Event, done: threading.Event) -> None:
    """At least TXNS transactions, and on until every cut has happened."""
    rng = random.Random(16)
    conn = connect(server, autocommit=False)
    with conn.cursor() as cur:
        n = 0
        while n < TXNS or not cuts_done.is_set():
            if rng.random() < 0.6 or n < 10:
                rows = [(n * 10 + k, f"v{n}.{k}") for k in range(rng.randint(1, 3))]
                cur.executemany(f"INSERT INTO {SCHEMA}.t (id, v) VALUES (%s, %s)", rows)
            else:
                cur.execute(f"UPDATE {SCHEMA}.t SET v = %s WHERE id = %s",
                            (f"u{n}", rng.randrange(n) * 10))  # fmt: skip
            cur.execute(f"UPDATE {SCHEMA}.counter SET n = n + 1 WHERE id = 1")
            conn.commit()
            n += 1
            time.sleep(0.004)
    conn.close()
    done.set()


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stream", "pull"])
def test_cut_connections_mid_stream_lose_and_repeat_nothing(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, transport: str
) -> None:
    schema = SCHEMA
    drop_everywhere(schema, dc1, dc2)
    target = apply_user(dc2)
    start, target_start = position(dc1), position(dc2)
    execute(dc1, f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(40))",
            f"CREATE TABLE {schema}.counter (id INT PRIMARY KEY, n INT NOT NULL)",
            f"INSERT INTO {schema}.counter VALUES (1, 0)")  # fmt: skip
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        proxy = Proxy(host, int(port))
        config = channel_config(
            "streamed", f"http://127.0.0.1:{proxy.port}", [f"{schema}.*"], transport=transport
        )
        channel = build_channel(config, target)
        cuts_done, done = threading.Event(), threading.Event()
        writer = threading.Thread(target=_workload, args=(dc1, cuts_done, done), daemon=True)
        rng = random.Random(20261123)
        with Running(channel) as running:
            wait_end(dc2, schema, mark_end(dc1, schema), running)
            writer.start()
            cuts = 0
            while cuts < CUTS:
                time.sleep(rng.uniform(0.2, 0.6))
                proxy.cut()  # connections reset mid-stream, new ones refused
                time.sleep(rng.uniform(0.1, 0.5))
                proxy.restore()
                cuts += 1
            cuts_done.set()
            writer.join(timeout=300)
            assert done.is_set(), "the workload did not finish (see its thread's error above)"
            wait_end(dc2, schema, mark_end(dc1, schema), running, timeout=120)
            fixes = channel.stats.idempotent_fixes
        proxy.cut()
        metrics = httpx.get(url + wire.PATH_METRICS, timeout=10).text
    assert_same(dc1, dc2, schema)
    assert fixes == 0, f"{fixes} changes were applied twice"
    scns = checkpoint_scns(dc2, target_start, "streamed")
    back = [(a, b) for a, b in zip(scns, scns[1:], strict=False) if b < a]
    assert len(scns) > 10 and not back, f"a checkpoint went back: {back}"
    pulls = f'route="{wire.PATH_EVENTS}"' in metrics
    streams = f'route="{streamwire.PATH_STREAM}"' in metrics
    assert (streams, pulls) == ((True, False) if transport == "stream" else (False, True))
