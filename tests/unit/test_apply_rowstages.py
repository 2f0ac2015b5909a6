"""Row filters and excluded columns: the stages, their config, and `drc config check`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.apply.plan import Planner
from drc.apply.rowstages import ExcludeColumns, FilterRows
from drc.apply.service import channel_filters
from drc.cli.main import cli
from drc.config import config_problems
from drc.config_channels import ChannelConfig, parse_filters
from drc.core.events import Column, Op, RowChange, TableSchema
from drc.core.rowfilter import RowFilterColumnError
from drc.core.target_errors import MissingColumnError
from drc.core.target_table import TargetTable
from drc.metastore import MetaStore
from drc.metastore.file import DEFAULT_FILENAME
from tests.support.apply_fakes import dele, ins, scn, txn, upd


def _filter(**row_filters: str) -> FilterRows:
    return FilterRows(parse_filters({f"db.{t}": p for t, p in row_filters.items()}))


def test_an_update_moving_a_row_into_the_filter_becomes_an_insert_of_its_new_row() -> None:
    stage = _filter(t="region = 'eu'")
    kept = stage(txn(1, upd("t", {"id": 1, "region": "us"}, id=1, region="eu")))
    assert kept is not None
    assert kept.changes == (RowChange("db", "t", Op.INSERT, None, {"id": 1, "region": "eu"}),)
    assert stage.turned == 1


def test_an_update_moving_a_row_out_of_the_filter_becomes_a_delete_of_its_old_row() -> None:
    stage = _filter(t="region = 'eu'")
    kept = stage(txn(1, upd("t", {"id": 1, "region": "eu"}, id=1, region="us")))
    assert kept is not None
    assert kept.changes == (RowChange("db", "t", Op.DELETE, {"id": 1, "region": "eu"}, None),)


def test_changes_inside_the_filter_pass_unchanged_and_those_outside_are_dropped() -> None:
    stage = _filter(t="region = 'eu'")
    inside = upd("t", {"id": 1, "region": "eu", "n": 1}, id=1, region="eu", n=2)
    kept = stage(
        txn(1, ins("t", id=2, region="us"), inside, dele("t", id=3, region="us"), ins("u", id=4))
    )
    assert kept is not None and [c.table for c in kept.changes] == ["t", "u"]
    assert kept.changes[0] is inside
    assert stage.dropped == 2
    assert stage(txn(2, upd("t", {"id": 1, "region": "us"}, id=1, region="ca"))) is None
    untouched = txn(3, ins("t", id=5, region="eu"))
    assert stage(untouched) is untouched


def test_a_filter_naming_a_column_the_changes_lack_stops_with_its_name() -> None:
    stage = _filter(t="regoin = 'eu'")
    with pytest.raises(RowFilterColumnError, match=r"db\.t .*'regoin'.*columns: id, region"):
        stage(txn(1, ins("t", id=1, region="eu")))


def test_the_first_matching_pattern_decides() -> None:
    stage = FilterRows(parse_filters({"db.t": "n = 1", "db.*": "n = 2"}))
    kept = stage(txn(1, ins("t", n=1), ins("t", n=2), ins("u", n=1), ins("u", n=2)))
    assert kept is not None
    assert [(c.table, c.row["n"]) for c in kept.changes] == [("t", 1), ("u", 2)]


def test_excluded_columns_leave_both_images() -> None:
    stage = ExcludeColumns({"db.t": ("Email", "phone")})
    kept = stage(
        txn(
            1,
            upd("t", {"id": 1, "email": "a@x", "n": 1}, id=1, email="b@x", n=2),
            ins("u", id=1, email="c@x"),
        )
    )
    assert kept is not None
    assert kept.changes[0] == RowChange("db", "t", Op.UPDATE, {"id": 1, "n": 1}, {"id": 1, "n": 2})
    assert kept.changes[1].row == {"id": 1, "email": "c@x"}


def test_the_filter_reads_a_column_that_is_then_excluded() -> None:
    channel = ChannelConfig(
        name="c",
        origin="dc2",
        remote=("http://x",),
        row_filters={"db.t": "region = 'eu'"},
        exclude_columns={"db.t": ("region",)},
    )
    stages, _ = channel_filters(channel, tombstones=False)
    kept = None
    for stage in stages:
        kept = stage(kept or txn(1, ins("t", id=1, region="eu"), ins("t", id=2, region="us")))
    assert kept is not None and [c.row for c in kept.changes] == [{"id": 1}]


def test_a_channel_without_them_has_no_row_stages() -> None:
    stages, _ = channel_filters(ChannelConfig(name="c", origin="d", remote=("http://x",)), False)
    assert not any(isinstance(s, FilterRows | ExcludeColumns) for s in stages)


def test_a_change_lacking_a_key_column_is_refused_naming_exclude_columns() -> None:
    table = TargetTable("db", "t", ("id", "v"), ("id",))
    with pytest.raises(MissingColumnError, match=r"'id'.*exclude_columns must not name a key"):
        Planner().add(RowChange("db", "t", Op.INSERT, None, {"v": 1}), table)


CONFIG = """\
[datacenter]
name = "dc1"

