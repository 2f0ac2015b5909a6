"""Shadow tables, triggers and cut-overs of pt-online-schema-change and gh-ost, by name."""

from __future__ import annotations

import pytest

from drc.core.events import SchemaChange
from drc.core.online_schema_change import (
    CHANGELOG,
    GH_OST,
    NEW,
    OLD,
    PT_OSC,
    CutOver,
    Shadow,
    ToolTrigger,
    cut_over,
    missing_shadow_hint,
    shadow_table,
    tool_trigger,
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("_t_new", Shadow(PT_OSC, NEW, "t")),
        ("_t_old", Shadow(PT_OSC, OLD, "t")),
        ("__t_new", Shadow(PT_OSC, NEW, "t")),  # "_t_new" was taken
        ("_order_lines_new", Shadow(PT_OSC, NEW, "order_lines")),
        ("_t_gho", Shadow(GH_OST, NEW, "t")),
        ("_t_ghc", Shadow(GH_OST, CHANGELOG, "t")),
        ("_t_del", Shadow(GH_OST, OLD, "t")),
        ("_t_20261127153000_del", Shadow(GH_OST, OLD, "t")),  # --timestamp-old-table
        ("_my_t_gho", Shadow(GH_OST, NEW, "my_t")),
        ("t", None),
        ("t_new", None),
        ("_new", None),
        ("_t_newer", None),
        ("__t_gho", Shadow(GH_OST, NEW, "_t")),  # gh-ost adds no second "_": table "_t"
    ],
)
def test_shadow_tables_are_known_by_their_names(name: str, expected: Shadow | None) -> None:
    assert shadow_table(name) == expected


@pytest.mark.parametrize(
    ("schema", "name", "expected"),
    [
        ("db", "pt_osc_db_t_ins", ToolTrigger(PT_OSC, "t", "INSERT")),
        ("db", "pt_osc_db_t_upd", ToolTrigger(PT_OSC, "t", "UPDATE")),
        ("db", "pt_osc_db_order_lines_del", ToolTrigger(PT_OSC, "order_lines", "DELETE")),
        ("my_db", "pt_osc_my_db_t_ins", ToolTrigger(PT_OSC, "t", "INSERT")),
        ("other", "pt_osc_db_t_ins", None),  # another database's
        ("db", "pt_osc_db__ins", None),
        ("db", "pt_osc_db_t_insert", None),
        ("db", "audit_t_ins", None),
    ],
)
def test_pt_osc_triggers_are_known_by_their_names(
    schema: str, name: str, expected: ToolTrigger | None
) -> None:
    assert tool_trigger(schema, name) == expected


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        (
            "RENAME TABLE `db`.`t` TO `db`.`_t_old`, `db`.`_t_new` TO `db`.`t`",
            CutOver(PT_OSC, "db", "t", "_t_new", "_t_old"),
        ),
        (
            "RENAME TABLE t TO __t_old, __t_new TO t",
            CutOver(PT_OSC, "db", "t", "__t_new", "__t_old"),
        ),
        (
            "rename table `db`.`t` to `db`.`_t_del`, `db`.`_t_gho` to `db`.`t`",
            CutOver(GH_OST, "db", "t", "_t_gho", "_t_del"),
        ),
        ("RENAME TABLE t TO _t_old", None),  # not a swap
        ("RENAME TABLE t TO _t_old, _u_new TO t", None),  # another table's shadow
        ("RENAME TABLE t TO _t_del, _t_new TO t", None),  # two tools' names
        ("RENAME TABLE t TO _t_new, _t_old TO t", None),  # the roles reversed
        ("RENAME TABLE db.t TO other._t_old, db._t_new TO db.t", None),  # across databases
        ("RENAME TABLE a TO b, c TO d", None),
        ("ALTER TABLE _t_new ADD COLUMN c INT", None),
    ],
)
def test_a_cut_over_swaps_a_table_with_its_own_shadow(
    statement: str, expected: CutOver | None
) -> None:
    assert cut_over(SchemaChange("db", statement)) == expected


def test_a_missing_shadow_table_is_explained() -> None:
    hint = missing_shadow_hint("_t_new")
    assert "pt-online-schema-change's shadow table of t" in hint
    assert "Online schema change tools" in hint
    assert missing_shadow_hint("_t_gho").startswith("; _t_gho looks like gh-ost's")
    assert missing_shadow_hint("orders") == ""
