"""drc.mysql.sql.literal without a session (text stored for later) and sql.account."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from drc.mysql.sql import account, literal


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (7, "7"), (None, "NULL"), (Decimal("-0.50"), "-0.50"),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 6), "'2024-01-02 03:04:05.000006'"),
        ("it's;\\", "_utf8mb4 X'697427733b5c'"), ("", "_utf8mb4 X''"),
    ],
)  # fmt: skip
def test_without_a_session_only_what_reads_the_same_under_any_sql_mode(
    value: object, text: str
) -> None:
    assert literal(value) == text


@pytest.mark.parametrize("value", [b"\x00", 1.5, Decimal("NaN"), dt.date(2024, 1, 2)])
def test_without_a_session_other_values_have_no_literal(value: object) -> None:
    with pytest.raises(TypeError):
        literal(value)


def test_an_account_is_two_quoted_names() -> None:
    assert account("o`brien", "%") == "`o``brien`@`%`"
