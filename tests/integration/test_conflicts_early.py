"""lww protection from a table's first write, on the datacenter that creates it (issue 11.4).

Two DRC nodes (``drc run --role all``) with lww on ``early_a.*`` and ``early_b.*``. dc1 applies
as a user that may create triggers on ``early_a`` only, so on dc1:

- ``early_a.t`` gets DRC's triggers from its local lww guard as soon as dc1's replicator
  captures the CREATE TABLE (periodic maintenance is switched off here, and no change comes in
  from dc2 before the check, so nothing else could make them);
- ``early_b.t`` never gets them (the window left open for good): it is named in /v1/status
  and /metrics, and dc1's deletes on it get tombstones derived from the captured delete.

Then, on each, dc1 deletes rows while dc2 updates the same rows before it sees the deletes
(locks keep the order, as in test_conflicts), one update older than the delete, one newer.
Both sides end equal and the winning deletes are tombstoned on both, with the same time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from drc.conflicts import target as conflict_target
from drc.conflicts import tombstones
from drc.node import Node
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.config import conflict_rule, conflicts_toml
from tests.support.servers import connect, execute, query

CONFLICTS = conflicts_toml(conflict_rule("early_*.*", "lww", column="ts"))
TABLE = (
    "CREATE TABLE {db}.t (id INT PRIMARY KEY, v VARCHAR(20) NOT NULL, ts DATETIME(6) NOT NULL "
    "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6))"
)
OLD = "2001-01-01 00:00:00"  # the rows' time: long before the deletes
LATER = "2002-02-02 00:00:00"  # dc2's losing update: after the row, before the delete
FUTURE = "2099-01-01 00:00:00"  # dc2's winning update: after the delete
USER, PASSWORD = "drc_early", "early-secret"


@pytest.fixture(scope="module")
def nodes(
    sandbox: SandboxDescription,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Node]]:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    for server in (dc1, dc2):
        execute(
            server,
            "DROP DATABASE IF EXISTS early_a", "DROP DATABASE IF EXISTS early_b",
            "CREATE DATABASE early_a", "CREATE DATABASE early_b",
        )  # fmt: skip
        if query(
            server, "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'drc' AND "
            "TABLE_NAME = 'checkpoint'"
        ):  # fmt: skip
            # other modules' channels of these names read other buffers: start afresh
            execute(server, "DELETE FROM drc.checkpoint WHERE channel IN ('from-dc1', "
                    "'from-dc2', 'lww-guard')")  # fmt: skip
    _limited_user(dc1)
    configs = write_configs(sandbox, tmp_path_factory.mktemp("early"), "early_*", CONFLICTS)
    with configs["dc1"].open("a") as toml:
        toml.write(f'\n[target]\nhost = "{dc1.host}"\nport = {dc1.port}\nuser = "{USER}"\n'
                   f'password = "{PASSWORD}"\n')  # fmt: skip
    monkey = pytest.MonkeyPatch()
    monkey.setattr(conflict_target, "MAINTAIN_EVERY_S", 3600.0)  # only the start-up pass
    request.addfinalizer(monkey.undo)
    with running_nodes(configs) as started:
        assert wait_for(lambda: all(_settled(node) for node in started.values()), 60)
        yield started


def _settled(node: Node) -> bool:
    """Every channel past its start and its first maintenance pass (the only one here): a
    table created from now on is found by nothing but a capture or an inbound change."""
    appliers = [c for c in (*node.channels, node.guard) if c is not None]
    return all(
        c.stats.last_scn is not None and not c.conflicts.due(time.monotonic())  # type: ignore[union-attr]
        for c in appliers
    )


def _limited_user(server: ServerInfo) -> None:
    """An apply user allowed to create triggers on early_a only (kept out of the binlog)."""
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP USER IF EXISTS '{USER}'@'%'")
        cur.execute(f"CREATE USER '{USER}'@'%%' IDENTIFIED BY %s", (PASSWORD,))
        for grant in (
            "SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX ON *.*",
            "ALL PRIVILEGES ON `drc`.*",
            "TRIGGER ON `early_a`.*",
        ):
            cur.execute(f"GRANT {grant} TO '{USER}'@'%'")
    conn.close()


def _triggers(server: ServerInfo, db: str) -> int:
    found = query(server, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE "
                  "EVENT_OBJECT_SCHEMA = %s AND EVENT_OBJECT_TABLE = 't'", (db,))  # fmt: skip
    return int(found[0][0])


def _rows(server: ServerInfo, db: str) -> list[tuple[Any, ...]]:
    return query(server, f"SELECT id, v, ts FROM {db}.t ORDER BY id")


def _tombs(server: ServerInfo, db: str) -> dict[int, Any]:
    companion = tombstones.name(db, "t")
    rows = query(server, f"SELECT id, `drc$deleted_at` FROM drc.`{companion}`")
    return {r[0]: r[1] for r in rows}


def _exists(server: ServerInfo, db: str) -> bool:
    found = query(server, "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                  "TABLE_SCHEMA = %s AND TABLE_NAME = 't'", (db,))  # fmt: skip
    return bool(found[0][0])


def _create_and_fill(dc1: ServerInfo, dc2: ServerInfo, db: str) -> None:
    """dc1 creates the table, writes its first rows and deletes one, in one round trip: the
    delete runs before any DRC component could have seen the table."""
    conn = connect(dc1, client_flag=1 << 16)  # CLIENT.MULTI_STATEMENTS
    values = ", ".join(f"({i}, '{v}', '{OLD}')" for i, v in enumerate("abcde", start=1))
    with conn.cursor() as cur:
        cur.execute(
            f"{TABLE.format(db=db)}; INSERT INTO {db}.t (id, v, ts) VALUES {values}; "
            f"DELETE FROM {db}.t WHERE id = 5"
        )
        while cur.nextset():
            pass
    conn.close()
    assert wait_for(lambda: _exists(dc2, db) and len(_rows(dc2, db)) == 4, 60)


def _clash(dc1: ServerInfo, dc2: ServerInfo, db: str) -> None:
    """dc1 deletes 1, 2, 3 while dc2 (before it sees the deletes) updates 1 to a time before
    them and 2 to a time after them."""
    held = connect(dc2, autocommit=False)
    with held.cursor() as cur:
        cur.execute(f"SELECT * FROM {db}.t WHERE id IN (1, 2, 3) FOR UPDATE")
        execute(dc1, f"DELETE FROM {db}.t WHERE id IN (1, 2, 3)")
        cur.execute(f"UPDATE {db}.t SET v = 'older', ts = '{LATER}' WHERE id = 1")
        cur.execute(f"UPDATE {db}.t SET v = 'newer', ts = '{FUTURE}' WHERE id = 2")
    held.commit()
    held.close()


def _outcome(dc1: ServerInfo, dc2: ServerInfo, db: str) -> None:
    """Both sides hold rows 2 (dc2's newer update) and 4; the deletes of 1, 3 (and 5, made in
    the table's first milliseconds) are tombstoned on both with the same time."""

    def done(server: ServerInfo) -> bool:
        rows = [(r[0], r[1]) for r in _rows(server, db)]
        return rows == [(2, "newer"), (4, "d")] and _tombs(server, db).keys() >= {1, 3, 5}

    settled = wait_for(lambda: done(dc1) and done(dc2), 60)
    assert settled, (db, _rows(dc1, db), _rows(dc2, db), _tombs(dc1, db), _tombs(dc2, db))
    assert _rows(dc1, db) == _rows(dc2, db)
    one, two = _tombs(dc1, db), _tombs(dc2, db)
    assert {k: one[k] for k in (1, 3, 5)} == {k: two[k] for k in (1, 3, 5)}, (one, two)


def test_a_table_created_here_gets_its_triggers_when_its_ddl_is_captured(
    nodes: dict[str, Node], sandbox: SandboxDescription
) -> None:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    _create_and_fill(dc1, dc2, "early_a")
    # Nothing came in from dc2 and maintenance is off: only the guard can have made them.
    assert wait_for(lambda: _triggers(dc1, "early_a") == 3, 60)
    _clash(dc1, dc2, "early_a")
    _outcome(dc1, dc2, "early_a")
    assert all(u["table"] != "early_a.t" for u in nodes["dc1"].protection()["unprotected"])


def test_a_table_refused_its_triggers_is_reported_and_its_deletes_still_tombstoned(
    nodes: dict[str, Node], sandbox: SandboxDescription
) -> None:
    dc1, dc2 = sandbox.server("dc1"), sandbox.server("dc2")
    _create_and_fill(dc1, dc2, "early_b")
    url = nodes["dc1"].api_url
    assert url is not None

    def reported() -> bool:
        status = httpx.get(f"{url}/v1/status").json()
        return any(u["table"] == "early_b.t" for u in status["lww"]["unprotected"])

    assert wait_for(reported, 60)
    metrics = httpx.get(f"{url}/metrics").text
    assert 'drc_lww_unprotected{table="early_b.t"} 1' in metrics
    assert _triggers(dc1, "early_b") == 0
    derived = nodes["dc1"].guard.derived  # type: ignore[union-attr]
    _clash(dc1, dc2, "early_b")
    _outcome(dc1, dc2, "early_b")
    assert nodes["dc1"].guard.derived >= derived + 3  # type: ignore[union-attr]
    assert all(c.stats.last_error is None for c in nodes["dc1"].channels)
