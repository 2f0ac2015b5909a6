"""Events and value types: the invariants their constructors keep."""

from __future__ import annotations

import dataclasses

import pytest

from drc.core.events import Column, Op, RowChange, SchemaChange, TableSchema, Transaction
from drc.core.scn import SCN
from drc.core.values import Bit, ZeroDate


def test_each_op_carries_exactly_its_images() -> None:
    assert RowChange("s", "t", Op.INSERT, None, {"id": 1}).row == {"id": 1}
    assert RowChange("s", "t", Op.UPDATE, {"id": 1}, {"id": 2}).row == {"id": 2}
    assert RowChange("s", "t", Op.DELETE, {"id": 1}, None).row == {"id": 1}


@pytest.mark.parametrize(
    ("op", "before", "after", "message"),
    [
        (Op.INSERT, {"id": 1}, {"id": 1}, "insert on s.t needs after image, got before and after"),
        (Op.INSERT, None, None, "insert on s.t needs after image, got no image"),
        (Op.UPDATE, None, {"id": 1}, "update on s.t needs before and after images, got after"),
        (Op.UPDATE, {"id": 1}, None, "needs before and after images, got before image"),
        (Op.DELETE, None, {"id": 1}, "delete on s.t needs before image, got after image"),
    ],
)
def test_row_change_with_wrong_images_is_refused(
    op: Op, before: dict[str, int] | None, after: dict[str, int] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        RowChange("s", "t", op, before, after)


def test_op_text_is_accepted_and_unknown_text_refused() -> None:
    assert RowChange("s", "t", "delete", {"id": 1}, None).op is Op.DELETE  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'upsert'"):
        RowChange("s", "t", "upsert", None, {"id": 1})  # type: ignore[arg-type]


def test_table_schema_lists_columns_in_order_and_checks_the_key() -> None:
    cols = (Column("id", "bigint unsigned", False), Column("name", "varchar(20)", True, "utf8mb4"))
    schema = TableSchema("shop", "users", cols, ("id",))
    assert schema.column_names == ("id", "name")
    with pytest.raises(
        ValueError, match=r"primary key of shop.users names unknown columns \['nope'\]"
    ):
        TableSchema("shop", "users", cols, ("id", "nope"))
    with pytest.raises(ValueError, match=r"duplicate columns \['id'\]"):
        TableSchema("shop", "users", (*cols, Column("id", "int", False)), ("id",))
    assert TableSchema("shop", "log", cols, ()).primary_key == ()


def test_transaction_lists_the_tables_it_touches() -> None:
    changes = (
        RowChange("a", "t1", Op.INSERT, None, {"id": 1}),
        RowChange("a", "t1", Op.DELETE, {"id": 2}, None),
        RowChange("b", "t1", Op.INSERT, None, {"id": 1}),
    )
    txn = Transaction(SCN(1, 1, 1, 4), 1, "uuid:5", 100, changes, (SchemaChange("a", "DROP x"),))
    assert txn.tables() == {("a", "t1"), ("b", "t1")}
    assert txn.fragment == 0 and txn.last_fragment and not txn.drc_originated
    with pytest.raises(dataclasses.FrozenInstanceError):
        txn.timestamp = 5  # type: ignore[misc]


def test_transaction_refuses_bad_fields() -> None:
    with pytest.raises(TypeError, match="must be an SCN"):
        Transaction("1:1:1:4", 1, None, 0, ())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be tuples"):
        Transaction(SCN(1, 1, 1, 4), 1, None, 0, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fragment"):
        Transaction(SCN(1, 1, 1, 4), 1, None, 0, (), fragment=-1)


@pytest.mark.parametrize(
    "text",
    ["0000-00-00", "0000-00-00 00:00:00", "0000-00-00 00:00:00.000000", "2020-00-15", "2021-02-30"],
)
def test_zero_date_keeps_text_python_cannot_hold(text: str) -> None:
    assert ZeroDate(text).text == text == str(ZeroDate(text))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2020-01-15", "is a valid date"),
        ("2020-01-15 10:00:00", "is a valid date"),
        ("0000-00-00T00:00:00", "is not 'YYYY-MM-DD'"),
        ("00-00-00", "is not 'YYYY-MM-DD'"),
        ("0000-00-00 00:00:00.1234567", "is not 'YYYY-MM-DD'"),
    ],
)
def test_zero_date_refuses_valid_or_malformed_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ZeroDate(text)


@pytest.mark.parametrize(
    ("value", "width", "message"),
    [
        (2, 1, r"does not fit BIT\(1\): must be an int in 0..1"),
        (-1, 8, "does not fit"),
        (True, 1, "does not fit"),
        (0, 0, "width must be an int in 1..64"),
        (0, 65, "width must be an int in 1..64"),
    ],
)
def test_bit_refuses_values_that_do_not_fit(value: int, width: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Bit(value, width)


def test_bit_width_is_part_of_the_value() -> None:
    assert Bit(1, 1) != Bit(1, 8)
    assert Bit(2**64 - 1, 64).value == 2**64 - 1
