"""Account statements never reach the buffer, the pull API or a log: they carry passwords.

`USE shop; CREATE USER .. IDENTIFIED BY '...'` is written to the binlog with the password in
clear and with the session's default database, which the capture filter matches. The replicator
drops every account and privilege statement and counts it, however it is spelled: comments
between the keywords, executable comments, odd case and spacing, a SET STATEMENT prefix, or a
quote the session's sql_mode reads its own way. Every spelling here is one MariaDB runs (the
test checks that each set the account's password).
"""

from __future__ import annotations

import json
import logging
import urllib.request
from pathlib import Path
from typing import Any

import pymysql
import pytest

from drc.apply.service import build_channel
from drc.core.sqltokens import tokens
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.servers import connect, drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end

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


SPELL_SCHEMA = "secrets_spelled"
# (statement, whether the account must exist first, session sql_mode); {u} user, {p} password
SPELLINGS: list[tuple[str, bool, str | None]] = [
    # The two, then the forms that were already dropped.
    ("CREATE /* c */ USER '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("/*! CREATE USER '{u}'@'%' IDENTIFIED BY '{p}' */", False, None),
    ("CREATE USER '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("CREATE OR REPLACE USER '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("CREATE USER IF NOT EXISTS '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("ALTER USER '{u}'@'%' IDENTIFIED BY '{p}'", True, None),
    (f"GRANT SELECT ON {SPELL_SCHEMA}.* TO '{{u}}'@'%' IDENTIFIED BY '{{p}}'", False, None),
    ("SET PASSWORD FOR '{u}'@'%' = PASSWORD('{p}')", True, None),
    ("CREATE USER '{u}'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{p}')",
     False, None),
    ("ALTER USER '{u}'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('{p}') "
     "OR unix_socket", True, None),
    ("SET STATEMENT max_statement_time=10 FOR CREATE USER '{u}'@'%' IDENTIFIED BY '{p}'",
     False, None),
    ("SET STATEMENT max_statement_time=10 FOR SET PASSWORD FOR '{u}'@'%' = PASSWORD('{p}')",
     True, None),
    (f"SET STATEMENT max_statement_time=10 FOR GRANT SELECT ON {SPELL_SCHEMA}.* TO '{{u}}'@'%' "
     "IDENTIFIED BY '{p}'", False, None),
    ("set statement max_statement_time=10 for set statement lock_wait_timeout=10 for "
     "create user '{u}'@'%' identified by '{p}'", False, None),
    ("create\n\tuser\n'{u}'@'%'\nidentified\nby\n'{p}'", False, None),
    ("CrEaTe UsEr '{u}'@'%' IdEnTiFiEd By '{p}'", False, None),
    # Executable comments, with and without a version.
    ("/*!50600 CREATE USER '{u}'@'%' IDENTIFIED BY '{p}' */", False, None),
    ("/*!100100 CREATE USER '{u}'@'%' IDENTIFIED BY '{p}' */", False, None),
    ("/*M! CREATE USER '{u}'@'%' IDENTIFIED BY '{p}' */", False, None),
    ("/*M!100100 CREATE USER '{u}'@'%' IDENTIFIED BY '{p}' */", False, None),
    ("CREATE /*!USER*/ '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("CREATE /*!50600 OR REPLACE */ USER '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("CREATE /*!50600 /* inner */ USER */ '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("/*!*/CREATE USER '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("/*! CREATE /* c */ USER '{u}'@'%' IDENTIFIED BY '{p}' */", False, None),
    # Comments without spaces around them; -- then a control character starts one too.
    ("CREATE#c\nUSER '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("CREATE --\x01c\nUSER '{u}'@'%' IDENTIFIED BY '{p}'", False, None),
    ("ALTER/**/USER '{u}'@'%' IDENTIFIED BY '{p}'", True, None),
    ("SET/**/PASSWORD FOR '{u}'@'%' = PASSWORD('{p}')", True, None),
    ("SET STATEMENT/**/max_statement_time=10/**/FOR/**/CREATE USER '{u}'@'%' IDENTIFIED BY "
     "'{p}'", False, None),
    ("SET @drc_a = 1, PASSWORD FOR '{u}'@'%' = PASSWORD('{p}')", True, None),
    # A backslash read the other way hides the FOR from a reader that takes it as an escape.
    ("SET STATEMENT default_master_connection='\\', max_statement_time=10 FOR CREATE USER "
     "'{u}'@'%' IDENTIFIED BY '{p}' -- '", False, "NO_BACKSLASH_ESCAPES"),
    ('SET STATEMENT default_master_connection="\\", max_statement_time=10 FOR CREATE USER '
     "'{u}'@'%' IDENTIFIED BY '{p}' -- \"", False, "ANSI_QUOTES"),
    # Written to the binlog as the statement they run.
    ("BEGIN NOT ATOMIC CREATE USER '{u}'@'%' IDENTIFIED BY '{p}'; END", False, None),
    ("EXECUTE IMMEDIATE 'CREATE USER ''{u}''@''%'' IDENTIFIED BY ''{p}'''", False, None),
]  # fmt: skip
FUZZ_BASES = [
    "CREATE USER '{u}'@'%' IDENTIFIED BY '{p}'",
    f"GRANT SELECT ON {SPELL_SCHEMA}.* TO '{{u}}'@'%' IDENTIFIED BY '{{p}}'",
    "SET STATEMENT max_statement_time=10 FOR CREATE USER '{u}'@'%' IDENTIFIED VIA "
    "mysql_native_password USING PASSWORD('{p}')",
]
FUZZ_COMMENTS = ["/* x */", "-- x\n", "# x\n"]
FUZZ_WRAPPERS = ["/*!", "/*M!100100"]


def _cuts(sql: str) -> list[int]:
    """Token boundaries where MariaDB takes a comment: all but right after the @ of an account
    name (the server refuses anything between @ and the host)."""
    return [0] + [t.end for t in tokens(sql) if t.text != "@"]


def fuzzed() -> list[tuple[str, bool, str | None]]:
    """Each base with a comment at each boundary, and with each run of tokens wrapped in an
    executable comment."""
    spellings = []
    for base in FUZZ_BASES:
        cuts = _cuts(base)
        spellings += [(base[:b] + c + base[b:], False, None) for b in cuts for c in FUZZ_COMMENTS]
        spellings += [
            (f"{base[:a]}{w} {base[a:b]} */{base[b:]}", False, None)
            for i, a in enumerate(cuts) for b in cuts[i + 1 :] for w in FUZZ_WRAPPERS
        ]  # fmt: skip
    return spellings


def _run_spellings(server: ServerInfo, spellings: list[tuple[str, bool, str | None]]) -> list[str]:
    """Run each spelling on ``server`` for an account of its own; the passwords and their hashes
    (SET PASSWORD is written to the binlog with the hash)."""
    secrets = []
    conn = connect(server, database=SPELL_SCHEMA)  # the default database matches the capture
    with conn.cursor() as cur:
        for n, (template, existing, mode) in enumerate(spellings):
            user, password = f"drc_pw{n}", f"S3cretPW!{n:04d}q"
            if existing:
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute("CREATE USER %s@'%%' IDENTIFIED BY 'not-the-secret'", (user,))
                cur.execute("SET SESSION sql_log_bin = 1")
            if mode is not None:
                cur.execute("SET SESSION sql_mode = %s", (mode,))
            statement = template.replace("{u}", user).replace("{p}", password)
            try:
                cur.execute(statement)
            except pymysql.MySQLError as exc:
                raise AssertionError(f"the server refused {statement!r}: {exc}") from exc
            cur.execute("SET SESSION sql_mode = DEFAULT")
            cur.execute(
                "SELECT authentication_string, PASSWORD(%s) FROM mysql.user "
                "WHERE User = %s AND Host = '%%'", (password, user),
            )  # fmt: skip
            [(stored, wanted)] = cur.fetchall()
            assert stored == wanted, f"{statement!r} did not set the password"
            secrets += [password, wanted.lstrip("*")]
    conn.close()
    return secrets


def _drop_spelling_users(server: ServerInfo, count: int) -> None:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for n in range(count):
            cur.execute("DROP USER IF EXISTS %s@'%%'", (f"drc_pw{n}",))
    conn.close()


def _get(url: str, accept: str = "application/json") -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        body: bytes = response.read()
    return body


def _every_api_answer(url: str) -> dict[str, bytes]:
    """/v1/events (JSON and records), /v1/segments and each segment, /v1/history."""
    events = f"{url}/v1/events?after=0:0:0:0&wait_ms=-1"
    answers = {
        "events json": _get(events),
        "events records": _get(events, "application/x-drc-records"),
        "segments": _get(f"{url}/v1/segments"),
    }
    listing: dict[str, Any] = json.loads(answers["segments"])
    for segment in listing["segments"]:
        name = segment["name"]
        answers[name] = _get(f"{url}/v1/segments/{name}", "application/x-drc-segment")
    answers["history"] = _get(f"{url}/v1/history?after=0:0:0:0&upto={listing['last_scn']}")
    return answers


def _files(directory: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


def test_no_spelling_of_an_account_statement_is_stored_served_applied_or_logged(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    spellings = SPELLINGS + fuzzed()
    drop_everywhere(SPELL_SCHEMA, dc1, dc2)
    _drop_spelling_users(dc1, len(spellings))
    start = position(dc1)
    execute(dc1, f"CREATE DATABASE {SPELL_SCHEMA}", f"CREATE TABLE {SPELL_SCHEMA}.t (id INT KEY)")
    try:
        secrets = _run_spellings(dc1, spellings)
    finally:
        _drop_spelling_users(dc1, len(spellings))
    execute(dc1, f"INSERT INTO {SPELL_SCHEMA}.t VALUES (1)")
    token = mark_end(dc1, SPELL_SCHEMA)
    end = position(dc1)

    buffer_dir = tmp_path / "buf"
    with serving(dc1, buffer_dir, [f"{SPELL_SCHEMA}.*"], start) as (capture, url):
        capture.wait_for(end)
        config = channel_config("secrets", url, [f"{SPELL_SCHEMA}.*"])
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, SPELL_SCHEMA, token, running)
        seen = _every_api_answer(url) | _files(buffer_dir)  # the metastore's -wal is there now
        dropped = capture.replicator.stats.account_statements_dropped
    seen |= {f"{name} (closed)": body for name, body in _files(buffer_dir).items()}

    assert b'"id":1' in seen["events json"].replace(b" ", b"")  # the stream itself was served
    assert any(name.endswith("-wal") for name in seen)
    leaks = [(s, name) for s in secrets for name, body in seen.items() if s.encode() in body]
    assert not leaks
    assert not [s for s in secrets if s in caplog.text]  # capture, API and apply logs
    assert dropped == len(spellings)
    assert query(dc2, "SELECT COUNT(*) FROM mysql.user WHERE User LIKE 'drc\\_pw%'") == [(0,)]
    assert query(dc2, f"SELECT id FROM {SPELL_SCHEMA}.t") == [(1,)]
