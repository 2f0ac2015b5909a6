"""The [conflicts] section of a datacenter config (drc.config), loaded from TOML files."""

from __future__ import annotations

from pathlib import Path

import pytest

from drc.config import DrcConfig, load_config
from drc.conflicts.policies import POLICIES
from drc.core.errors import ConfigError
from tests.support.config import BASE as MINIMAL

BASE = (
    MINIMAL
    + """
[[channels]]
name = "from-dc2"
origin = "dc2"
remote = ["http://dc2:8640"]
"""
)

LWW_TABLE = """
[[conflicts.tables]]
table = "shop.orders"
policy = "lww"
column = "updated_at"
"""


def load(tmp_path: Path, conflicts: str, base: str = BASE) -> DrcConfig:
    path = tmp_path / "dc.toml"
    path.write_text(base + conflicts)
    return load_config(path)


def refused(tmp_path: Path, conflicts: str, base: str = BASE) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, conflicts, base)
    message = str(info.value)
    assert "s3cret-value" not in message
    return message


def table(body: str) -> str:
    return "[[conflicts.tables]]\n" + body


# ------------------------------------------------------------------ a valid section


def test_a_complete_conflicts_section_loads(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
[conflicts]
priority = ["dc1", "dc2"]
tombstone_retention_hours = 24
"""
        + LWW_TABLE
        + table('table = "shop.tmp_*"\npolicy = "off"\n')
        + table('table = "shop.carts"\npolicy = "resolver"\nresolver = "my_pkg.rules:merge"\n')
        + table(
            'table = "shop.notes"\npolicy = "resolver"\nresolver = "rules:newest"\n'
            'column = "updated_at"\n'
        )
        + table('table = "shop.*"\npolicy = "overwrite"\n')
        + table('table = "ref.*"\npolicy = "keep"\n'),
    )
    conflicts = config.conflicts
    assert conflicts.priority == ("dc1", "dc2")
    assert conflicts.tombstone_retention_hours == 24
    assert [(t.table, t.policy) for t in conflicts.tables] == [
        ("shop.orders", "lww"),
        ("shop.tmp_*", "off"),
        ("shop.carts", "resolver"),
        ("shop.notes", "resolver"),
        ("shop.*", "overwrite"),
        ("ref.*", "keep"),
    ]
    assert conflicts.tables[0].column == "updated_at"
    assert conflicts.tables[2].resolver == "my_pkg.rules:merge"
    assert conflicts.tables[3].column == "updated_at"
    assert conflicts.active


def test_without_a_conflicts_section_nothing_is_resolved(tmp_path: Path) -> None:
    conflicts = load(tmp_path, "").conflicts
    assert conflicts.tables == () and conflicts.priority == ()
    assert conflicts.tombstone_retention_hours == 168
    assert not conflicts.active


def test_only_off_entries_are_not_active(tmp_path: Path) -> None:
    conflicts = load(tmp_path, table('table = "shop.*"\npolicy = "off"\n')).conflicts
    assert not conflicts.active


# ------------------------------------------------------------------ table entries


def test_lww_without_its_column_is_refused(tmp_path: Path) -> None:
    message = refused(
        tmp_path,
        '[conflicts]\npriority = ["dc1", "dc2"]\n'
        + table('table = "shop.orders"\npolicy = "lww"\n'),
    )
    assert "conflicts.tables.0" in message
    assert "shop.orders: policy lww needs column" in message


def test_resolver_without_its_function_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, table('table = "shop.carts"\npolicy = "resolver"\n'))
    assert "conflicts.tables.0" in message
    assert "shop.carts: policy resolver needs resolver = 'module:function'" in message


@pytest.mark.parametrize("policy", ["overwrite", "keep", "off"])
def test_a_column_on_a_policy_that_ignores_it_is_refused(tmp_path: Path, policy: str) -> None:
    message = refused(
        tmp_path, table(f'table = "shop.t"\npolicy = "{policy}"\ncolumn = "updated_at"\n')
    )
    assert "conflicts.tables.0" in message
    # "lww and resolver" today: every policy that takes a column, as declared.
    named = message.split("column is only used by policies ")[1].splitlines()[0]
    taking = [name for name, p in POLICIES.items() if p.column != "unused"]
    assert named.replace(" and ", ", ").split(", ") == taking


def test_a_resolver_on_another_policy_is_refused(tmp_path: Path) -> None:
    message = refused(
        tmp_path,
        '[conflicts]\npriority = ["dc1", "dc2"]\n'
        + table('table = "shop.t"\npolicy = "lww"\ncolumn = "ts"\nresolver = "m:f"\n'),
    )
    assert "conflicts.tables.0" in message
    assert "resolver is only used by policy resolver" in message


@pytest.mark.parametrize(
    "spec", ["merge", "rules.merge", "rules:", ":merge", "rules:merge()", "1rules:merge", "a b:c"]
)
def test_a_resolver_that_is_not_module_colon_function_is_refused(tmp_path: Path, spec: str) -> None:
    message = refused(
        tmp_path, table(f'table = "shop.t"\npolicy = "resolver"\nresolver = "{spec}"\n')
    )
    assert "conflicts.tables.0.resolver" in message
    assert "should match pattern" in message


def test_an_unknown_policy_is_refused_with_the_allowed_ones(tmp_path: Path) -> None:
    message = refused(tmp_path, table('table = "shop.t"\npolicy = "newest"\n'))
    assert "conflicts.tables.0.policy" in message
    for name in ("lww", "resolver", "overwrite", "keep", "off"):
        assert name in message


def test_a_bad_table_pattern_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, table('table = "orders"\npolicy = "overwrite"\n'))
    assert "conflicts.tables.0" in message and "db.table" in message


def test_an_empty_column_is_refused(tmp_path: Path) -> None:
    message = refused(
        tmp_path,
        '[conflicts]\npriority = ["dc1", "dc2"]\n'
        + table('table = "shop.t"\npolicy = "lww"\ncolumn = ""\n'),
    )
    assert "conflicts.tables.0.column" in message


def test_an_unknown_key_in_a_table_entry_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, table('table = "shop.t"\npolicy = "keep"\ncolum = "ts"\n'))
    assert "conflicts.tables.0.colum" in message


def test_the_entry_at_fault_is_numbered(tmp_path: Path) -> None:
    message = refused(
        tmp_path,
        table('table = "shop.a"\npolicy = "keep"\n')
        + table('table = "shop.b"\npolicy = "resolver"\n'),
    )
    assert "conflicts.tables.1" in message and "shop.b" in message


@pytest.mark.parametrize("hours", ["0", "-1"])
def test_the_tombstone_retention_must_be_positive(tmp_path: Path, hours: str) -> None:
    message = refused(tmp_path, f"[conflicts]\ntombstone_retention_hours = {hours}\n")
    assert "conflicts.tombstone_retention_hours" in message


def test_an_unknown_key_in_the_section_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, '[conflicts]\npriorities = ["dc1"]\n')
    assert "conflicts.priorities" in message


# ------------------------------------------------------------------ priority


def test_lww_needs_this_datacenter_in_the_priority(tmp_path: Path) -> None:
    message = refused(tmp_path, '[conflicts]\npriority = ["dc2"]\n' + LWW_TABLE)
    assert "conflicts.priority must list every datacenter once" in message
    assert "missing ['dc1']" in message


def test_lww_needs_every_channel_origin_in_the_priority(tmp_path: Path) -> None:
    base = BASE + '[[channels]]\nname = "from-dc3"\norigin = "dc3"\nremote = ["http://dc3:1"]\n'
    message = refused(tmp_path, '[conflicts]\npriority = ["dc1", "dc2"]\n' + LWW_TABLE, base)
    assert "conflicts.priority" in message and "missing ['dc3']" in message


def test_lww_without_any_priority_names_every_datacenter_missing(tmp_path: Path) -> None:
    message = refused(tmp_path, LWW_TABLE)
    assert "conflicts.priority" in message and "missing ['dc1', 'dc2']" in message


def test_a_datacenter_listed_twice_in_the_priority_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, '[conflicts]\npriority = ["dc1", "dc2", "dc1"]\n' + LWW_TABLE)
    assert "conflicts.priority must list every datacenter once" in message
    assert "got ['dc1', 'dc2', 'dc1']" in message


def test_the_priority_may_name_datacenters_this_one_has_no_channel_from(
    tmp_path: Path,
) -> None:
    config = load(tmp_path, '[conflicts]\npriority = ["dc3", "dc1", "dc2"]\n' + LWW_TABLE)
    assert config.conflicts.priority == ("dc3", "dc1", "dc2")


def test_policies_other_than_lww_need_no_priority(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        table('table = "shop.a"\npolicy = "overwrite"\n')
        + table('table = "shop.b"\npolicy = "resolver"\nresolver = "m:f"\ncolumn = "ts"\n')
        + table('table = "shop.c"\npolicy = "keep"\n'),
    )
    assert config.conflicts.priority == ()


def test_off_entries_need_no_priority(tmp_path: Path) -> None:
    config = load(tmp_path, table('table = "shop.a"\npolicy = "off"\n'))
    assert config.conflicts.active is False
