"""Bulk catch-up (real Spark, local mode) applies a channel's row filters and excluded columns
as streaming does: dc2 ends with the filtered projection of dc1's backlog."""

from __future__ import annotations

from pathlib import Path

import pytest

from drc.catchup.driver import run_catchup
from drc.config import load_config
from drc.sandbox.sandbox import ServerInfo
from tests.support.catchup import (
    SCHEMA,
    TABLES,
    checkpoint_of,
    config_for,
    prepare,
    served,
    workload,
)
from tests.support.servers import execute, master_position, query

pytestmark = pytest.mark.integration

ROW_FILTERS = f"""\
row_filters = {{ "{SCHEMA}.hot" = "id = 1 OR n < 20", "{SCHEMA}.acct" = "bal < 5000", \
"{SCHEMA}.events" = "v <= 2" }}
exclude_columns = {{ "{SCHEMA}.acct" = ["owner"] }}
"""


def test_catchup_applies_row_filters_and_excluded_columns(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    prepare(dc1, dc2, SCHEMA)
    with served(dc1, tmp_path, SCHEMA) as (capture, url):
        execute(dc1, f"CREATE DATABASE {SCHEMA}", *TABLES)
        workload(dc1, SCHEMA, seed=16, txns=300, ddl_at=None)
        capture.wait_for(master_position(dc1))
        last = capture.buffer.last_scn
        path = config_for(tmp_path, dc2, url, "cu-rows", SCHEMA)
        path.write_text(path.read_text() + ROW_FILTERS)  # [[channels]] is the file's last table
        config = load_config(path)
        summary = run_catchup(config, "cu-rows", master="local[2]", partitions=3, out=print)
        assert summary.to == last and checkpoint_of(dc2, "cu-rows") == str(last)

    def rows(server: ServerInfo, sql: str) -> list[tuple[object, ...]]:
        return query(server, sql.format(s=SCHEMA))

    hot = "SELECT id, n, note FROM {s}.hot WHERE id = 1 OR n < 20 ORDER BY id"
    assert rows(dc2, hot) == rows(dc1, hot)
    assert rows(dc2, "SELECT COUNT(*) FROM {s}.hot") == rows(
        dc1, "SELECT COUNT(*) FROM (" + hot + ") h"
    )
    acct = "SELECT id, bal FROM {s}.acct WHERE bal < 5000 ORDER BY id"
    assert rows(dc2, "SELECT id, bal FROM {s}.acct ORDER BY id") == rows(dc1, acct)
    assert len(rows(dc1, acct)) < len(rows(dc1, "SELECT id FROM {s}.acct")), "some filtered out"
    assert rows(dc2, "SELECT COUNT(*) FROM {s}.acct WHERE owner IS NOT NULL") == [(0,)]
    events = "SELECT kind, v, COUNT(*) FROM {s}.events WHERE v <= 2 GROUP BY kind, v ORDER BY v"
    assert rows(dc2, events) == rows(dc1, events)
    assert rows(dc2, "SELECT COUNT(*) FROM {s}.events WHERE v > 2") == [(0,)]
