"""The lww guard's configuration and which local deletes it takes (no server: the only target
call it makes here, a table definition, is answered by a stub)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from drc.apply.lww_guard import GUARD_NAME, build_guard, guard_channel, local_api_url
from drc.config import DrcConfig
from drc.config_replicator import ApiConfig
from drc.conflicts import tombstones
from drc.core.events import Op, RowChange
from drc.core.target_errors import MissingTableError
from drc.core.target_table import TargetTable

T = dt.datetime(2026, 1, 1)


def config(*tables: dict[str, Any], **api: Any) -> DrcConfig:
    return DrcConfig.model_validate({
        "datacenter": {"name": "dc1"},
        "source": {"user": "drc", "password": "pw"},
        "replicator": {"buffer_dir": "/tmp/x"},
        "api": {"port": 8641, **api},
        "conflicts": {"priority": ["dc1", "dc2"], "tables": list(tables)},
    })  # fmt: skip


LWW = {"table": "shop.*", "policy": "lww", "column": "ts"}


def test_the_guard_runs_only_for_tables_with_a_timestamp_column() -> None:
    assert guard_channel(config()) is None
    assert guard_channel(config({"table": "shop.a", "policy": "overwrite"})) is None
    channel = guard_channel(config(LWW, {"table": "crm.*", "policy": "keep"}))
    assert channel is not None
    assert (channel.name, channel.origin, channel.tables) == (GUARD_NAME, "dc1", ("shop.*",))
    assert channel.remote == ("http://127.0.0.1:8641",)


def test_the_guard_reads_this_datacenter_s_own_api() -> None:
    anywhere = ApiConfig(host="0.0.0.0", port=9000, tokens=["t"], tls_certfile="c", tls_keyfile="k")
    assert local_api_url(anywhere) == "https://127.0.0.1:9000"
    assert local_api_url(ApiConfig(host="::1", port=9000)) == "http://[::1]:9000"
    given = config(LWW, tokens=["t0k"])
    given = given.model_copy(
        update={"conflicts": given.conflicts.model_copy(update={"local_api": ("http://r:1",)})}
    )
    channel = guard_channel(given, local_url="http://ignored:2")
    assert channel is not None and channel.remote == ("http://r:1",)
    assert channel.secret() == "t0k"


class Tables:
    """The target's table definitions (the guard's only target call in these tests)."""

    def table(self, schema: str, table: str, refresh: bool = False) -> TargetTable:
        if table == "gone":
            raise MissingTableError("no such table")
        return TargetTable(schema, table, ("id", "v", "ts"), ("id",))


def delete(id: int, table: str = "t", schema: str = "shop") -> RowChange:
    return RowChange(schema, table, Op.DELETE, {"id": id, "v": "a", "ts": T}, None)


def tomb(id: int) -> RowChange:
    after = {"id": id, tombstones.COL_SCHEMA: "shop", tombstones.COL_TABLE: "t",
             tombstones.COL_DELETED_AT: T, tombstones.COL_ORIGIN: "dc1"}  # fmt: skip
    return RowChange(tombstones.SCHEMA, tombstones.name("shop", "t"), Op.INSERT, None, after)


def test_only_deletes_of_timed_tables_without_their_tombstone_row_are_taken() -> None:
    guard = build_guard(config(LWW))
    assert guard is not None
    guard.target = Tables()  # type: ignore[assignment]
    update = RowChange("shop", "t", Op.UPDATE, {"id": 9, "v": "a", "ts": T}, {"id": 9})
    changes = [
        delete(1), tomb(1),  # the trigger's tombstone: nothing to do
        delete(2),  # no trigger yet
        delete(3, schema="crm"),  # no timestamp policy
        delete(4, table="gone"),  # dropped since: nothing to protect
        update, tomb(5),
    ]  # fmt: skip
    assert guard._unstamped(changes) == (delete(2),)
