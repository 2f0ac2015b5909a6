"""A large transaction applied piece by piece (drc.apply.streamed) still decides every row by
its conflict policy: rows a target changed later keep the target's version, rows it changed
earlier take the incoming one, each conflict logged, in the first piece and in the last.

One channel dc1 -> dc2 in this process (tests/support/apply.py ``serving``, ``Running``), lww
on ``updated_at``. Both sides hold the same 30,000 rows; dc2 changed some of them outside DRC
(kept out of the binlog), some after dc1's coming update and some before; then dc1 updates
every row in one transaction: 30,000 row changes, three fragments, two pieces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from drc.apply.service import build_channel
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.servers import drop_everywhere, execute, position, query
from tests.support.waits import mark_end, wait_end

SCHEMA = "big_cf"
ROWS = 30_000
T0 = 1_900_000_000  # far from the real clock: nothing else ties with these times
LOCAL_NEWER = [*range(1, 51), *range(ROWS - 49, ROWS + 1)]  # in the first and last piece
LOCAL_OLDER = list(range(15_001, 15_101))


def _rows(server: ServerInfo) -> dict[int, str]:
    return dict(query(server, f"SELECT id, v FROM {SCHEMA}.t ORDER BY id"))  # type: ignore[arg-type]


def test_a_large_transaction_decides_each_row_by_its_conflict_policy(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, caplog: Any
) -> None:
    drop_everywhere(SCHEMA, dc1, dc2)
    for server in (dc1, dc2):
        execute(server, f"CREATE DATABASE {SCHEMA}", log_bin=False)
        execute(
            server,
            f"CREATE TABLE {SCHEMA}.t (id INT PRIMARY KEY, v VARCHAR(40) NOT NULL, "
            "updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
            "ON UPDATE CURRENT_TIMESTAMP(6))",
            f"SET TIMESTAMP = {T0}",
            f"INSERT INTO {SCHEMA}.t (id, v) SELECT seq, 'seed' FROM seq_1_to_{ROWS}",
            log_bin=False,
            database=SCHEMA,  # where the sequence engine's seq_1_to_N is found
        )
    newer, older = (",".join(map(str, keys)) for keys in (LOCAL_NEWER, LOCAL_OLDER))
    execute(
        dc2,
        f"SET TIMESTAMP = {T0 + 100}",
        f"UPDATE {SCHEMA}.t SET v = 'dc2 later' WHERE id IN ({newer})",
        f"SET TIMESTAMP = {T0 + 10}",
        f"UPDATE {SCHEMA}.t SET v = 'dc2 earlier' WHERE id IN ({older})",
        log_bin=False,
    )
    start = position(dc1)
    execute(dc1, f"SET TIMESTAMP = {T0 + 50}", f"UPDATE {SCHEMA}.t SET v = CONCAT('dc1 ', id)")
    rule = ConflictTableConfig(table=f"{SCHEMA}.t", policy="lww", column="updated_at")
    conflicts = ConflictsConfig(priority=("dc1", "dc2"), tables=(rule,))
    caplog.set_level("INFO", logger="drc.apply.streamed")
    with serving(dc1, tmp_path / "buf", [f"{SCHEMA}.*"], start) as (_, url):
        config = channel_config("big-cf", url, [f"{SCHEMA}.*"])
        channel = build_channel(config, apply_user(dc2), conflicts=conflicts, datacenter="dc2")
        with Running(channel) as running:
            wait_end(dc2, SCHEMA, mark_end(dc1, SCHEMA), running)
        assert running.error is None
        stats = running.stats
    assert "piece by piece" in caplog.text and "2 pieces" in caplog.text, caplog.text
    found = _rows(dc2)
    expected = {key: f"dc1 {key}" for key in range(1, ROWS + 1)}
    expected.update({key: "dc2 later" for key in LOCAL_NEWER})
    assert found == expected
    logged = query(
        dc2,
        "SELECT decision, COUNT(*) FROM drc.conflicts WHERE schema_name = %s GROUP BY decision",
        (SCHEMA,),
    )
    assert dict(logged) == {"local": len(LOCAL_NEWER), "incoming": len(LOCAL_OLDER)}, logged
    assert stats.conflicts == len(LOCAL_NEWER) + len(LOCAL_OLDER), stats.as_dict()
