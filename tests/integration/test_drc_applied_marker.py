"""A two-way pair with ``[replicator] drc_applied = "marker"``: both directions cross exactly
once with no echo, the rows DRC applied are never decoded nor stored, and a subscriber that
pulls without ``skip_drc`` gets what docs/configuration.md promises (409 ``rows_omitted``
unless it asks for the records without rows).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from drc.client import Subscriber
from drc.client.errors import ApiRequestError
from drc.config import load_config
from drc.core.codec import decode_transaction
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.node import Node
from drc.replicator import source
from drc.replicator.binlog.events import EventDecoder
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.servers import connect, drop_everywhere

SCHEMA = "drc_applied_db"  # its own: the sandbox is shared with other tests
TXNS_PER_SIDE = 120


def _statements(datacenter: str, parity: int, seed: int) -> list[list[tuple[str, Any]]]:
    """TXNS_PER_SIDE transactions of this side's own rows (ids of one parity)."""
    rng = random.Random(seed)
    live: list[int] = []
    txns: list[list[tuple[str, Any]]] = []
    for n in range(TXNS_PER_SIDE):
        roll = rng.random()
        if roll < 0.45 or len(live) < 5:
            new = [len(txns) * 6 + 2 * k + parity for k in range(3)]
            live += new
            txns.append(
                [("INSERT INTO t VALUES (%s, %s, 0)", (i, f"{datacenter}-{n}")) for i in new]
            )
        elif roll < 0.75:
            txns.append([
                ("UPDATE t SET n = n + 1 WHERE id = %s", (rng.choice(live),)),
                ("INSERT INTO log VALUES (%s, 'update')", (n * 2 + parity,)),
            ])  # fmt: skip
        else:
            txns.append([("DELETE FROM t WHERE id = %s", (live.pop(rng.randrange(len(live))),))])
    return txns


def _workload(server: ServerInfo, parity: int, seed: int) -> None:
    conn = connect(server, autocommit=False, database=SCHEMA)
    with conn.cursor() as cur:
        for txn in _statements(server.datacenter, parity, seed):
            for statement, params in txn:
                cur.execute(statement, params)
            conn.commit()
    conn.close()


def _snapshot(server: ServerInfo) -> list[Any]:
    conn = connect(server, database=SCHEMA)
    found = []
    with conn.cursor() as cur:
        for table in ("t", "log"):
            cur.execute(f"SELECT * FROM `{table}` ORDER BY id")
            found.append(list(cur.fetchall()))
            cur.execute(f"CHECKSUM TABLE `{table}`")
            found.append(cur.fetchone()[1])
    conn.close()
    return found


def _stored(node: Node) -> list[Transaction]:
    assert node.service is not None
    found, after = [], SCN(0, 0, 0, 0)
    while records := node.service.buffer.read_after(after, 1000, 16 << 20):
        found += [decode_transaction(r.payload)[0] for r in records]
        after = records[-1].scn
    return found


