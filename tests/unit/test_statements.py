"""Account and privilege statements are recognised however they are written."""

from __future__ import annotations

import pytest

from drc.core.statements import for_log, is_account_statement

ACCOUNT = [
    "CREATE USER 'bob'@'localhost' IDENTIFIED BY 'secret-xyz'",
    "create or replace user bob identified by 'x'",
    "  /* a comment */ ALTER USER bob IDENTIFIED BY 'x'",
    "DROP USER IF EXISTS bob",
    "RENAME USER bob TO alice",
    "GRANT SELECT ON shop.* TO bob IDENTIFIED BY 'x'",
    "REVOKE ALL PRIVILEGES ON *.* FROM bob",
    "SET PASSWORD FOR bob = PASSWORD('x')",
    "SET password = 'x'",
    "CREATE ROLE auditor",
    "DROP ROLE auditor",
    "SET DEFAULT ROLE auditor FOR bob",
    "SET STATEMENT max_statement_time = 10 FOR CREATE USER bob IDENTIFIED BY 'x'",
    "-- why\nGRANT USAGE ON *.* TO bob",
]
OTHER = [
    "CREATE TABLE users (id INT PRIMARY KEY)",
    "ALTER TABLE user ADD COLUMN grant_flag INT",
    "CREATE VIEW grants AS SELECT 1",
    "DROP TABLE user",
    "INSERT INTO t VALUES ('GRANT')",
    "SET @x = 1",
]


@pytest.mark.parametrize("sql", ACCOUNT)
def test_account_statements_are_recognised(sql: str) -> None:
    assert is_account_statement(sql)
    assert "x'" not in for_log(sql) and "secret" not in for_log(sql)


@pytest.mark.parametrize("sql", OTHER)
def test_other_statements_are_not(sql: str) -> None:
    assert not is_account_statement(sql)
    assert for_log(sql) == sql


def test_long_statements_are_cut_for_logs() -> None:
    assert for_log("ALTER TABLE t COMMENT '" + "x" * 500 + "'").endswith("...")
