"""Tombstone tables and triggers (drc.apply.tombstones): names, types and SQL, without a server."""

from __future__ import annotations

import datetime as dt

import pytest

from drc.conflicts import tombstones
from drc.conflicts.tombstones import KeyColumn, StampType
from drc.core.markers import TOMBSTONE_PREFIX, is_tombstone_table

DATETIME3 = StampType.of("datetime", 3, "ts", "db.t")
TIMESTAMP6 = StampType.of("TIMESTAMP", 6, "ts", "db.t")
BIGINT = StampType.of("bigint", None, "ts", "db.t")


# ------------------------------------------------------------------ names


def test_a_tombstone_table_lives_in_the_drc_schema_under_the_tomb_prefix() -> None:
    name = tombstones.name("shop", "orders")
    assert name.startswith("tomb_") and name.endswith("_shop_orders")
    assert is_tombstone_table(tombstones.SCHEMA, name)
    assert tombstones.name("shop", "orders") == name  # stable: every side computes the same


def test_names_are_at_most_64_characters() -> None:
    name = tombstones.name("s" * 64, "t" * 64)
    assert len(name) == 64
    assert name.startswith(TOMBSTONE_PREFIX)


def test_names_that_join_alike_still_differ() -> None:
    assert tombstones.name("a_b", "c") != tombstones.name("a", "b_c")


def test_long_names_that_share_their_first_64_characters_still_differ() -> None:
    long = "x" * 60
    assert tombstones.name("db", long + "_one") != tombstones.name("db", long + "_two")


def test_trigger_names_are_per_table_and_fit_a_trigger_name() -> None:
    delete, insert, update = tombstones.trigger_names("shop", "orders")
    assert (delete[:9], insert[:8], update[:8]) == ("drc_tomb_", "drc_ins_", "drc_upd_")
    assert len({delete, insert, update}) == 3
    assert tombstones.trigger_names("shop", "items")[0] != delete
    assert all(len(n) <= 64 for n in tombstones.trigger_names("s" * 64, "t" * 64))


@pytest.mark.parametrize(
    ("schema", "table", "expected"),
    [
        ("drc", "tomb_abc_db_t", True),
        ("drc", "tomb_", True),
        ("drc", "checkpoint", False),
        ("drc", "conflicts", False),
        ("shop", "tomb_x", False),
        ("DRC", "tomb_x", False),  # names are case-sensitive, as MariaDB stores them on Linux
    ],
)
def test_is_tombstone_table(schema: str, table: str, expected: bool) -> None:
    assert is_tombstone_table(schema, table) is expected


# ------------------------------------------------------------------ StampType


def test_a_datetime_column_is_stamped_in_datetime6_with_its_own_step() -> None:
    assert DATETIME3.column_sql == "DATETIME(6) NULL"
    assert DATETIME3.now_sql == "NOW(6)"
    assert DATETIME3.step_sql == "+ INTERVAL 1000 MICROSECOND"


def test_a_timestamp_column_is_stamped_in_timestamp6() -> None:
    assert TIMESTAMP6.column_sql == "TIMESTAMP(6) NULL DEFAULT NULL"
    assert TIMESTAMP6.now_sql == "NOW(6)"
    assert TIMESTAMP6.step_sql == "+ INTERVAL 1 MICROSECOND"


def test_a_column_without_fractions_steps_by_a_second() -> None:
    assert StampType.of("DATETIME", 0, "ts", "db.t").step_sql == "+ INTERVAL 1000000 MICROSECOND"
    assert StampType.of("datetime", None, "ts", "db.t").step_sql == (
        "+ INTERVAL 1000000 MICROSECOND"
    )


def test_a_bigint_column_is_stamped_in_milliseconds() -> None:
    assert BIGINT.column_sql == "BIGINT NULL"
    assert BIGINT.now_sql == "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
    assert BIGINT.step_sql == "+ 1"
    assert BIGINT.integer
    assert not DATETIME3.integer and not TIMESTAMP6.integer


