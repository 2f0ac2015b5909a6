"""Waits of the integration tests: until a check holds (failing at once when the channel it waits
on stopped), and until the row that marks the end of a workload is seen on the target."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from drc.sandbox.sandbox import ServerInfo
from tests.support.servers import connect, execute, query

if TYPE_CHECKING:
    from tests.support.apply import Running


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0, *,
             running: Running | None = None) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running is not None and running.error is not None:
            raise AssertionError(f"channel stopped while waiting for {what}") from running.error
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def mark_end(server: ServerInfo, schema: str) -> str:
    """Write a unique row at the end of the workload; seen on the target = all applied."""
    token = uuid.uuid4().hex
    execute(server, f"CREATE TABLE IF NOT EXISTS `{schema}`.done (token CHAR(32) PRIMARY KEY)")
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `{schema}`.done VALUES (%s)", (token,))
    conn.close()
    return token


def wait_end(server: ServerInfo, schema: str, token: str, running: Running | None = None,
             timeout: float = 90.0) -> None:  # fmt: skip
    def seen() -> bool:
        try:
            return bool(query(server, f"SELECT 1 FROM `{schema}`.done WHERE token = %s", (token,)))
        except Exception:  # the table may not exist yet on the target
            return False

    wait_for(seen, f"{schema}.done {token} on {server.datacenter}", timeout, running=running)
