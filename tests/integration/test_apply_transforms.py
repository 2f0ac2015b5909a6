"""Transformation hooks on a real channel (drc.apply.transforms): what the hook returns is what
dc2 gets, and a hook that fails stops the channel at that transaction, the ones before it
applied."""

from __future__ import annotations

from pathlib import Path

from drc.apply.service import build_channel
from drc.apply.transforms import TransformError
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.servers import drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end, wait_for

SCHEMA = "apply_hooks"
HOOKS = "tests.integration.transforms"


def _tables(dc1: ServerInfo, dc2: ServerInfo) -> tuple[str, int]:
    drop_everywhere(SCHEMA, dc1, dc2)
    start = position(dc1)
    execute(
        dc1,
        f"CREATE DATABASE {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40))",
        f"CREATE TABLE {SCHEMA}.audit (id INT PRIMARY KEY, note VARCHAR(20))",
    )
    return start


def test_what_the_hook_returns_is_what_is_applied(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    start = _tables(dc1, dc2)
    execute(
        dc1,
        f"INSERT INTO {SCHEMA}.t VALUES (1, 'one'), (2, 'secret two'), (3, 'three')",
        f"UPDATE {SCHEMA}.t SET v = 'uno' WHERE id = 1",
        f"DELETE FROM {SCHEMA}.t WHERE id = 3",
    )
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        config = channel_config(
            "hooks", url, [f"{SCHEMA}.*"], transforms={f"{SCHEMA}.t": f"{HOOKS}:shout_and_audit"}
        )
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
        assert running.error is None
    assert query(dc2, f"SELECT id, v FROM {SCHEMA}.t ORDER BY id") == [(1, "UNO")]
    assert query(dc2, f"SELECT id, note FROM {SCHEMA}.audit ORDER BY id") == [
        (1, "seen"),
        (3, "seen"),
    ]


def test_a_failing_hook_stops_the_channel_at_its_transaction(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    start = _tables(dc1, dc2)
    for n, v in ((1, "fine"), (2, "boom"), (3, "after")):
        execute(dc1, f"INSERT INTO {SCHEMA}.t VALUES ({n}, '{v}')")
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        config = channel_config(
            "hooks2", url, [f"{SCHEMA}.*"], transforms={f"{SCHEMA}.t": f"{HOOKS}:broken"}
        )
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_for(lambda: running.error is not None, "the hook to stop the channel")
    error = running.error
    assert isinstance(error, TransformError), error
    assert f"transform {HOOKS}:broken failed on {SCHEMA}.t" in str(error)
    assert "ValueError: cannot handle boom" in str(error)
    assert error.stoppage is not None and "boom" in str(error.stoppage.keys)  # type: ignore[attr-defined]
    # What came before the failing transaction is applied; nothing at or after it.
    assert query(dc2, f"SELECT id, v FROM {SCHEMA}.t ORDER BY id") == [(1, "fine")]