@pytest.mark.parametrize("data_type", ["varchar", "int", "date"])
def test_other_column_types_are_refused_saying_what_to_use(data_type: str) -> None:
    with pytest.raises(ValueError) as info:
        StampType.of(data_type, None, "updated", "shop.orders")
    message = str(info.value)
    assert "'updated'" in message and "shop.orders" in message and data_type in message
    assert "DATETIME(3..6)" in message and "BIGINT" in message


# ------------------------------------------------------------------ create_table


def test_the_tombstone_table_copies_the_key_and_indexes_the_time() -> None:
    key = [
        KeyColumn("id", "int(11)"),
        KeyColumn("code", "varchar(8) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"),
    ]
    text = tombstones.create_table("shop", "orders", key, DATETIME3)
    assert text.startswith(
        f"CREATE TABLE IF NOT EXISTS `drc`.`{tombstones.name('shop', 'orders')}` ("
    )
    assert "`id` int(11) NOT NULL, `code` varchar(8) CHARACTER SET utf8mb4 COLLATE " in text
    assert "`drc$schema` VARCHAR(64) NOT NULL" in text
    assert "`drc$table` VARCHAR(64) NOT NULL" in text
    assert "`drc$deleted_at` DATETIME(6) NULL" in text
    assert "`drc$origin` VARCHAR(64) NOT NULL" in text
    assert "PRIMARY KEY (`id`, `code`)" in text
    assert "KEY (`drc$deleted_at`)" in text
    assert "ENGINE=InnoDB" in text
    assert text.endswith("COMMENT='DRC tombstones (drc.apply.tombstones)'")


def test_the_tombstone_table_quotes_odd_names() -> None:
    text = tombstones.create_table("o'k", "a`b", [KeyColumn("i`d", "int")], BIGINT)
    assert f"`drc`.`{tombstones.name('o' + chr(39) + 'k', 'a`b').replace('`', '``')}`" in text
    assert "`i``d` int NOT NULL" in text
    assert "PRIMARY KEY (`i``d`)" in text
    assert text.endswith("COMMENT='DRC tombstones (drc.apply.tombstones)'")  # no name in it
    assert "`drc$deleted_at` BIGINT NULL" in text


def test_drop_table_names_the_companion() -> None:
    assert tombstones.drop_table("sh`op", "t") == (
        f"DROP TABLE IF EXISTS `drc`.`{tombstones.name('sh`op', 't').replace('`', '``')}`"
    )


# ------------------------------------------------------------------ create_triggers


def triggers(
    schema: str = "shop",
    table: str = "orders",
    stamp: StampType = DATETIME3,
    datacenter: str = "dc1",
) -> list[str]:
    return tombstones.create_triggers(
        schema, table, key=["id"], column="ts", stamp=stamp, datacenter=datacenter
    )


def test_three_triggers_after_delete_before_insert_before_update() -> None:
    delete, insert, update = triggers()
    names = tombstones.trigger_names("shop", "orders")
    assert delete.startswith(
        f"CREATE OR REPLACE TRIGGER `shop`.`{names[0]}` AFTER DELETE ON `shop`.`orders` "
        "FOR EACH ROW"
    )
    assert insert.startswith(
        f"CREATE OR REPLACE TRIGGER `shop`.`{names[1]}` BEFORE INSERT ON `shop`.`orders` "
    )
    assert update.startswith(
        f"CREATE OR REPLACE TRIGGER `shop`.`{names[2]}` BEFORE UPDATE ON `shop`.`orders` "
    )


def test_every_trigger_skips_drc_s_own_sessions() -> None:
    for text in triggers():
        assert "@drc_apply IS NULL" in text


def test_every_trigger_moves_time_by_the_column_s_step() -> None:
    for text in triggers():
        assert "+ INTERVAL 1000 MICROSECOND" in text
    for text in triggers(stamp=TIMESTAMP6):
        assert "+ INTERVAL 1 MICROSECOND" in text
    for text in triggers(stamp=BIGINT):
        assert "+ 1" in text and "INTERVAL" not in text


