"""Account statements never reach the buffer, the pull API or a log: they carry passwords.

`USE shop; CREATE USER .. IDENTIFIED BY '...'` is written to the binlog with the password in
clear and with the session's default database, which the capture filter matches. The replicator
drops every account and privilege statement and counts it.
"""

from __future__ import annotations

import logging
import urllib.request
from pathlib import Path

import pytest

from drc.sandbox.sandbox import ServerInfo
from tests.integration.servers import connect
from tests.integration.test_apply_support import drop_everywhere, execute, position, serving

SCHEMA = "secrets_db"
SECRET = "secret-xyz-7731"
ACCOUNT_STATEMENTS = [
    f"CREATE USER 'drc_bob'@'localhost' IDENTIFIED BY '{SECRET}'",
    f"ALTER USER 'drc_bob'@'localhost' IDENTIFIED BY '{SECRET}2'",
    f"SET PASSWORD FOR 'drc_bob'@'localhost' = PASSWORD('{SECRET}3')",
    f"GRANT SELECT ON {SCHEMA}.* TO 'drc_bob'@'localhost'",
    f"REVOKE SELECT ON {SCHEMA}.* FROM 'drc_bob'@'localhost'",
    "DROP USER 'drc_bob'@'localhost'",
]


def test_account_statements_are_dropped_and_counted_never_stored_served_or_logged(
    dc1: ServerInfo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    drop_everywhere(SCHEMA, dc1)
    execute(dc1, "DROP USER IF EXISTS 'drc_bob'@'localhost'")
    start = position(dc1)
    execute(dc1, f"CREATE DATABASE {SCHEMA}", f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY)")
    conn = connect(dc1, database=SCHEMA)  # the default database matches the capture filter
    with conn.cursor() as cur:
        for statement in ACCOUNT_STATEMENTS:
            cur.execute(statement)
        cur.execute(f"INSERT INTO {SCHEMA}.t VALUES (1)")
    conn.close()
    end = position(dc1)

    buffer_dir = tmp_path / "buf"
    with serving(dc1, buffer_dir, [f"{SCHEMA}.*"], start) as (capture, url):
        capture.wait_for(end)
        served = b""
        for accept in ("application/json", "application/x-drc-records"):
            request = urllib.request.Request(
                f"{url}/v1/events?after=0:0:0:0&wait_ms=-1", headers={"Accept": accept}
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                served += response.read()
        dropped = capture.replicator.stats.account_statements_dropped

    assert b'"id":1' in served.replace(b" ", b"")  # the stream itself was served
    assert SECRET.encode() not in served
    for path in buffer_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert dropped == len(ACCOUNT_STATEMENTS)
    assert SECRET not in caplog.text
