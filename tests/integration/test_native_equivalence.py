"""The compiled hot path (drc.native) captures exactly what the pure one does, from a real
binlog: the decoding workload (tests/support/decoding_workload: every MariaDB type with edge
values, latin1, an ALTER mid-range, MINIMAL images) and the shared corpus (Debezium's scripts:
every type, odd identifiers, keyless tables, zero dates, DDL) written on dc1, then captured
from the same range by two processes, DRC_COMPILED=on and off: the record bytes and the
transactions they decode to must be the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pymysql

from drc import native
from drc.sandbox.sandbox import ServerInfo
from tests.support.corpus import FIXED_DATABASES, corpus_files, database_of, drop_databases, load
from tests.support.decoding_workload import SCHEMA, WORKLOAD
from tests.support.servers import connect, master_position
from tests.support.tools import require_compiled_build

REPO = Path(__file__).resolve().parents[2]
PREFIX = "nat_"  # not test_corpus's: its databases are its own


def capture(server: ServerInfo, start: tuple[str, int], setting: str) -> dict[str, object]:
    spec = {
        "host": server.host, "port": server.port, "user": server.user,
        "password": server.password, "file": start[0], "pos": start[1], "server_id": 99104,
    }  # fmt: skip
    env = {**os.environ, native.SETTING: setting, "PYTHONHASHSEED": "0",
           "DRC_NATIVE_CAPTURE": json.dumps(spec)}  # fmt: skip
    argv = [sys.executable, "-m", "tests.support.native_capture"]
    out = subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compiled_and_pure_capture_the_same_records(dc1: ServerInfo) -> None:
    require_compiled_build()
    databases = [database_of(path, PREFIX) for path in corpus_files()] + list(FIXED_DATABASES)
    drop_databases([dc1], databases)
    start = master_position(dc1)
    conn = connect(dc1)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")
            for sql in SCHEMA + WORKLOAD:
                cur.execute(sql)
    finally:
        conn.close()
    failed = []
    for path in corpus_files():
        try:
            load(dc1, path, PREFIX)
        except pymysql.MySQLError as exc:
            failed.append(f"{path.name}: {exc}")
    try:
        assert not failed, f"the corpus did not load: {failed}"
        compiled, pure = capture(dc1, start, "on"), capture(dc1, start, "off")
    finally:
        drop_databases([dc1], databases)
    assert compiled["compiled"] is True and pure["compiled"] is False
    assert pure["error"] is None and int(str(pure["rows"])) > 2500, pure
    assert compiled == {**pure, "compiled": True}
