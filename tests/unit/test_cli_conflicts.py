"""``drc conflicts``' pure parts: --since parsing, value rendering, list/show/stats layouts."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from decimal import Decimal
from typing import Any

import click
import pytest
from click.testing import CliRunner

from drc.cli import conflicts as cmd
from drc.cli.main import cli
from drc.conflicts.log import ConflictCount, StoredConflict
from drc.core.jsonwire import value_from_json
from drc.core.values import Bit, ZeroDate

UTC = dt.UTC
NOW = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def stored(**changes: Any) -> StoredConflict:
    fields: dict[str, Any] = {
        "id": 17,
        "detected_at": dt.datetime(2026, 11, 22, 10, 0, 0, 123456, tzinfo=UTC),
        "channel": "from-dc2",
        "scn": "12:2:3:456",
        "origin": "dc2",
        "datacenter": "dc1",
        "schema": "shop",
        "table": "orders",
        "key": {"id": 7},
        "kind": "update-update",
        "policy": "lww",
        "decision": "incoming",
        "reason": "the incoming change committed later at its origin",
        "local_row": {"id": 7, "qty": 5, "price": Decimal("1.50"), "note": None},
        "incoming_before": {"id": 7, "qty": 1, "price": Decimal("1.50"), "note": None},
        "incoming_after": {"id": 7, "qty": 2, "price": Decimal("1.50"), "note": "gift"},
        "result_row": {"id": 7, "qty": 2, "price": Decimal("1.50"), "note": "gift"},
        "origin_time": dt.datetime(2026, 11, 22, 9, 59, 59, tzinfo=UTC),
    }
    fields.update(changes)
    return StoredConflict(**fields)


def column_line(lines: list[str], column: str) -> str:
    """The line of ``column`` in show's side-by-side table (styling kept)."""
    (line,) = [line for line in lines if click.unstyle(line)[3:].split(" ")[0] == column]
    return line


# ---------------------------------------------------------------- --since


@pytest.mark.parametrize(
    ("text", "age"),
    [
        ("90s", dt.timedelta(seconds=90)),
        ("10m", dt.timedelta(minutes=10)),
        ("2h", dt.timedelta(hours=2)),
        ("3d", dt.timedelta(days=3)),
        (" 0s ", dt.timedelta(0)),
    ],
)
def test_since_accepts_a_relative_age(text: str, age: dt.timedelta) -> None:
    assert cmd.parse_since(text, NOW) == NOW - age


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-22T10:00:00", dt.datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
        ("2026-11-22 10:00:00.5", dt.datetime(2026, 11, 22, 10, 0, 0, 500000, tzinfo=UTC)),
        ("2026-11-22", dt.datetime(2026, 11, 22, tzinfo=UTC)),
        ("2026-11-22T11:00:00+01:00", dt.datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
        ("2026-11-22T10:00:00Z", dt.datetime(2026, 11, 22, 10, 0, tzinfo=UTC)),
    ],
)
def test_since_accepts_iso_times_as_utc(text: str, expected: dt.datetime) -> None:
    found = cmd.parse_since(text, NOW)
    assert found == expected and found.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize("text", ["yesterday", "10", "5w", "-3d", "2h30m", "", "2026-13-01"])
def test_since_rejects_other_forms(text: str) -> None:
    with pytest.raises(ValueError, match="90s, 10m, 2h, 3d"):
        cmd.parse_since(text, NOW)


@pytest.mark.parametrize("command", ["list", "stats"])
def test_a_bad_since_is_a_usage_error_naming_the_accepted_forms(command: str) -> None:
    result = CliRunner().invoke(
        cli, ["conflicts", command, "--config", "none.toml", "--since", "last week"]
    )
    assert result.exit_code == 2
    assert "--since" in result.output and "ISO datetime" in result.output
    assert "90s, 10m, 2h, 3d" in result.output


def test_a_missing_config_is_one_clear_error() -> None:
    result = CliRunner().invoke(cli, ["conflicts", "list", "--config", "/nonexistent/dc.toml"])
    assert result.exit_code == 1 and "config file /nonexistent/dc.toml not found" in result.output


