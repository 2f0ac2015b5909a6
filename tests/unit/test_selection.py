"""The one DDL selection rule shared by capture, the pull API and apply."""

from __future__ import annotations

import pytest

from drc.core.events import SchemaChange
from drc.core.selection import selects_ddl
from drc.core.tablefilter import TableFilter

SHOP = TableFilter.build(["shop.*"])
EVERYTHING = TableFilter()


@pytest.mark.parametrize(
    ("session", "statement", "selected"),
    [
        ("shop", "ALTER TABLE t ADD c INT", True),
        ("other", "ALTER TABLE shop.t ADD c INT", True),
        ("shop", "ALTER TABLE other.t ADD c INT", False),
        ("other", "RENAME TABLE other.a TO shop.a", True),
        ("shop", "CREATE DATABASE shop2", True),  # names no table: the session's database
        ("other", "CREATE DATABASE shop2", False),
        ("other", "DROP DATABASE shop", True),  # the database dropped, not the session's
        ("shop", "DROP SCHEMA IF EXISTS other", False),
        ("other", "CREATE VIEW shop.v AS SELECT 1", True),
        ("shop", "CREATE VIEW other.v AS SELECT 1", False),
    ],
)
def test_a_statement_is_selected_by_what_it_names(
    session: str, statement: str, selected: bool
) -> None:
    assert selects_ddl(SHOP, SchemaChange(session, statement)) is selected


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE DATABASE drc",
        "DROP DATABASE drc",
        "ALTER TABLE drc.checkpoint ADD x INT",
        "CREATE VIEW drc.v AS SELECT 1",
    ],
)
def test_apply_never_selects_drcs_own_objects(statement: str) -> None:
    change = SchemaChange("drc", statement)
    assert selects_ddl(EVERYTHING, change)
    assert not selects_ddl(EVERYTHING, change, own_schema=False)
