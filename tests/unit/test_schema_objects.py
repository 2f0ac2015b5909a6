"""Views, routines, triggers and events: what a statement names, and the apply-side rewrites.

The statements are what MariaDB 10.11 writes to the binlog (see drc.core.schema_objects)."""

from __future__ import annotations

import pytest

from drc.core import schema_objects as so


@pytest.mark.parametrize(
    ("statement", "kind", "action", "schema", "name"),
    [
        ("CREATE DEFINER=`root`@`localhost` FUNCTION `d2`.`f`(x INT) RETURNS int(11)\n"
         "    DETERMINISTIC\nRETURN x + 1", "function", "create", "d2", "f"),
        ("CREATE DEFINER=`root`@`localhost` PROCEDURE `p`(IN a INT)\nBEGIN SELECT a; END",
         "procedure", "create", "d1", "p"),
        ("CREATE ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` "
         "AS SELECT id FROM t", "view", "create", "d1", "v"),
        ("ALTER ALGORITHM=UNDEFINED DEFINER=`root`@`localhost` SQL SECURITY DEFINER VIEW `v` "
         "AS SELECT id, v FROM t", "view", "alter", "d1", "v"),
        ("CREATE DEFINER=`root`@`localhost` EVENT e ON SCHEDULE EVERY 1 HOUR DO DELETE FROM a",
         "event", "create", "d1", "e"),
        ("ALTER FUNCTION d2.f COMMENT 'x'", "function", "alter", "d2", "f"),
        ("ALTER EVENT e DISABLE", "event", "alter", "d1", "e"),
        ("DROP TRIGGER IF EXISTS `x`.`trg`", "trigger", "drop", "x", "trg"),
        ("DROP EVENT IF EXISTS e", "event", "drop", "d1", "e"),
        ("DROP VIEW v", "view", "drop", "d1", "v"),
        ("CREATE OR REPLACE AGGREGATE FUNCTION IF NOT EXISTS agg() RETURNS INT BEGIN END",
         "function", "create", "d1", "agg"),
        ("/*!50001 CREATE ALGORITHM=UNDEFINED */ /*!50013 DEFINER=`u`@`%` SQL SECURITY DEFINER "
         "*/ /*!50001 VIEW `s`.`v` AS select 1 */", "view", "create", "s", "v"),
    ],
)  # fmt: skip
def test_names_the_object(statement: str, kind: str, action: str, schema: str, name: str) -> None:
    found = so.parse(statement, "d1")
    assert found is not None
    assert (found.kind, found.action, found.schema, found.name) == (kind, action, schema, name)


@pytest.mark.parametrize(
    "statement",
    ["CREATE TABLE t (a INT)", "CREATE OR REPLACE TABLE t (a INT)", "DROP TABLE v",
     "CREATE DATABASE d", "GRANT ALL ON *.* TO x", "ALTER TABLE t ADD b INT", "",
     "CREATE PACKAGE p AS END", "CREATE VIEW `unterminated"],
)  # fmt: skip
def test_other_statements_are_not_objects(statement: str) -> None:
    assert so.parse(statement, "d1") is None


TRIGGER = (
    "CREATE DEFINER=`root`@`localhost` TRIGGER trg AFTER INSERT ON `t` FOR EACH ROW "
    "BEGIN INSERT INTO audit (tid) VALUES (NEW.id); END"
)


def test_trigger_names_its_table_and_definer() -> None:
    found = so.parse(TRIGGER, "d1")
    assert found is not None
    assert (found.kind, found.schema, found.name, found.table) == ("trigger", "d1", "trg", "t")
    assert found.definer == ("root", "localhost")


def test_trigger_body_is_guarded_once() -> None:
    found = so.parse(TRIGGER, "d1")
    assert found is not None
    guarded = so.guard_trigger(TRIGGER, found)
    assert guarded == (
        "CREATE DEFINER=`root`@`localhost` TRIGGER trg AFTER INSERT ON `t` FOR EACH ROW "
        "IF @drc_apply IS NULL THEN BEGIN INSERT INTO audit (tid) VALUES (NEW.id); END; END IF"
    )
    again = so.parse(guarded, "d1")
    assert again is not None and so.is_guarded(guarded, again)
    assert so.guard_trigger(guarded, again) == guarded


def test_trigger_with_follows_and_single_statement_body() -> None:
    statement = "CREATE TRIGGER d.t2 BEFORE UPDATE ON d.t FOR EACH ROW FOLLOWS t1 SET NEW.v = 1;"
    found = so.parse(statement, "x")
    assert found is not None and found.table == "t" and found.schema == "d"
    assert so.guard_trigger(statement, found).endswith(
        "FOLLOWS t1 IF @drc_apply IS NULL THEN SET NEW.v = 1; END IF"
    )


def test_definer_is_rewritten_in_place() -> None:
    found = so.parse(TRIGGER, "d1")
    assert found is not None
    assert so.with_definer(TRIGGER, found, "`drc_objects`@`%`").startswith(
        "CREATE DEFINER=`drc_objects`@`%` TRIGGER trg AFTER"
    )


def test_event_body_start_is_its_do() -> None:
    statement = "CREATE EVENT e ON SCHEDULE EVERY 1 DAY COMMENT 'do it' DO SELECT 1"
    found = so.parse(statement, "d")
    assert found is not None and found.body_start is not None
    assert statement[found.body_start :] == "DO SELECT 1"


