"""Two DRC nodes in this process (dc1 and dc2 of the sandbox: replicator + pull API + the
channel from the other side), each channel reading the other's API through a
:class:`~tests.support.faults.FaultyLink`; small transactions written on both sides at once on
disjoint rows; and the checks after a fault: both sides equal row for row, every transaction
applied exactly once (no idempotent fix counted), none echoed back.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from drc.config import load_config
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.faults import FaultyLink
from tests.support.ledger import stored_changes
from tests.support.servers import connect, drop_everywhere, execute, query

SCHEMA = "links_db"
WRITE_PAUSE_S = 0.02  # between a writer's transactions: a steady trickle, not a flood
_REMOTE = re.compile(r'remote = \["http://127\.0\.0\.1:(\d+)"\]')


@dataclass
class Writer:
    """Small transactions on ``server`` (ids of one parity) until ``stop``: inserts, updates,
    deletes, and two-statement transactions; ``transactions`` counts the committed ones."""

    server: ServerInfo
    parity: int
    stop: threading.Event = field(default_factory=threading.Event)
    transactions: int = 0
    error: BaseException | None = None
    # With ``tolerant``, a transaction the server refuses or loses (read-only, full, down,
    # restarted) is given up and the writer connects again, as an application would; whether
    # a lost COMMIT committed is unknown, so ids only move on. ``refused`` counts them.
    tolerant: bool = False
    refused: int = 0

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # the test reports it
            self.error = exc

    def _write(self) -> None:
        rng = random.Random(self.parity)
        ids: list[int] = []
        next_id = self.parity
        conn = self._connect()
        while not self.stop.is_set():
            roll = rng.random()
            inserting = roll < 0.45 or len(ids) < 5
            try:
                with conn.cursor() as cur:
                    inserted = _one_transaction(cur, rng, roll, ids, next_id, self.server)
                conn.commit()
            except (pymysql.MySQLError, OSError) as exc:
                if not self.tolerant:
                    raise
                self.refused += 1
                conn = self._reconnect(conn, exc)
                inserted = None
            else:
                self.transactions += 1
            if inserted is not None:
                ids.append(inserted)
            if inserting:
                next_id += 2
            time.sleep(WRITE_PAUSE_S)
        conn.close()

    def _connect(self) -> pymysql.connections.Connection:
        return connect(self.server, autocommit=False, database=SCHEMA)

    def _reconnect(
        self, conn: pymysql.connections.Connection, exc: BaseException
    ) -> pymysql.connections.Connection:
        del exc  # any refusal: roll back what is open, or connect again once the server is back
        try:
            conn.rollback()
            return conn
        except (pymysql.MySQLError, OSError):
            pass  # the connection is gone with the server
        while not self.stop.is_set():
            try:
                return self._connect()
            except (pymysql.MySQLError, OSError):
                time.sleep(0.2)
        return conn


def _one_transaction(
    cur: Any, rng: random.Random, roll: float, ids: list[int], next_id: int, server: ServerInfo
) -> int | None:
    """One of the writer's transactions (not committed); the id it inserted, if any."""
    if roll < 0.45 or len(ids) < 5:
        cur.execute(
            "INSERT INTO t (id, v, n) VALUES (%s, %s, 0)",
            (next_id, f"{server.datacenter}-{next_id}"),
        )
        return next_id
    if roll < 0.75:
        cur.execute("UPDATE t SET n = n + 1 WHERE id = %s", (rng.choice(ids),))
    elif roll < 0.9:
        cur.execute("DELETE FROM t WHERE id = %s", (ids.pop(rng.randrange(len(ids))),))
    else:
        key = rng.choice(ids)
        cur.execute("UPDATE t SET v = %s WHERE id = %s", (f"multi {next_id}", key))
        cur.execute("UPDATE t SET n = n + 10 WHERE id = %s", (key,))
    return None