# ---------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "NULL"),
        (42, "42"),
        (Decimal("1.50"), "1.50"),
        ("plain text", "plain text"),
        ("", '""'),
        ("NULL", '"NULL"'),
        ("two\nlines", '"two\\nlines"'),
        (b"\x00\xff", "0x00ff"),
        (Bit(5, 10), "0x0005"),
        (frozenset({"b", "a"}), "a,b"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 6), "2024-01-02T03:04:05.000006"),
        (dt.datetime(2024, 1, 2, 4, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=1))),
         "2024-01-02T03:04:05+00:00"),
        (dt.date(2024, 1, 2), "2024-01-02"),
        (dt.timedelta(hours=-1, seconds=-1), "-01:00:01.000000"),
        (ZeroDate("0000-00-00"), "0000-00-00"),
        ({"k": [1]}, '{"k":[1]}'),
    ],
)  # fmt: skip
def test_values_render_readably(value: Any, text: str) -> None:
    assert cmd.render_value(value) == text


def test_long_values_are_cut_in_tables() -> None:
    text = cmd.render_value("x" * 100)
    assert len(text) == 40 and text.endswith("...")
    assert cmd.render_value("x" * 100, width=None) == "x" * 100


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (Bit(5, 10), b"\x00\x05"),  # stream vs pymysql BIT
        (dt.datetime(2024, 1, 1, 10, tzinfo=UTC), dt.datetime(2024, 1, 1, 10)),
        (frozenset({"y", "x"}), "x,y"),  # stream SET vs pymysql SET text
        (frozenset(), ""),
        (ZeroDate("0000-00-00"), "0000-00-00"),
        (Decimal("1.50"), Decimal("1.5")),
        (None, None),
    ],
)
def test_the_same_value_from_either_source_is_not_a_difference(a: Any, b: Any) -> None:
    assert cmd.same_value(a, b) and cmd.same_value(b, a)


@pytest.mark.parametrize(("a", "b"), [(None, 0), (None, ""), (1, 2), ("x", "x,y")])
def test_different_values_differ(a: Any, b: Any) -> None:
    assert not cmd.same_value(a, b)


def test_keys_are_compact() -> None:
    assert cmd.key_text({"id": 7}) == "id=7"
    assert cmd.key_text({"a": 1, "b": b"\x01"}) == "a=1,b=0x01"


# ---------------------------------------------------------------- show


def test_show_puts_the_rows_side_by_side_and_marks_changed_columns() -> None:
    lines = cmd.show_lines(stored())
    text = "\n".join(lines)
    for part in (
        "conflict     17, detected 2026-11-22 10:00:00.123456 UTC",
        "channel      from-dc2 (dc2 -> dc1)",
        "scn          12:2:3:456",
        "origin time  2026-11-22 09:59:59 UTC",
        "table        shop.orders",
        "key          id=7",
        "kind         update-update",
        "reason       the incoming change committed later at its origin",
    ):
        assert part in text
    header = next(line for line in lines if "incoming before" in line)
    assert header.split() == [
        "column",
        "local",
        "incoming",
        "before",
        "incoming",
        "after",
        "result",
    ]
    assert column_line(lines, "qty").split() == ["*", "qty", "5", "1", "2", "2"]
    assert column_line(lines, "note").split() == ["*", "note", "NULL", "NULL", "gift", "gift"]
    assert column_line(lines, "id").split() == ["id", "7", "7", "7", "7"]
    assert column_line(lines, "price").startswith("   price")
    assert "\x1b[" not in text  # plain when not asked for colour


def test_show_highlights_only_the_marked_lines_in_colour() -> None:
    lines = cmd.show_lines(stored(), color=True)
    marked = column_line(lines, "qty")
    assert marked.startswith("\x1b[") and click.unstyle(marked).split()[:2] == ["*", "qty"]
    assert "\x1b[" not in column_line(lines, "id")