def test_the_delete_trigger_records_key_table_time_and_datacenter() -> None:
    delete = triggers()[0]
    companion = f"`drc`.`{tombstones.name('shop', 'orders')}`"
    assert (
        f"INSERT INTO {companion} (`id`, `drc$schema`, `drc$table`, `drc$deleted_at`, "
        f"`drc$origin`) VALUES (OLD.`id`, {hexed('shop')}, {hexed('orders')}, "
        f"GREATEST(NOW(6), OLD.`ts` + INTERVAL 1000 MICROSECOND), {hexed('dc1')})"
    ) in delete
    assert (
        "ON DUPLICATE KEY UPDATE `drc$schema` = VALUES(`drc$schema`), "
        "`drc$table` = VALUES(`drc$table`), `drc$deleted_at` = VALUES(`drc$deleted_at`), "
        "`drc$origin` = VALUES(`drc$origin`)"
    ) in delete


def test_the_insert_trigger_moves_a_reinserted_key_past_its_tombstone() -> None:
    insert = triggers()[1]
    assert "DECLARE deleted_at DATETIME(6) DEFAULT NULL" in insert
    companion = f"`drc`.`{tombstones.name('shop', 'orders')}`"
    assert (
        f"SET deleted_at = (SELECT `drc$deleted_at` FROM {companion} WHERE `id` = NEW.`id`)"
    ) in insert
    assert (
        "IF NEW.`ts` <= deleted_at THEN SET NEW.`ts` = deleted_at + INTERVAL 1000 MICROSECOND"
        in (insert)
    )
    assert "DECLARE deleted_at BIGINT DEFAULT NULL" in triggers(stamp=BIGINT)[1]


def test_the_update_trigger_never_lets_a_row_s_time_go_back() -> None:
    update = triggers()[2]
    assert "IF @drc_apply IS NULL AND NEW.`ts` < OLD.`ts` THEN" in update
    assert "SET NEW.`ts` = OLD.`ts` + INTERVAL 1000 MICROSECOND; END IF" in update


def test_the_triggers_name_only_the_key_and_the_time_column() -> None:
    # Other columns may be added or dropped without making the triggers fail.
    for text in triggers():
        assert "`v`" not in text


def test_a_composite_key_is_copied_and_matched_whole() -> None:
    delete, insert, _ = tombstones.create_triggers(
        "s", "t", key=["a", "b"], column="ts", stamp=DATETIME3, datacenter="dc1"
    )
    assert (
        "(`a`, `b`, `drc$schema`" in delete
        and f"VALUES (OLD.`a`, OLD.`b`, {hexed('s')}, {hexed('t')}" in delete
    )
    assert "WHERE `a` = NEW.`a` AND `b` = NEW.`b`)" in insert


def test_triggers_quote_identifiers_and_escape_literals() -> None:
    delete, insert, update = tombstones.create_triggers(
        "sh`op", "it's", key=["i`d"], column="t`s", stamp=DATETIME3, datacenter="dc-1"
    )
    names = tombstones.trigger_names("sh`op", "it's")
    assert f"TRIGGER `sh``op`.`{names[0].replace('`', '``')}` AFTER DELETE ON `sh``op`.`it's`" in (
        delete
    )
    assert "ON `sh``op`.`it's`" in insert and "ON `sh``op`.`it's`" in update
    companion = tombstones.name("sh`op", "it's").replace("`", "``")
    assert f"`drc`.`{companion}`" in delete and f"`drc`.`{companion}`" in insert
    assert "OLD.`i``d`" in delete and "`i``d` = NEW.`i``d`" in insert
    assert "NEW.`t``s` < OLD.`t``s`" in update
    schema_value, table_value = hexed("sh`op"), hexed("it's")
    assert f"{schema_value}, {table_value}" in delete  # values: hex literals
    assert f"{hexed('dc-1')})" in delete