@dataclass
class Pair:
    """The running pair: ``links[dc]`` is what dc's channel reads the other side through."""

    nodes: dict[str, Node]
    links: dict[str, FaultyLink]
    servers: dict[str, ServerInfo]
    writers: dict[str, Writer] = field(default_factory=dict)

    def each_link(self) -> list[FaultyLink]:
        return list(self.links.values())

    def write(self, tolerant: bool = False) -> None:
        """Start both writers and wait until each side holds a row the other wrote
        (``tolerant``: writers that outlive refused writes, Writer.tolerant)."""
        self.writers = {
            dc: Writer(s, 1 if dc == "dc1" else 2, tolerant=tolerant)
            for dc, s in self.servers.items()
        }
        for writer in self.writers.values():
            writer.thread.start()

        def flowing() -> bool:
            ids = {dc: [r[0] for r in _rows(s)] for dc, s in self.servers.items()}
            return any(i % 2 == 0 for i in ids["dc1"]) and any(i % 2 for i in ids["dc2"])

        assert wait_for(flowing, 60, interval=0.2), "replication did not start both ways"

    def stop_writing(self) -> None:
        for writer in self.writers.values():
            writer.stop.set()
            writer.thread.join(30)
            assert writer.error is None, writer.error

    def wait_converged(self, timeout: float = 180.0) -> None:
        """Until both sides hold the same rows (and the same CHECKSUM TABLE)."""
        dc1, dc2 = self.servers["dc1"], self.servers["dc2"]

        def same() -> bool:
            self.assert_channels_up()
            return _rows(dc1) == _rows(dc2) and _checksum(dc1) == _checksum(dc2)

        assert wait_for(same, timeout, interval=0.25), (len(_rows(dc1)), len(_rows(dc2)))

    def assert_channels_up(self) -> None:
        for dc, node in self.nodes.items():
            failures = node.failures()
            assert not failures, f"{dc}: {failures}"

    def assert_exactly_once(self) -> None:
        """What each side's clients changed is what the other side's channel applied, change
        for change, counted in each side's own capture; nothing applied came back as a side's
        own; and no channel fixed a row idempotently (which would hide a duplicate)."""
        time.sleep(1.0)  # each replicator captures what its channel applied last
        captured = {dc: stored_changes(node, SCHEMA) for dc, node in self.nodes.items()}
        assert captured["dc1"][True] == captured["dc2"][False], captured
        assert captured["dc2"][True] == captured["dc1"][False], captured
        for dc, node in self.nodes.items():
            stats = node.channels[0].stats
            assert stats.duplicate_inserts == stats.missing_updates == 0, (dc, stats)
            assert stats.missing_deletes == 0, (dc, stats)
        for writer in self.writers.values():
            assert writer.transactions > 0


@contextmanager
def linked_pair(
    sandbox: SandboxDescription,
    tmp: Path,
    transport: str = "stream",
    extra: dict[str, str] | None = None,
) -> Iterator[Pair]:
    """Both nodes started on a fresh ``SCHEMA``.t, each channel behind its link (reading
    through ``transport``; ``extra[dc]``: TOML appended to dc's config); stopped (and the
    links closed) when the block ends."""
    servers = {dc: sandbox.server(dc) for dc in ("dc1", "dc2")}
    drop_everywhere(SCHEMA, *servers.values())
    configs = write_configs(sandbox, tmp, schema=SCHEMA, transport=transport)
    links: dict[str, FaultyLink] = {}
    for dc, path in configs.items():
        text = path.read_text()
        found = _REMOTE.search(text)
        assert found is not None, text
        links[dc] = FaultyLink("127.0.0.1", int(found.group(1)))
        text = _REMOTE.sub(f'remote = ["{links[dc].url}"]', text)
        path.write_text(text + (extra or {}).get(dc, ""))
    stop = threading.Event()
    nodes = {dc: Node(load_config(path)) for dc, path in configs.items()}
    pair = Pair(nodes, links, servers)
    try:
        for node in nodes.values():
            node.start(stop)
        execute(
            servers["dc1"],
            f"CREATE DATABASE {SCHEMA}",
            f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
        )
        assert wait_for(lambda: _has_table(servers["dc2"]), 30), "schema did not reach dc2"
        yield pair
    finally:
        for writer in pair.writers.values():
            writer.stop.set()
        stop.set()
        for node in nodes.values():
            node.close()
        for link in links.values():
            link.close()


def noticed(link: FaultyLink, since: float, connections: int = 1, timeout: float = 30.0) -> float:
    """Seconds after ``since`` until the reader behind ``link`` opened ``connections`` new
    connections (gave up a silent one and connected again); fails after ``timeout``."""
    assert wait_for(lambda: link.connections_since(since) >= connections, timeout, interval=0.05)
    opened = sorted(at for at in link.opened if at > since)
    return opened[connections - 1] - since


def _has_table(server: ServerInfo) -> bool:
    found = query(
        server,
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 't'",
        (SCHEMA,),
    )
    return bool(found)


def _rows(server: ServerInfo) -> list[tuple[Any, ...]]:
    return list(query(server, f"SELECT id, v, n FROM {SCHEMA}.t ORDER BY id"))


def _checksum(server: ServerInfo) -> int:
    return int(query(server, f"CHECKSUM TABLE {SCHEMA}.t")[0][1])
