"""``drc conflicts`` against a real conflict log on dc1: what an operator reads back.

The entries are written the way an apply channel writes them (conflict_log.insert run through
a TargetSession); the commands run through click with a config file pointing at dc1. The table
is dropped before and after, so other tests sharing the sandbox never see it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from drc.apply.sink import TargetSession
from drc.cli.main import cli
from drc.conflicts.log import ConflictEntry, create_statements, get_conflict, insert
from drc.core.jsonwire import value_from_json
from drc.core.target_errors import MissingTableError
from drc.mysql.driver import TargetSettings
from drc.mysql.sql import Statement
from drc.sandbox.sandbox import ServerInfo
from tests.support.config import server_toml
from tests.support.servers import execute

pytestmark = pytest.mark.integration

DROP = "DROP TABLE IF EXISTS drc.conflicts"
ORIGIN_TIME = dt.datetime(2026, 11, 22, 9, 59, 58, 250000, tzinfo=dt.UTC)
OUTPUTS: list[str] = []  # every output of every command, checked for the password at the end


def entry(**changes: Any) -> ConflictEntry:
    fields: dict[str, Any] = {
        "channel": "from-dc2",
        "scn": "41:2:7:1234",
        "origin": "dc2",
        "datacenter": "dc1",
        "schema": "shop",
        "table": "orders",
        "key": {"id": 1},
        "kind": "update-update",
        "policy": "lww",
        "decision": "incoming",
        "reason": "the incoming change committed later at its origin",
        "local_row": {"id": 1, "qty": 5, "note": None},
        "incoming_before": {"id": 1, "qty": 4, "note": None},
        "incoming_after": {"id": 1, "qty": 6, "note": None},
        "result_row": {"id": 1, "qty": 6, "note": None},
        "origin_time": ORIGIN_TIME,
    }
    fields.update(changes)
    return ConflictEntry(**fields)


TYPED_LOCAL = {
    "a": 7,
    "b": "x",
    "price": Decimal("19.9900"),
    "at": dt.datetime(2024, 2, 29, 23, 59, 59, 123456),
    "blob": b"\x00\xffdrc",
    "note": None,
}
TYPED_INCOMING = {**TYPED_LOCAL, "price": Decimal("24.5000"), "blob": b"\x01"}

# In insert order (ids ascending); each a separate insert, as separate target transactions.
ENTRIES = [
    entry(kind="insert-insert", decision="local", policy="keep",
          reason="the channel keeps local rows", incoming_before=None,
          result_row={"id": 1, "qty": 5, "note": None}),
    entry(table="lines", key={"a": 7, "b": "x"}, local_row=TYPED_LOCAL,
          incoming_before=TYPED_LOCAL | {"price": Decimal("20.0000")},
          incoming_after=TYPED_INCOMING, result_row=TYPED_INCOMING),
    entry(kind="update-delete", decision="local", local_row=None, result_row=None,
          reason="the row was deleted here after the update at the origin", origin_time=None),
    entry(channel="from-dc3", origin="dc3", kind="delete-update", decision="delete",
          policy="resolver", incoming_after=None, result_row=None,
          reason="the resolver deleted the row"),
    entry(kind="insert-delete", decision="custom", policy="resolver", incoming_before=None,
          local_row=None, result_row={"id": 1, "qty": 0, "note": "merged"},
          reason="the resolver wrote a merged row"),
]  # fmt: skip


@pytest.fixture()
def conflict_log(dc1: ServerInfo) -> Iterator[list[int]]:
    """drc.conflicts on dc1 holding ENTRIES; yields their ids in insert order."""
    execute(dc1, DROP, *create_statements())
    session = TargetSession(_settings(dc1))
    try:
        for e in ENTRIES:
            session.execute(insert([e]), "logging a conflict")
            session.commit()
        rows = session.query(Statement("SELECT id FROM drc.conflicts ORDER BY id", ()), "ids")
    finally:
        session.close()
    yield [int(r[0]) for r in rows]
    execute(dc1, DROP)


def _settings(server: ServerInfo) -> TargetSettings:
    return TargetSettings(server.host, server.port, server.user, server.password)


@pytest.fixture()
def config(dc1: ServerInfo, tmp_path: Path) -> Path:
    path = tmp_path / "dc1.toml"
    path.write_text(
        f"""[datacenter]
