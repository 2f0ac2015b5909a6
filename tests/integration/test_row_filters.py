"""A channel with a row filter and an excluded column, dc1 -> dc2 on real servers; and
columns masked at capture on dc1.

dc2 holds exactly the filtered projection of dc1's table: the rows the predicate passes,
without the excluded column (dc2's table does not even have it). An update that moves a row
into the filter inserts it on dc2, one that moves it out deletes it there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drc.apply.service import build_channel
from drc.client import Subscriber
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.core.masking import Masker, hmac_hex
from drc.core.rowfilter import RowFilterColumnError
from drc.core.target_errors import MissingColumnError
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.servers import drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end, wait_for

SCHEMA = "rowfilter"
FILTER = "region IN ('eu', 'ch') AND (n IS NULL OR n < 100)"
PROJECTION = (
    f"SELECT id, region, n FROM {SCHEMA}.customers "
    "WHERE region IN ('eu', 'ch') AND (n IS NULL OR n < 100) ORDER BY id"
)


def test_dc2_holds_the_filtered_projection_of_dc1(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    drop_everywhere(SCHEMA, dc1, dc2)
    # Each side's table made by hand, outside the stream: dc2's has no email column.
    execute(
        dc1,
        f"CREATE DATABASE {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.customers (id INT PRIMARY KEY, region VARCHAR(8), "
        "email VARCHAR(64), n INT)",
        log_bin=False,
    )
    execute(
        dc2,
        f"CREATE DATABASE {SCHEMA}",
        f"CREATE TABLE {SCHEMA}.customers (id INT PRIMARY KEY, region VARCHAR(8), n INT)",
        log_bin=False,
    )
    start = position(dc1)
    execute(
        dc1,
        f"INSERT INTO {SCHEMA}.customers VALUES (1, 'eu', 'a@x', 1), (2, 'us', 'b@x', 2), "
        "(3, 'eu', 'c@x', NULL), (4, 'us', 'd@x', 4), (5, 'ch', 'e@x', 500), "
        "(6, NULL, 'f@x', 6), (7, 'eu', 'g@x', 7)",
        f"UPDATE {SCHEMA}.customers SET region = 'eu' WHERE id = 2",  # moves in: inserted
        f"UPDATE {SCHEMA}.customers SET region = 'us' WHERE id = 3",  # moves out: deleted
        f"UPDATE {SCHEMA}.customers SET n = 50 WHERE id = 5",  # moves in by n
        f"UPDATE {SCHEMA}.customers SET n = 11, email = 'new@x' WHERE id = 1",  # stays in
        f"UPDATE {SCHEMA}.customers SET email = 'z@x' WHERE id = 7",  # only the excluded column
        f"UPDATE {SCHEMA}.customers SET n = 40 WHERE id = 4",  # stays out
        f"DELETE FROM {SCHEMA}.customers WHERE id IN (4, 6)",  # deletes outside the filter
        f"UPDATE {SCHEMA}.customers SET region = 'eu' WHERE id = 6",  # no row: nothing
        f"UPDATE {SCHEMA}.customers SET id = 20 WHERE id = 2",  # key change inside
    )
    tables = [f"{SCHEMA}.*"]
    with serving(dc1, tmp_path / "buf", tables, start) as (_, url):
        config = channel_config(
            "rowfilter",
            url,
            tables,
            row_filters={f"{SCHEMA}.customers": FILTER},
            exclude_columns={f"{SCHEMA}.customers": ("email",)},
        )
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
            expected = [(1, "eu", 11), (5, "ch", 50), (7, "eu", 7), (20, "eu", 2)]
            assert query(dc1, PROJECTION) == expected
            assert query(dc2, f"SELECT id, region, n FROM {SCHEMA}.customers ORDER BY id") == (
                expected
            )

            # Moving rows out of and into the filter while the channel runs.
            execute(
                dc1,
                f"UPDATE {SCHEMA}.customers SET n = 1000 WHERE id = 7",  # out: deleted
                f"UPDATE {SCHEMA}.customers SET region = 'ch' WHERE id = 3",  # in: inserted
                f"UPDATE {SCHEMA}.customers SET region = 'ch' WHERE id = 1",  # stays in
            )
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
            moved = query(dc1, PROJECTION)
            assert moved == [(1, "ch", 11), (3, "ch", None), (5, "ch", 50), (20, "eu", 2)]
            assert query(dc2, f"SELECT id, region, n FROM {SCHEMA}.customers ORDER BY id") == (
                moved
            )


MASKED = "rowmask"
KEY = b"integration-test-hmac-key"


def test_masked_columns_never_leave_dc1(dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path) -> None:
    """With [replicator] mask_columns, what dc1 stores and serves holds only the masks: dc2
    receives the HMAC of the email and no phone, and dc1's buffer files hold neither."""
    drop_everywhere(MASKED, dc1, dc2)
    table = "(id INT PRIMARY KEY, name VARCHAR(20), email VARCHAR(64), phone VARCHAR(20))"
    for server in (dc1, dc2):
        execute(
            server,
            f"CREATE DATABASE {MASKED}",
            f"CREATE TABLE {MASKED}.people {table}",
            log_bin=False,
        )
    start = position(dc1)
    execute(
        dc1,
        f"INSERT INTO {MASKED}.people VALUES (1, 'ann', 'ann.private@example.org', '555-0101'), "
        "(2, 'bob', NULL, '555-0102')",
        f"UPDATE {MASKED}.people SET email = 'bob.private@example.org' WHERE id = 2",
        f"UPDATE {MASKED}.people SET name = 'anne' WHERE id = 1",
    )
    mask = Masker({f"{MASKED}.people": {"email": "hmac", "phone": "null"}}, KEY)
    tables = [f"{MASKED}.*"]
    with serving(dc1, tmp_path / "buf", tables, start, mask=mask) as (_, url):
        config = channel_config("rowmask", url, tables)
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_end(dc2, MASKED, mark_end(dc1, MASKED), running)
    rows = query(dc2, f"SELECT id, name, email, phone FROM {MASKED}.people ORDER BY id")
    assert rows == [
        (1, "anne", hmac_hex(KEY, "ann.private@example.org"), None),
        (2, "bob", hmac_hex(KEY, "bob.private@example.org"), None),
    ]
    stored = b"".join(p.read_bytes() for p in (tmp_path / "buf").rglob("*") if p.is_file())
    assert b"anne" in stored  # the buffer is readable as is: the check below can fail
    for secret in (b"ann.private", b"bob.private", b"555-010"):
        assert secret not in stored


