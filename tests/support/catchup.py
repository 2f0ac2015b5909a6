"""The catch-up tests' set-up: dc1's schema captured and served in small segments, a workload with
hot rows, a keyless table and DDL, and the config of a `drc catchup` into dc2."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import apply_process_config, apply_user, serving
from tests.support.capture import Capture
from tests.support.servers import connect, drop_everywhere, execute, master_position, query

SCHEMA = "catchup_eq"
TABLES = (
    f"CREATE TABLE {SCHEMA}.acct (id INT PRIMARY KEY, owner VARCHAR(40), bal DECIMAL(12,2))",
    f"CREATE TABLE {SCHEMA}.hot (id INT PRIMARY KEY, n INT NOT NULL, note VARCHAR(40))",
    f"CREATE TABLE {SCHEMA}.events (kind VARCHAR(10), v INT)",  # keyless
)


@contextmanager
def served(
    server: ServerInfo, tmp: Path, schema: str, **buffer: Any
) -> Iterator[tuple[Capture, str]]:
    """Capture ``server``'s ``schema`` from now into small segments and serve them."""
    buffer = {"segment_bytes": 16384, **buffer}
    with serving(server, tmp / "buf", [f"{schema}.*"], master_position(server), buffer) as found:
        yield found


def config_for(
    tmp: Path, target: ServerInfo, url: str, name: str, schema: str, **options: Any
) -> Path:
    """``options``: more channel keys (e.g. ``catchup_backlog_mb``)."""
    return apply_process_config(
        tmp, target, url, name, [f"{schema}.*"], no_primary_key="match_whole_row",
        max_commit_delay_ms=20, **options,
    )  # fmt: skip


def workload(server: ServerInfo, schema: str, seed: int, txns: int, ddl_at: int | None) -> None:
    """Inserts, hot-row updates, deletes, multi-statement transactions, a keyless table, and
    (at ``ddl_at``) an ALTER TABLE in the middle."""
    rng = random.Random(seed)
    conn = connect(server, autocommit=False)
    ids: list[int] = []
    next_id, altered = seed * 100_000, False
    with conn.cursor() as cur:
        cur.execute(f"INSERT IGNORE INTO {schema}.hot VALUES (1, 0, 'a'), (2, 0, 'b'), (3, 0, 'c')")
        for n in range(txns):
            if n == ddl_at:
                cur.execute(f"ALTER TABLE {schema}.acct ADD COLUMN tier INT NOT NULL DEFAULT 1")
                altered = True
            roll = rng.random()
            if roll < 0.3 or len(ids) < 5:
                rows = [(next_id + k, f"o{rng.randint(0, 99)}", rng.randint(0, 10**6) / 100)
                        for k in range(rng.randint(1, 3))]  # fmt: skip
                cur.executemany(f"INSERT INTO {schema}.acct (id, owner, bal) VALUES (%s, %s, %s)",
                                rows)  # fmt: skip
                ids += [r[0] for r in rows]
                next_id += len(rows)
            elif roll < 0.6:
                cur.execute(f"UPDATE {schema}.hot SET n = n + 1, note = %s WHERE id = %s",
                            (f"n{n}", rng.randint(1, 3)))  # fmt: skip
            elif roll < 0.7:
                cur.execute(f"DELETE FROM {schema}.acct WHERE id = %s",
                            (ids.pop(rng.randrange(len(ids))),))  # fmt: skip
            elif roll < 0.85:
                value = rng.randint(1, 4)
                cur.execute(f"INSERT INTO {schema}.events VALUES ('k', %s), ('k', %s)",
                            (value, value))  # fmt: skip
                if rng.random() < 0.3:
                    cur.execute(f"DELETE FROM {schema}.events WHERE v = %s LIMIT 1", (value,))
            else:  # several statements and tables in one transaction, a key moved
                victim = rng.choice(ids)
                cur.execute(f"UPDATE {schema}.acct SET bal = bal + 1 WHERE id = %s", (victim,))
                cur.execute(f"UPDATE {schema}.hot SET n = n + 10 WHERE id = 1")
                cur.execute(f"UPDATE {schema}.acct SET id = %s WHERE id = %s", (next_id, victim))
                ids[ids.index(victim)] = next_id
                next_id += 1
                if altered:
                    cur.execute(f"UPDATE {schema}.acct SET tier = tier + 1 WHERE id = %s",
                                (next_id - 1,))  # fmt: skip
            conn.commit()
    conn.close()


def checkpoint_of(server: ServerInfo, name: str) -> str:
    try:
        rows = query(server, "SELECT scn FROM drc.checkpoint WHERE channel = %s", (name,))
    except Exception:  # not created yet
        return ""
    return str(rows[0][0]) if rows else ""


def prepare(dc1: ServerInfo, dc2: ServerInfo, schema: str) -> None:
    drop_everywhere(schema, dc1, dc2)
    apply_user(dc2)
    execute(dc2, "CREATE DATABASE IF NOT EXISTS drc")
    for table in ("checkpoint", "catchup_run", "catchup_done", "catchup_lease"):
        execute(dc2, f"DROP TABLE IF EXISTS drc.{table}")