def _decoded_tables(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """Counts the rows events capture decodes, by table: a stand-in for the source's decoder
    that counts what the real one returns (a method patched on the class would not see the
    calls made inside the compiled decoder, drc.native)."""
    seen: Counter[tuple[str, str]] = Counter()

    class Counting:
        def __init__(self, *args: Any) -> None:
            object.__setattr__(self, "inner", EventDecoder(*args))

        def decode(self, data: bytes, skip_rows: bool = False) -> Any:
            event = self.inner.decode(data, skip_rows)
            if getattr(event, "images", None):
                seen[(event.table.schema, event.table.table)] += 1
            return event

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def __setattr__(self, name: str, value: Any) -> None:
            setattr(self.inner, name, value)

    monkeypatch.setattr(source, "EventDecoder", Counting)
    return seen


def _pull_all(url: str, **options: Any) -> list[Transaction]:
    found: list[Transaction] = []
    with Subscriber([url], wait_ms=-1, prefetch=False, **options) as sub:
        while True:
            batch = sub.get(timeout=20)
            found += batch.transactions
            sub.ack(batch)
            if not batch.transactions and batch.next == batch.after:
                return found


@pytest.mark.slow
def test_marker_mode_pair_crosses_exactly_once_without_decoding_drc_rows(
    sandbox: SandboxDescription, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    decoded = _decoded_tables(monkeypatch)
    stop = threading.Event()
    configs = write_configs(sandbox, tmp_path, SCHEMA, drc_applied="marker")
    nodes = {dc: Node(load_config(path)) for dc, path in configs.items()}
    try:
        _start_with_schema(nodes, stop, dc1, dc2)
        writers = [
            threading.Thread(target=_workload, args=(dc1, 1, 11)),
            threading.Thread(target=_workload, args=(dc2, 2, 22)),
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(timeout=300)
        assert wait_for(lambda: _snapshot(dc1) == _snapshot(dc2), 120, interval=0.25)
        time.sleep(1.0)  # let each replicator capture what its channel applied last
        stored = {dc: _stored(node) for dc, node in nodes.items()}
        applied = {dc: node.channels[0].stats for dc, node in nodes.items()}
        markers = {dc: _markers(node) for dc, node in nodes.items()}
        url = nodes["dc1"].api_url
        assert url is not None
        with pytest.raises(ApiRequestError) as refused:
            _pull_all(url)
        assert refused.value.status == 409 and refused.value.code == "rows_omitted"
        as_markers = _pull_all(url, drc_applied="marker")
        skipping = _pull_all(url, skip_drc=True)
    finally:
        stop.set()
        for node in nodes.values():
            node.close()

    own = {dc: [t for t in txns if not t.drc_originated] for dc, txns in stored.items()}
    for dc, other in (("dc1", "dc2"), ("dc2", "dc1")):
        drc = [t for t in stored[dc] if t.drc_originated]
        # No echo: a side's own captured transactions of SCHEMA are exactly those it wrote.
        assert sum(any(c.schema == SCHEMA for c in t.changes) for t in own[dc]) == TXNS_PER_SIDE
        # Every transaction DRC applied here is stored as a marker, without a row.
        assert drc and all(t.rows_omitted and not t.changes for t in drc if not t.ddl)
        # (one per target transaction of the channel into this side, which groups many)
        assert 0 < markers[dc] == sum(t.rows_omitted for t in drc) <= applied[dc].commits
        # Exactly once: the other side applied every own row change of this side, once.
        own_rows = sum(c.schema == SCHEMA for t in own[dc] for c in t.changes)
        assert applied[other].rows == own_rows
        assert applied[other].duplicate_inserts == applied[other].missing_updates == 0
        assert applied[other].missing_deletes == 0
    # Capture decodes every rows event before its filter: the channels' checkpoint rows, in
    # DRC's transactions only, would be decoded if their rows were.
    assert decoded[("drc", "checkpoint")] == 0, decoded
    assert decoded[(SCHEMA, "t")] > 0
    # The pulls came after ``stored`` was read: compare what both saw (the heartbeat row goes
    # on being captured every second).
    last = stored["dc1"][-1].scn
    marked = [t for t in as_markers if not t.changes and not t.ddl and t.drc_originated]
    assert [t.scn for t in marked if t.scn <= last] == [
        t.scn for t in stored["dc1"] if t.rows_omitted
    ]
    assert not any(t.drc_originated for t in skipping)
    assert [t.scn for t in skipping if t.changes and t.scn <= last] == [
        t.scn for t in own["dc1"] if t.changes
    ]


def _start_with_schema(
    nodes: dict[str, Node], stop: threading.Event, dc1: ServerInfo, dc2: ServerInfo
) -> None:
    """Start the nodes, create SCHEMA's tables on dc1 and wait for them on dc2."""
    drop_everywhere(SCHEMA, dc1, dc2)  # a rerun's leftovers, before capture starts
    for node in nodes.values():
        node.start(stop)
    conn = connect(dc1)
    with conn.cursor() as cur:
        for statement in (
            f"CREATE DATABASE {SCHEMA}",
            f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
            f"CREATE TABLE {SCHEMA}.log (id INT PRIMARY KEY, note VARCHAR(40))",
        ):
            cur.execute(statement)
    conn.close()
    assert wait_for(lambda: _has_tables(dc2), 30), "schema did not reach dc2"


def _markers(node: Node) -> int:
    assert node.service is not None
    return node.service.replicator.stats.drc_applied_markers


def _has_tables(server: ServerInfo) -> bool:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s", (SCHEMA,)
        )
        (count,) = cur.fetchone()
    conn.close()
    return bool(count == 2)