EXCLUDED = "rowexcl"


def test_conflicts_are_detected_on_the_columns_that_remain(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """dc2 keeps its own emails (excluded on the channel): an update of a row that differs
    only there applies, one of a row dc2 changed in a kept column is a logged conflict."""
    drop_everywhere(EXCLUDED, dc1, dc2)
    for server, rows in (
        (dc1, "(1, 'a', 'one@dc1'), (2, 'b', 'two@dc1')"),
        (dc2, "(1, 'a', 'one@dc2'), (2, 'changed here', 'two@dc2')"),
    ):
        execute(
            server,
            f"CREATE DATABASE {EXCLUDED}",
            f"CREATE TABLE {EXCLUDED}.t (id INT PRIMARY KEY, v VARCHAR(20), email VARCHAR(20))",
            f"INSERT INTO {EXCLUDED}.t VALUES {rows}",
            log_bin=False,
        )
    start = position(dc1)
    execute(
        dc1,
        f"UPDATE {EXCLUDED}.t SET v = 'a2' WHERE id = 1",
        f"UPDATE {EXCLUDED}.t SET v = 'b2' WHERE id = 2",
    )
    keep = ConflictsConfig(tables=(ConflictTableConfig(table=f"{EXCLUDED}.t", policy="keep"),))
    tables = [f"{EXCLUDED}.*"]
    with serving(dc1, tmp_path / "buf", tables, start) as (_, url):
        config = channel_config(
            "rowexcl", url, tables, exclude_columns={f"{EXCLUDED}.t": ("email",)}
        )
        target = apply_user(dc2)
        with Running(build_channel(config, target, conflicts=keep, datacenter="dc2")) as running:
            wait_end(dc2, EXCLUDED, mark_end(dc1, EXCLUDED), running)
    assert query(dc2, f"SELECT * FROM {EXCLUDED}.t ORDER BY id") == [
        (1, "a2", "one@dc2"),
        (2, "changed here", "two@dc2"),
    ]
    logged = query(
        dc2,
        "SELECT kind, decision FROM drc.conflicts WHERE schema_name = %s AND table_name = 't'",
        (EXCLUDED,),
    )
    assert logged == [("update-update", "local")]


SUBSCRIBED = "rowsub"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "pull"])
def test_a_subscriber_gets_the_rows_its_filter_passes(
    dc1: ServerInfo, tmp_path: Path, stream: bool
) -> None:
    """A pull's ``rows`` filter, served from dc1's real captures: rows moving into the filter
    arrive as inserts, out of it as deletes, the others not at all."""
    schema = f"{SUBSCRIBED}_{'stream' if stream else 'pull'}"
    drop_everywhere(schema, dc1)
    execute(
        dc1,
        f"CREATE DATABASE {schema}",
        f"CREATE TABLE {schema}.customers (id INT PRIMARY KEY, region VARCHAR(8))",
        log_bin=False,
    )
    start = position(dc1)
    execute(
        dc1,
        f"INSERT INTO {schema}.customers VALUES (1, 'eu'), (2, 'us'), (3, 'us')",
        f"UPDATE {schema}.customers SET region = 'eu' WHERE id = 2",
        f"UPDATE {schema}.customers SET region = 'us' WHERE id = 1",
        f"UPDATE {schema}.customers SET region = 'ca' WHERE id = 3",
        f"DELETE FROM {schema}.customers WHERE id = 2",
    )
    token = mark_end(dc1, schema)
    got: list[tuple[str, str, dict[str, Any]]] = []
    with (
        serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url),
        Subscriber(
            [url],
            tables=f"{schema}.*",
            rows={f"{schema}.customers": "region = 'eu'"},
            wait_ms=200,
            stream=stream,
        ) as sub,
    ):
        while not any(t == "done" and row["token"] == token for t, _, row in got):
            batch = sub.get(timeout=60)
            got += [
                (c.table, c.op.value, dict(c.row)) for t in batch.transactions for c in t.changes
            ]
            sub.ack(batch)
    assert [(op, row) for table, op, row in got if table == "customers"] == [
        ("insert", {"id": 1, "region": "eu"}),
        ("insert", {"id": 2, "region": "eu"}),  # moved in
        ("delete", {"id": 1, "region": "eu"}),  # moved out: its last image in the filter
        ("delete", {"id": 2, "region": "eu"}),
    ]