[source]
user = "drc"

[replicator]
buffer_dir = "{dir}"

[[channels]]
name = "from-dc2"
origin = "dc2"
remote = ["http://a"]
row_filters = {{ "shop.customers" = "{predicate}" }}
exclude_columns = {{ "shop.customers" = ["email"] }}
"""


def test_a_predicate_that_does_not_parse_is_a_config_problem_with_its_line() -> None:
    text = CONFIG.format(dir="/tmp/x", predicate="region = 'eu' AND")
    assert config_problems(text) == [
        "line 14: channels.0.row_filters: Value error, row_filters 'shop.customers': "
        "expected a column name, NOT or '(' at position 18, got the end"
    ]


def test_an_empty_exclude_list_is_a_config_problem() -> None:
    text = CONFIG.format(dir="/tmp/x", predicate="id > 0").replace('["email"]', "[]")
    assert "list the column names" in config_problems(text)[0]


def test_config_check_reports_columns_the_metastore_tables_lack(tmp_path: Path) -> None:
    columns = (
        Column("id", "int", False),
        Column("region", "varchar(2)", True),
        Column("email", "varchar(64)", True),
    )
    with MetaStore.open(tmp_path / DEFAULT_FILENAME) as store:
        store.record_schema(scn(10), TableSchema("shop", "customers", columns, ("id",)))
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(CONFIG.format(dir=tmp_path, predicate="region = 'eu'"))
    masked = 'mask_columns = { "shop.*" = { emial = "null" } }\n'
    text = CONFIG.format(dir=tmp_path, predicate="regoin = 'eu' OR id > 5")
    text = text.replace("[[channels]]", masked + "\n[[channels]]")
    bad.write_text(text.replace('["email"]', '["email", "phone"]'))
    runner = CliRunner()
    ok = runner.invoke(cli, ["config", "check", str(good)])
    assert ok.exit_code == 0, ok.output
    failed = runner.invoke(cli, ["config", "check", str(bad)])
    assert failed.exit_code == 1
    assert failed.output.splitlines() == [
        f"{bad}:16: channels.0.row_filters.shop.customers: names 'regoin', not a column of "
        "shop.customers (its columns: id, region, email)",
        f"{bad}:17: channels.0.exclude_columns.shop.customers: names 'phone', a column of none "
        "of the tables it selects (shop.customers)",
        f"{bad}:10: replicator.mask_columns.shop.*: names 'emial', a column of none of the "
        "tables it selects (shop.customers)",
    ]


def test_snapshot_and_verify_learn_which_tables_a_row_stage_selects() -> None:
    channel = ChannelConfig(
        name="c",
        origin="d",
        remote=("http://x",),
        row_filters={"shop.customers": "id > 0"},
        exclude_columns={"hr.*": ("salary",)},
    )
    assert channel.row_stage("shop", "customers") == "row_filters"
    assert channel.row_stage("hr", "people") == "exclude_columns"
    assert channel.row_stage("shop", "orders") is None


def test_drcs_own_rows_are_never_filtered_nor_narrowed() -> None:
    tombstone = RowChange("drc", "tomb_x", Op.INSERT, None, {"pk": "{}", "deleted_at": 1})
    assert FilterRows(parse_filters({"*.*": "id > 0"}))(txn(1, tombstone)) is not None
    narrowed = ExcludeColumns({"*.*": ("pk",)})(txn(1, tombstone))
    assert narrowed is not None and narrowed.changes[0] is tombstone


def test_rows_are_filtered_and_narrowed_before_the_hooks_and_the_renames() -> None:
    channel = ChannelConfig(
        name="c",
        origin="d",
        remote=("http://x",),
        row_filters={"db.t": "id > 0"},
        exclude_columns={"db.t": ("email",)},
        transforms={"db.t": "tests.integration.transforms:shout_and_audit"},
        map_columns={"db.t": {"v": "w"}},
    )
    stages, _ = channel_filters(channel, tombstones=False)
    names = [type(s).__name__ for s in stages]
    assert names[-4:] == ["FilterRows", "ExcludeColumns", "Transforms", "MapNames"]