name = "dc1"
{server_toml("source", dc1)}
[replicator]
buffer_dir = "{tmp_path / "buffer"}"
"""
    )
    return path


def run(config: Path, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["conflicts", *args, "--config", str(config)])
    OUTPUTS.append(result.output)
    return result


def ok(config: Path, *args: str) -> str:
    result = run(config, *args)
    assert result.exit_code == 0, result.output
    return result.output


def listed_ids(output: str) -> list[int]:
    return [int(line.split()[0]) for line in output.splitlines()[1:]]


# ---------------------------------------------------------------- list


def test_list_shows_every_conflict_newest_first(config: Path, conflict_log: list[int]) -> None:
    output = ok(config, "list")
    lines = output.splitlines()
    assert lines[0].split() == [
        "id", "detected_at", "channel", "from", "table", "key", "kind", "policy", "decision",
    ]  # fmt: skip
    assert listed_ids(output) == conflict_log[::-1]
    newest, *_, typed, oldest = lines[1:]
    assert newest.split()[3:] == [
        "from-dc2", "dc2->dc1", "shop.orders", "id=1", "insert-delete", "resolver", "custom",
    ]  # fmt: skip
    assert typed.split()[5:] == ["shop.lines", "a=7,b=x", "update-update", "lww", "incoming"]
    assert oldest.split()[-3:] == ["insert-insert", "keep", "local"]


def test_list_filters_by_channel_table_and_limit(config: Path, conflict_log: list[int]) -> None:
    assert listed_ids(ok(config, "list", "--channel", "from-dc3")) == [conflict_log[3]]
    assert listed_ids(ok(config, "list", "--table", "shop.lines")) == [conflict_log[1]]
    assert listed_ids(ok(config, "list", "--limit", "2")) == conflict_log[::-1][:2]
    both = ok(config, "list", "--channel", "from-dc2", "--table", "shop.orders", "--limit", "9")
    assert listed_ids(both) == [conflict_log[i] for i in (4, 2, 0)]
    assert ok(config, "list", "--channel", "nope").strip() == "no conflicts match"


def test_list_filters_by_age_and_by_utc_time(
    config: Path, conflict_log: list[int], dc1: ServerInfo
) -> None:
    old = conflict_log[:2]
    execute(
        dc1,
        "UPDATE drc.conflicts SET detected_at = UTC_TIMESTAMP(6) - INTERVAL 3 DAY "
        f"WHERE id IN ({old[0]}, {old[1]})",
    )
    recent = conflict_log[:1:-1]
    assert listed_ids(ok(config, "list", "--since", "2d")) == recent
    assert listed_ids(ok(config, "list", "--since", "4d")) == conflict_log[::-1]
    assert listed_ids(ok(config, "list", "--since", "90s")) == recent
    two_days_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S")
    assert listed_ids(ok(config, "list", "--since", two_days_ago)) == recent
    assert ok(config, "list", "--since", "2999-01-01T00:00:00").strip() == "no conflicts match"


def test_list_as_json(config: Path, conflict_log: list[int]) -> None:
    documents = json.loads(ok(config, "list", "--format", "json"))
    assert [d["id"] for d in documents] == conflict_log[::-1]
    typed = documents[3]
    assert (typed["schema"], typed["table"], typed["kind"]) == ("shop", "lines", "update-update")
    assert {k: value_from_json(v) for k, v in typed["key"].items()} == {"a": 7, "b": "x"}
    assert {k: value_from_json(v) for k, v in typed["local_row"].items()} == TYPED_LOCAL
    assert typed["origin_time"] == "2026-11-22T09:59:58.250000+00:00"
    assert json.loads(ok(config, "list", "--channel", "nope", "--format", "json")) == []


# ---------------------------------------------------------------- show


def test_show_puts_local_and_incoming_side_by_side(config: Path, conflict_log: list[int]) -> None:
    output = ok(config, "show", str(conflict_log[1]))
    for part in (
        f"conflict     {conflict_log[1]}, detected ",
        "channel      from-dc2 (dc2 -> dc1)",
        "scn          41:2:7:1234",
        "origin time  2026-11-22 09:59:58.250000 UTC",
        "table        shop.lines",
        "key          a=7,b=x",
        "kind         update-update",
        "policy       lww",
        "decision     incoming",
        "reason       the incoming change committed later at its origin",
    ):
        assert part in output
    rows = {line.split()[1] if line.startswith("*") else line.split()[0]: line
            for line in output.split("\n\n")[1].splitlines()[1:]}  # fmt: skip
    assert rows["price"].split() == ["*", "price", "19.9900", "20.0000", "24.5000", "24.5000"]
    assert rows["blob"].split() == ["*", "blob", "0x00ff647263", "0x00ff647263", "0x01", "0x01"]
    assert rows["at"].split() == ["at", *["2024-02-29T23:59:59.123456"] * 4]
    assert rows["note"].split() == ["note", "NULL", "NULL", "NULL", "NULL"]
    assert not rows["a"].startswith("*") and not rows["b"].startswith("*")
    assert "\x1b[" not in output  # piped: no colour


def test_show_says_no_row_where_a_row_is_absent(config: Path, conflict_log: list[int]) -> None:
    output = ok(config, "show", str(conflict_log[2]))
    assert "kind         update-delete" in output and "origin time  unknown" in output
    qty = next(line for line in output.splitlines() if line.split()[:1] == ["qty"])
    assert qty.split() == ["qty", "(no", "row)", "4", "6", "(no", "row)"]


def test_show_as_json_is_lossless(config: Path, conflict_log: list[int]) -> None:
    document = json.loads(ok(config, "show", str(conflict_log[1]), "--format", "json"))
    assert document["id"] == conflict_log[1]
    after = {k: value_from_json(v) for k, v in document["incoming_after"].items()}
    assert after == TYPED_INCOMING and list(after) == list(TYPED_INCOMING)
    assert document["changed_columns"] == ["price", "blob"]
    assert document["local_row"]["price"] == {"$decimal": "19.9900"}


def test_show_of_an_unknown_id_fails(config: Path, conflict_log: list[int]) -> None:
    result = run(config, "show", str(max(conflict_log) + 1000))
    assert result.exit_code == 1
    assert f"no conflict with id {max(conflict_log) + 1000}" in result.output


def test_entries_read_back_exactly(dc1: ServerInfo, conflict_log: list[int]) -> None:
    session = TargetSession(_settings(dc1))
    try:
        found = get_conflict(session, conflict_log[1])
    finally:
        session.close()
    assert found is not None
    expected = ENTRIES[1]
    assert found.key == expected.key and found.local_row == expected.local_row
    assert found.incoming_before == expected.incoming_before
    assert found.incoming_after == found.result_row == TYPED_INCOMING
    assert found.origin_time == ORIGIN_TIME and found.reason == expected.reason
    assert abs(dt.datetime.now(dt.UTC) - found.detected_at) < dt.timedelta(minutes=5)


# ---------------------------------------------------------------- stats


def test_stats_count_per_table_and_policy(config: Path, conflict_log: list[int]) -> None:
    lines = ok(config, "stats").splitlines()
    assert [line.split()[:7] for line in lines[1:-1]] == [
        ["shop.lines", "lww", "1", "1", "0", "0", "0"],
        ["shop.orders", "keep", "1", "0", "1", "0", "0"],
        ["shop.orders", "lww", "1", "0", "1", "0", "0"],
        ["shop.orders", "resolver", "2", "0", "0", "1", "1"],
    ]
    assert lines[-1].split() == ["total", "5", "1", "2", "1", "1"]


def test_stats_as_json_and_since(config: Path, conflict_log: list[int], dc1: ServerInfo) -> None:
    document = json.loads(ok(config, "stats", "--format", "json"))
    assert document["total"] == 5
    assert document["decisions"] == {"incoming": 1, "local": 2, "custom": 1, "delete": 1}
    resolver = document["tables"][3]
    assert resolver["kinds"] == {"delete-update": 1, "insert-delete": 1}
    execute(dc1, "UPDATE drc.conflicts SET detected_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR")
    assert json.loads(ok(config, "stats", "--since", "10m", "--format", "json"))["total"] == 0
    assert ok(config, "stats", "--since", "10m").startswith("no conflicts since ")
    assert json.loads(ok(config, "stats", "--since", "2h", "--format", "json"))["total"] == 5


# ---------------------------------------------------------------- errors and secrets


def test_without_the_table_every_command_says_why(config: Path, dc1: ServerInfo) -> None:
    execute(dc1, DROP)
    for args in (["list"], ["show", "1"], ["stats"], ["list", "--format", "json"]):
        result = run(config, *args)
        assert result.exit_code == 1, result.output
        assert "no conflict has been recorded on this target" in result.output
        assert "created by an apply channel with a conflict policy" in result.output
    session = TargetSession(_settings(dc1))
    try:
        with pytest.raises(MissingTableError):
            get_conflict(session, 1)
    finally:
        session.close()


def test_a_wrong_password_fails_without_showing_it(config: Path, dc1: ServerInfo) -> None:
    wrong = "not-the-password-8d1f"
    config.write_text(config.read_text().replace(dc1.password, wrong))
    result = run(config, "list")
    assert result.exit_code == 1 and "Access denied" in result.output
    assert wrong not in result.output


def test_no_output_shows_the_config_password(
    config: Path, conflict_log: list[int], dc1: ServerInfo
) -> None:
    for fmt in ("table", "json"):
        for args in (["list"], ["show", str(conflict_log[1])], ["stats"]):
            ok(config, *args, "--format", fmt)
    run(config, "show", "999999")
    # Every output of this module so far, errors included (this test runs last in the file).
    assert OUTPUTS and not [output for output in OUTPUTS if dc1.password in output]