STOPPED = "rowstop"


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"exclude_columns": {f"{STOPPED}.t": ("id",)}},
            MissingColumnError,
            "carry no 'id', a column of its primary key: a channel's exclude_columns",
        ),
        (
            {"row_filters": {f"{STOPPED}.t": "regoin = 'eu'"}},
            RowFilterColumnError,
            "names 'regoin', which the table's changes do not carry (columns: id, region)",
        ),
    ],
    ids=["key-excluded", "unknown-column"],
)
def test_a_row_stage_the_changes_cannot_meet_stops_the_channel_saying_why(
    dc1: ServerInfo,
    dc2: ServerInfo,
    tmp_path: Path,
    options: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    drop_everywhere(STOPPED, dc1, dc2)
    for server in (dc1, dc2):
        execute(
            server,
            f"CREATE DATABASE {STOPPED}",
            f"CREATE TABLE {STOPPED}.t (id INT PRIMARY KEY, region VARCHAR(8))",
            log_bin=False,
        )
    start = position(dc1)
    execute(dc1, f"INSERT INTO {STOPPED}.t VALUES (1, 'eu')")
    tables = [f"{STOPPED}.*"]
    with serving(dc1, tmp_path / "buf", tables, start) as (_, url):
        config = channel_config("rowstop", url, tables, **options)
        with Running(build_channel(config, apply_user(dc2))) as running:
            wait_for(lambda: running.error is not None, "the channel to stop")
    assert isinstance(running.error, error)
    assert message in str(running.error)
    assert query(dc2, f"SELECT * FROM {STOPPED}.t") == []  # nothing applied
