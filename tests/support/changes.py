"""Row changes of db.<table> built from row images, for the conflict and decision engine tests."""

from __future__ import annotations

from typing import Any

from drc.core.events import Op, RowChange


def insert(after: dict[str, Any], table: str = "t") -> RowChange:
    return RowChange("db", table, Op.INSERT, None, after)


def update(before: dict[str, Any], after: dict[str, Any], table: str = "t") -> RowChange:
    return RowChange("db", table, Op.UPDATE, before, after)


def delete(before: dict[str, Any], table: str = "t") -> RowChange:
    return RowChange("db", table, Op.DELETE, before, None)