@pytest.mark.parametrize(
    ("account", "split"),
    [("app@%", ("app", "%")), ("app", ("app", "%")), ("a@b@10.0.0.1", ("a@b", "10.0.0.1"))],
)
def test_accounts(account: str, split: tuple[str, str]) -> None:
    assert so.split_account(account) == split


@pytest.mark.parametrize(
    ("statement", "replica"),
    [
        ("CREATE DEFINER=`root`@`localhost` EVENT e ON SCHEDULE EVERY 1 HOUR DO DELETE FROM a",
         "CREATE DEFINER=`root`@`localhost` EVENT e ON SCHEDULE EVERY 1 HOUR DISABLE ON SLAVE "
         "DO DELETE FROM a"),
        ("CREATE EVENT e ON SCHEDULE EVERY 1 HOUR ENABLE COMMENT 'c' DO SELECT 1",
         "CREATE EVENT e ON SCHEDULE EVERY 1 HOUR DISABLE ON SLAVE COMMENT 'c' DO SELECT 1"),
        ("CREATE EVENT `d`.`e` ON SCHEDULE AT '2030-01-01' ON COMPLETION PRESERVE "
         "COMMENT 'do not ENABLE' DO UPDATE t SET enable = 1",
         "CREATE EVENT `d`.`e` ON SCHEDULE AT '2030-01-01' ON COMPLETION PRESERVE "
         "DISABLE ON SLAVE COMMENT 'do not ENABLE' DO UPDATE t SET enable = 1"),
        ("ALTER EVENT e ENABLE", "ALTER EVENT e DISABLE ON SLAVE"),
        ("ALTER EVENT e ON SCHEDULE EVERY 2 HOUR ENABLE DO SELECT 1",
         "ALTER EVENT e ON SCHEDULE EVERY 2 HOUR DISABLE ON SLAVE DO SELECT 1"),
        # No status, DISABLE, DISABLE ON SLAVE, ENABLE only in the body: as written.
        ("ALTER EVENT e ON SCHEDULE EVERY 2 HOUR", None),
        ("CREATE EVENT e ON SCHEDULE EVERY 1 HOUR DISABLE DO SELECT 1", None),
        ("CREATE EVENT e ON SCHEDULE EVERY 1 HOUR DISABLE ON SLAVE DO SELECT 1", None),
        ("ALTER EVENT e DO UPDATE t SET enable = 1", None),
        ("CREATE EVENT IF NOT EXISTS `enable` ON SCHEDULE EVERY 1 DAY DISABLE DO SELECT 1", None),
        ("DROP EVENT e", None),
        ("CREATE TRIGGER t AFTER INSERT ON x FOR EACH ROW SET @a = 1", None),
    ],
)  # fmt: skip
def test_event_is_disabled_on_replica(statement: str, replica: str | None) -> None:
    assert so.disable_event_on_replica(statement) == (replica or statement)


@pytest.mark.parametrize(
    ("statement", "replacing"),
    [
        ("CREATE DEFINER=`u`@`%` TRIGGER t AFTER INSERT ON x FOR EACH ROW SET @a = 1",
         "CREATE OR REPLACE DEFINER=`u`@`%` TRIGGER t AFTER INSERT ON x FOR EACH ROW SET @a = 1"),
        ("CREATE OR REPLACE TRIGGER t AFTER INSERT ON x FOR EACH ROW SET @a = 1", None),
        ("CREATE TRIGGER IF NOT EXISTS `d`.`t` AFTER INSERT ON x FOR EACH ROW SET @a = 1",
         "CREATE OR REPLACE TRIGGER `d`.`t` AFTER INSERT ON x FOR EACH ROW SET @a = 1"),
        ("DROP TRIGGER t", None),
    ],
)  # fmt: skip
def test_or_replace(statement: str, replacing: str | None) -> None:
    assert so.or_replace(statement) == (replacing or statement)


def test_local_trigger_rewrite_equals_what_channels_apply() -> None:
    """The trigger guard re-creates a local trigger as OR REPLACE of what channels apply."""
    statement = (
        "CREATE DEFINER=`drc`@`127.0.0.1` TRIGGER trg AFTER INSERT ON t FOR EACH ROW "
        "INSERT INTO audit VALUES (UUID_SHORT(), NEW.id)"
    )
    found = so.parse(statement, "d")
    assert found is not None
    local = so.or_replace(so.guard_trigger(statement, found))
    assert local == (
        "CREATE OR REPLACE DEFINER=`drc`@`127.0.0.1` TRIGGER trg AFTER INSERT ON t FOR EACH ROW "
        "IF @drc_apply IS NULL THEN INSERT INTO audit VALUES (UUID_SHORT(), NEW.id); END IF"
    )
    again = so.parse(local, "d")
    assert again is not None and so.is_guarded(local, again)


def test_a_guarded_body_does_nothing_for_apply_sessions() -> None:
    # information_schema.TRIGGERS.ACTION_STATEMENT as the guard writes it, and as users may
    assert so.guarded_body("IF @drc_apply IS NULL THEN INSERT INTO log VALUES (NEW.id); END IF")
    assert so.guarded_body(" if @drc_apply is null then SET @n = 1; end if; ")
    assert not so.guarded_body("INSERT INTO log VALUES (NEW.id)")
    assert not so.guarded_body("BEGIN IF @drc_apply IS NULL THEN SET @n = 1; END IF; END")
    assert not so.guarded_body("IF @drc_apply IS NULL THEN SET @n = 1; END IF; SET @m = 1")
