"""Conflict handling that cannot decide: clear errors that stop the channel and lose nothing."""

from __future__ import annotations

from pathlib import Path

from drc.apply.service import build_channel
from drc.conflicts.rules import ResolverError
from drc.conflicts.settings import ConflictsConfig, ConflictTableConfig
from drc.core.target_errors import TargetSchemaError
from drc.sandbox.sandbox import ServerInfo
from tests.support.apply import Running, apply_user, channel_config, serving
from tests.support.servers import drop_everywhere, execute, position, query
from tests.support.waits import wait_for


def _resolver(schema: str, spec: str) -> ConflictsConfig:
    table = ConflictTableConfig(table=f"{schema}.t", policy="resolver", resolver=spec)
    return ConflictsConfig(tables=(table,))


def _conflicts(server: ServerInfo, schema: str) -> list[tuple[object, ...]]:
    return query(
        server,
        "SELECT kind, decision, reason FROM drc.conflicts WHERE schema_name = %s",
        (schema,),
    )


def test_a_failing_resolver_stops_the_channel_and_the_change_waits_for_the_fix(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "cf_err"
    drop_everywhere(schema, dc1, dc2)
    for server, local in ((dc1, "orig"), (dc2, "zzz")):  # dc2's row was changed there
        execute(
            server,
            f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(10), n INT)",
            f"INSERT INTO {schema}.t VALUES (1, '{local}', 0)",
        )
    start = position(dc1)
    execute(dc1, f"UPDATE {schema}.t SET v = 'remote', n = 7 WHERE id = 1")
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config("cf-err", url, [f"{schema}.*"])
        broken = _resolver(schema, "tests.integration.resolvers:broken")
        channel = build_channel(config, apply_user(dc2), conflicts=broken, datacenter="dc2")
        with Running(channel) as running:
            wait_for(lambda: running.error is not None, "the channel to stop")
        assert isinstance(running.error, ResolverError)
        message = str(running.error)
        assert "tests.integration.resolvers:broken" in message and "cf_err.t" in message
        assert "resolver bug on key {'id': 1}" in message and "restart" in message
        assert query(dc2, f"SELECT * FROM {schema}.t") == [(1, "zzz", 0)]  # nothing applied
        assert _conflicts(dc2, schema) == []  # nor logged: the decision was never made

        fixed = _resolver(schema, "tests.integration.resolvers:merge_max")
        channel = build_channel(config, apply_user(dc2), conflicts=fixed, datacenter="dc2")
        with Running(channel) as running:
            wait_for(lambda: running.stats.conflicts == 1, "the conflict to be resolved")
            assert running.error is None
    assert query(dc2, f"SELECT * FROM {schema}.t") == [(1, "zzz", 7)]  # merged
    [(kind, decision, reason)] = _conflicts(dc2, schema)
    assert (kind, decision) == ("update-update", "custom") and "merge_max" in str(reason)


def test_lww_on_a_table_without_its_timestamp_column_is_refused_naming_it(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "cf_nocol"
    drop_everywhere(schema, dc1, dc2)
    for server in (dc1, dc2):
        execute(
            server,
            f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, v VARCHAR(10))",
        )
    start = position(dc1)
    with serving(dc1, tmp_path / "buf", [f"{schema}.*"], start) as (_, url):
        config = channel_config("cf-nocol", url, [f"{schema}.*"])
        lww = ConflictsConfig(
            priority=("dc1", "dc2"),
            tables=(ConflictTableConfig(table=f"{schema}.t", policy="lww", column="changed"),),
        )
        with Running(build_channel(config, apply_user(dc2), conflicts=lww, datacenter="dc2")) as r:
            wait_for(lambda: r.error is not None, "the channel to refuse the table")
    assert isinstance(r.error, TargetSchemaError)
    assert "cf_nocol.t has no column 'changed'" in str(r.error)