def test_an_absent_row_shows_no_row_and_marks_nothing() -> None:
    conflict = stored(
        kind="update-delete", decision="local", local_row=None, result_row=None, origin_time=None
    )
    lines = cmd.show_lines(conflict)
    assert column_line(lines, "qty").split() == ["qty", "(no", "row)", "1", "2", "(no", "row)"]
    assert cmd.changed_columns(conflict) == []
    assert "origin time  unknown" in "\n".join(lines)


def test_a_delete_is_compared_with_its_before_image() -> None:
    conflict = stored(kind="delete-update", incoming_after=None, decision="local")
    assert cmd.changed_columns(conflict) == ["qty"]


def test_a_column_missing_on_one_side_is_marked() -> None:
    conflict = stored(local_row={"id": 7, "qty": 1, "price": Decimal("1.50")}, incoming_before=None)
    assert "note" in cmd.changed_columns(conflict)
    assert column_line(cmd.show_lines(conflict), "note").split()[2] == "-"


# ---------------------------------------------------------------- list and JSON


def test_list_lines_are_one_per_conflict_in_the_given_order() -> None:
    lines = cmd.list_lines([stored(id=9, key={"a": 1, "b": "x"}), stored(id=10)])
    assert lines[0].split() == [
        "id", "detected_at", "channel", "from", "table", "key", "kind", "policy", "decision",
    ]  # fmt: skip
    assert lines[1].split() == [
        "9", "2026-11-22", "10:00:00", "from-dc2", "dc2->dc1", "shop.orders", "a=1,b=x",
        "update-update", "lww", "incoming",
    ]  # fmt: skip
    assert lines[2].split()[0] == "10" and len(lines) == 3


def test_the_json_document_is_lossless() -> None:
    row = {"id": 7, "d": Decimal("1.50"), "b": b"\x00", "t": dt.datetime(2024, 1, 1, 1, 2, 3)}
    document = json.loads(json.dumps(cmd.conflict_json(stored(local_row=row))))
    assert document["id"] == 17 and document["kind"] == "update-update"
    assert document["detected_at"] == "2026-11-22T10:00:00.123456+00:00"
    assert {k: value_from_json(v) for k, v in document["local_row"].items()} == row
    assert document["changed_columns"] == ["d", "b", "t", "qty", "price", "note"]
    assert document["key"] == {"id": 7} and document["result_row"]["note"] == "gift"


# ---------------------------------------------------------------- stats

COUNTS = [
    ConflictCount("shop", "items", "keep", "local", "insert-insert", 1),
    ConflictCount("shop", "orders", "lww", "incoming", "update-update", 3),
    ConflictCount("shop", "orders", "lww", "local", "update-delete", 2),
    ConflictCount("shop", "orders", "lww", "local", "update-update", 1),
]


def test_stats_count_per_table_and_policy_with_decisions_and_a_total() -> None:
    lines = cmd.stats_lines(COUNTS)
    assert lines[0].split() == [
        "table", "policy", "total", "incoming", "local", "custom", "delete", "kinds",
    ]  # fmt: skip
    assert lines[1].split()[:7] == ["shop.items", "keep", "1", "0", "1", "0", "0"]
    assert lines[2].split()[:7] == ["shop.orders", "lww", "6", "3", "3", "0", "0"]
    assert "update-update 4, update-delete 2" in lines[2]
    assert lines[3].split() == ["total", "7", "3", "4", "0", "0"]


def test_stats_json() -> None:
    since = dt.datetime(2026, 11, 22, tzinfo=UTC)
    document = json.loads(json.dumps(cmd.stats_json(COUNTS, since)))
    assert document["total"] == 7 and document["since"] == "2026-11-22T00:00:00+00:00"
    assert document["decisions"] == {"incoming": 3, "local": 4, "custom": 0, "delete": 0}
    orders = document["tables"][1]
    assert (orders["schema"], orders["table"], orders["policy"], orders["total"]) == (
        "shop", "orders", "lww", 6,
    )  # fmt: skip
    assert orders["kinds"] == {"update-update": 4, "update-delete": 2}


def test_importing_the_commands_loads_no_driver() -> None:
    code = (
        "import sys, drc.cli.conflicts; "
        "bad = [m for m in ('pymysql', 'httpx', 'drc.apply') if m in sys.modules]; "
        "assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
