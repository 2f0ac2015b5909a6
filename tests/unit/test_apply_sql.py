"""SQL building: quoting, parameters never inlined, value adaptation for every value type."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from drc.core.values import Bit, ZeroDate
from drc.mysql import sql


def test_identifiers_are_backtick_quoted_with_backticks_doubled() -> None:
    assert sql.quote("plain") == "`plain`"
    assert sql.quote("we`ird") == "`we``ird`"
    assert sql.quote("``") == "``````"
    assert sql.table_name("my db", "t`1") == "`my db`.`t``1`"


def test_percent_in_names_is_doubled_only_where_parameters_are_bound() -> None:
    assert sql.ident("50%") == "`50%%`"
    assert sql.quote("50%") == "`50%`"  # DDL runs without parameters: no %-formatting
    statement = sql.upsert("d", "t", ["50%"], [[1]])
    assert statement.sql % tuple("?" * len(statement.params)) == (
        "INSERT INTO `d`.`t` (`50%`) VALUES (?) ON DUPLICATE KEY UPDATE `50%` = VALUES(`50%`)"
    )


def test_upsert_binds_every_value_and_updates_every_column() -> None:
    statement = sql.upsert("db", "t", ["id", "v"], [(1, "a'); DROP TABLE t; --"), (2, None)])
    assert statement.sql == (
        "INSERT INTO `db`.`t` (`id`, `v`) VALUES (%s, %s), (%s, %s) "
        "ON DUPLICATE KEY UPDATE `id` = VALUES(`id`), `v` = VALUES(`v`)"
    )
    assert statement.params == (1, "a'); DROP TABLE t; --", 2, None)
    assert "DROP" not in statement.sql


def test_update_and_delete_by_single_key() -> None:
    where = sql.by_keys(["id"], [(7,)], frozenset())
    update = sql.update("db", "t", ["id", "v"], [7, "x"], where)
    assert update.sql == "UPDATE `db`.`t` SET `id` = %s, `v` = %s WHERE `id` = %s"
    assert update.params == (7, "x", 7)
    delete = sql.delete("db", "t", sql.by_keys(["id"], [(1,), (2,), (3,)], frozenset()))
    assert delete.sql == "DELETE FROM `db`.`t` WHERE `id` IN (%s, %s, %s)"
    assert delete.params == (1, 2, 3)


def test_composite_keys_match_column_by_column() -> None:
    where = sql.by_keys(["a", "b`"], [(1, "x"), (2, "y")], frozenset())
    assert where.sql == "(`a` = %s AND `b``` = %s) OR (`a` = %s AND `b``` = %s)"
    assert where.params == (1, "x", 2, "y")


def test_whole_row_match_is_null_safe_and_limited_to_one_row() -> None:
    where = sql.by_whole_row(["a", "b"], [None, 2], frozenset())
    assert where.sql == "`a` <=> %s AND `b` <=> %s LIMIT 1"
    assert where.params == (None, 2)
    statement = sql.delete("db", "n", where)
    assert statement.sql == "DELETE FROM `db`.`n` WHERE `a` <=> %s AND `b` <=> %s LIMIT 1"


def test_plain_insert_lists_every_row() -> None:
    statement = sql.insert("db", "n", ["a", "b"], [[1, None], [1, None]])
    assert statement.sql == "INSERT INTO `db`.`n` (`a`, `b`) VALUES (%s, %s), (%s, %s)"
    assert statement.params == (1, None, 1, None)


@pytest.mark.parametrize(
    ("value", "bound"),
    [
        (None, None),
        (0, 0),
        (2**64 - 1, 2**64 - 1),
        (-(2**63), -(2**63)),
        (True, True),
        (1.5, 1.5),
        (-0.0, -0.0),
        ("héllo 🎉", "héllo 🎉"),
        (b"\x00\xff", b"\x00\xff"),
        (Decimal("-0.00"), Decimal("-0.00")),
        (Decimal("12345678901234567890.123456789"), Decimal("12345678901234567890.123456789")),
        (dt.date(2024, 2, 29), dt.date(2024, 2, 29)),
        (dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(2024, 1, 2, 3, 4, 5, 6)),
        (dt.timedelta(hours=-838, minutes=-59), dt.timedelta(hours=-838, minutes=-59)),
        (ZeroDate("0000-00-00"), "0000-00-00"),
        (ZeroDate("2020-00-15 10:00:00.000000"), "2020-00-15 10:00:00.000000"),
        (Bit(5, 3), 5),
        (Bit(2**64 - 1, 64), 2**64 - 1),
        (frozenset(), ""),
        (frozenset({"b", "a"}), "a,b"),
        ({"k": [1, "é"]}, '{"k":[1,"é"]}'),
        ([1, None], "[1,null]"),
        (bytearray(b"ab"), b"ab"),
    ],
)
def test_values_are_adapted_for_pymysql(value: object, bound: object) -> None:
    adapted = sql.adapt(value)
    assert adapted == bound and type(adapted) is type(bound)


def test_aware_datetime_becomes_naive_utc() -> None:
    aware = dt.datetime(2024, 1, 2, 5, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert sql.adapt(aware) == dt.datetime(2024, 1, 2, 3, 0)


def test_json_text_round_trips() -> None:
    document = {"a": {"b": [1, 2.5, None, True]}}
    assert json.loads(sql.adapt(document)) == document


def test_statement_params_are_adapted() -> None:
    statement = sql.upsert(
        "d", "t", ["s", "b", "z"], [(frozenset({"x"}), Bit(1, 1), ZeroDate("0000-00-00"))]
    )
    assert statement.params == ("x", 1, "0000-00-00")


def test_float_columns_are_matched_by_their_single_precision_value() -> None:
    # 1.1 names the FLOAT 1.1f, whose double (what the server compares) is 1.100000023841858.
    values = sql.row_values(["F", "d", "s"], [1.1, 1.1, "x"], frozenset({"f"}))
    assert values == (1.100000023841858, 1.1, "x")
    assert sql.row_values(["f"], [None], frozenset({"f"})) == (None,)