@pytest.mark.parametrize("name", ["a\\b", "trailing\\", "x\\';CREATE DATABASE pwn;#", "--", "#"])
def test_no_name_can_end_a_literal_in_a_trigger(name: str) -> None:
    delete = tombstones.create_triggers(
        "s", name, key=["id"], column="ts", stamp=DATETIME3, datacenter="x"
    )[0]
    assert f"{hexed('s')}, {hexed(name)}," in delete
    assert name not in delete.replace(f"`{name}`", "").replace(tombstones.name("s", name), "")


def hexed(text: str) -> str:
    return "_utf8mb4 X'" + text.encode().hex() + "'"


# ------------------------------------------------------------------ lookup, upsert, purge


def test_lookup_locks_one_key_s_tombstone() -> None:
    statement = tombstones.lookup("shop", "orders", ["id"], [7], frozenset())
    assert statement.sql == (
        f"SELECT `drc$deleted_at`, `drc$origin` FROM `drc`.`{tombstones.name('shop', 'orders')}` "
        "WHERE `id` = %s FOR UPDATE"
    )
    assert statement.params == (7,)


def test_lookup_with_a_composite_key() -> None:
    statement = tombstones.lookup("shop", "orders", ["a", "b"], [1, "x"], frozenset())
    assert statement.sql.endswith("WHERE (`a` = %s AND `b` = %s) FOR UPDATE")
    assert statement.params == (1, "x")


def test_upsert_records_deletions_and_keeps_the_newer_time() -> None:
    when = dt.datetime(2026, 1, 1, 12, 0, 0, 5000)
    statement = tombstones.upsert(
        "shop", "orders", ["id"], [((1,), when, "dc2"), ((2,), when, "dc1")]
    )
    at, origin = "`drc$deleted_at`", "`drc$origin`"
    newer = f"VALUES({at}) > {at} OR {at} IS NULL"
    assert statement.sql == (
        f"INSERT INTO `drc`.`{tombstones.name('shop', 'orders')}` (`id`, `drc$schema`, "
        f"`drc$table`, {at}, {origin}) VALUES (%s, %s, %s, %s, %s), (%s, %s, %s, %s, %s) "
        f"ON DUPLICATE KEY UPDATE {origin} = IF({newer}, VALUES({origin}), {origin}), "
        f"{at} = IF({newer}, VALUES({at}), {at})"
    )
    assert statement.params == (1, "shop", "orders", when, "dc2", 2, "shop", "orders", when, "dc1")


def test_upsert_decides_the_origin_before_it_moves_the_time() -> None:
    # MariaDB assigns ON DUPLICATE KEY UPDATE columns left to right, each seeing the ones
    # before: the origin must be chosen while deleted_at still holds the old time.
    sql = tombstones.upsert("s", "t", ["id"], [((1,), 5, "dc1")]).sql
    update = sql.partition(" ON DUPLICATE KEY UPDATE ")[2]
    assert update.index("`drc$origin` = IF(") < update.index("`drc$deleted_at` = IF(")


def test_upsert_binds_an_aware_time_as_naive_utc() -> None:
    aware = dt.datetime(2026, 1, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    statement = tombstones.upsert("s", "t", ["a", "b"], [((1, "x"), aware, "dc1")])
    assert statement.params == (1, "x", "s", "t", dt.datetime(2026, 1, 1, 12, 0), "dc1")
    assert "(`a`, `b`, `drc$schema`" in statement.sql


def test_purge_deletes_in_batches_older_than_the_retention() -> None:
    statement = tombstones.purge("shop", "orders", DATETIME3, 7 * 24 * 3600)
    assert statement.sql == (
        f"DELETE FROM `drc`.`{tombstones.name('shop', 'orders')}` WHERE `drc$deleted_at` < "
        f"NOW(6) - INTERVAL %s SECOND LIMIT {tombstones.PURGE_BATCH}"
    )
    assert statement.params == (604800,)


def test_purge_of_millisecond_tombstones_compares_milliseconds() -> None:
    statement = tombstones.purge("shop", "orders", BIGINT, 60)
    assert "WHERE `drc$deleted_at` < (UNIX_TIMESTAMP(NOW(3)) - %s) * 1000 LIMIT 5000" in (
        statement.sql
    )
    assert statement.params == (60,)
