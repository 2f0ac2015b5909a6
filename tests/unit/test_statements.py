"""Account and privilege statements are recognised however they are written; logged statement
texts never show a literal."""

from __future__ import annotations

import pytest

from drc.core.sqltokens import tokens
from drc.core.statements import HIDDEN, LOG_CHARS, for_log, is_account_statement, redacted

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
    "SET ROLE auditor",
    "SET STATEMENT max_statement_time = 10 FOR CREATE USER bob IDENTIFIED BY 'x'",
    "-- why\nGRANT USAGE ON *.* TO bob",
    # The spellings: a comment between the keywords, an executable comment.
    "CREATE /* c */ USER 'x6'@'%' IDENTIFIED BY 'S3cretPW!cm'",
    "/*! CREATE USER 'x7'@'%' IDENTIFIED BY 'S3cretPW!ec' */",
    "/*!50700 CREATE USER 'x'@'%' IDENTIFIED BY 'x' */",
    "/*!100100 CREATE USER 'x'@'%' IDENTIFIED BY 'x' */",
    "/*M! CREATE USER 'x'@'%' IDENTIFIED BY 'x' */",
    "/*M!100100 CREATE USER 'x'@'%' IDENTIFIED BY 'x' */",
    "CREATE /*!USER*/ 'x'@'%' IDENTIFIED BY 'x'",
    "CREATE /*!50600 OR REPLACE */ USER 'x'@'%' IDENTIFIED BY 'x'",
    "CREATE /*!50600 /* inner */ USER */ 'x'@'%' IDENTIFIED BY 'x'",
    "/*!*/CREATE USER 'x'@'%' IDENTIFIED BY 'x'",
    "/*! CREATE /* c */ USER 'x'@'%' IDENTIFIED BY 'x' */",
    "CREATE#c\nUSER 'x'@'%' IDENTIFIED BY 'x'",
    "CREATE -- c\nUSER 'x'@'%' IDENTIFIED BY 'x'",
    "CREATE --\x01c\nUSER 'x'@'%' IDENTIFIED BY 'x'",  # the server: -- then a control char
    "CREATE --\tc\nUSER 'x'@'%' IDENTIFIED BY 'x'",
    "ALTER/**/USER 'x'@'%' IDENTIFIED BY 'x'",
    "SET/**/PASSWORD FOR 'x'@'%' = PASSWORD('x')",
    "create\n\tuser\n'x'@'%'\nidentified\nby\n'x'",
    "CrEaTe UsEr 'x'@'%' IdEnTiFiEd By 'x'",
    "CREATE USER 'x'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('x')",
    "ALTER USER 'x'@'%' IDENTIFIED VIA mysql_native_password USING PASSWORD('x') OR unix_socket",
    "GRANT SELECT ON db.* TO 'x'@'%' IDENTIFIED BY 'x'",
    "SET STATEMENT/**/max_statement_time=10/**/FOR/**/CREATE USER 'x'@'%' IDENTIFIED BY 'x'",
    "SET STATEMENT max_statement_time=10 FOR SET PASSWORD FOR 'x'@'%' = PASSWORD('x')",
    "SET STATEMENT max_statement_time=10 FOR GRANT SELECT ON db.* TO 'x' IDENTIFIED BY 'x'",
    "set statement max_statement_time=10 for set statement lock_wait_timeout=1 for create user x",
    "SET STATEMENT sql_mode = CONCAT('a', 'b') FOR CREATE USER x IDENTIFIED BY 'x'",
    "SET @a = 1, PASSWORD FOR 'x'@'%' = PASSWORD('x')",
    # NO_BACKSLASH_ESCAPES: '\' is a whole string; read with escapes, the quote hides the FOR.
    "SET STATEMENT default_master_connection='\\', max_statement_time=10 "
    "FOR CREATE USER 'y1'@'%' IDENTIFIED BY 'x' -- '",
    # ANSI_QUOTES: "\" is a whole name.
    'SET STATEMENT default_master_connection="\\", max_statement_time=10 '
    "FOR CREATE USER 'z1'@'%' IDENTIFIED BY 'x' -- \"",
    "SET STATEMENT x = 'never ends FOR CREATE USER x",  # no reading ends the quote: dropped
]
OTHER = [
    "CREATE TABLE users (id INT PRIMARY KEY)",
    "ALTER TABLE user ADD COLUMN grant_flag INT",
    "CREATE VIEW grants AS SELECT 1",
    "DROP TABLE user",
    "INSERT INTO t VALUES ('GRANT')",
    "SET @x = 1",
    "CREATE TABLE t (id INT, user VARCHAR(80), password VARCHAR(80))",
    "ALTER TABLE t ADD COLUMN user INT, ADD COLUMN password INT, ADD COLUMN role INT",
    "ALTER TABLE user CHANGE password role INT",
    "CREATE TABLE t (a INT) COMMENT 'CREATE USER bob IDENTIFIED BY x'",
    "CREATE TABLE t (a INT COMMENT 'USER') COMMENT='GRANT USER ROLE'",
    "/* CREATE USER bob */ CREATE TABLE t (a INT)",
    "CREATE /* USER */ TABLE user (user INT)",
    "CREATE -- USER\nTABLE t (a INT)",
    "CREATE DATABASE users",
    "DROP TABLE role",
    "RENAME TABLE user TO users",
    "CREATE TABLE `user` (`password` INT)",
    'CREATE TABLE t (a INT) COMMENT "USER"',
    "INSERT INTO user (user, password) VALUES ('GRANT', 'x')",
    "SET @user = 1, @password = 'x', @role = 2",
    "SET sql_mode = 'ANSI', @role = 1",
    "SET STATEMENT max_statement_time = 10 FOR ALTER TABLE user ADD password INT",
    "SET STATEMENT max_statement_time = 10 FOR SELECT 1 FOR UPDATE",
    "SET STATEMENT sql_mode = SUBSTRING('ab' FROM 1 FOR 1) FOR ALTER TABLE user ADD c INT",
    "CREATE PROCEDURE p() SELECT 1",
    "ALTER TABLE t COMMENT 'it\\'s GRANT'",
]
# Statements written with one space between tokens; comments go at every token boundary.
FUZZED = [
    "CREATE USER 'bob'@'%' IDENTIFIED BY 'pw'",
    "CREATE OR REPLACE USER bob IDENTIFIED BY 'pw'",
    "CREATE USER IF NOT EXISTS bob IDENTIFIED BY 'pw'",
    "ALTER USER bob IDENTIFIED BY 'pw'",
    "GRANT SELECT ON db.* TO bob IDENTIFIED BY 'pw'",
    "SET PASSWORD FOR bob = PASSWORD('pw')",
    "CREATE USER bob IDENTIFIED VIA mysql_native_password USING PASSWORD('pw')",
    "SET STATEMENT max_statement_time = 10 FOR CREATE USER bob IDENTIFIED BY 'pw'",
    "SET STATEMENT max_statement_time = 10 FOR GRANT ALL ON *.* TO bob IDENTIFIED BY 'pw'",
]
COMMENTS = ["/* x */", "/**/", "-- x\n", "--\n", "# x\n", "#\n", "/* CREATE TABLE t */"]
WRAPPERS = ["/*!", "/*!50600", "/*!100100", "/*M!", "/*M!100100", "/*!50700 "]


def boundaries(sql: str) -> list[int]:
    return [0] + [t.end for t in tokens(sql)]


def commented(sql: str) -> list[str]:
    """``sql`` with each comment at each token boundary."""
    return [sql[:b] + c + sql[b:] for b in boundaries(sql) for c in COMMENTS]


def wrapped(sql: str) -> list[str]:
    """``sql`` with each run of whole tokens wrapped in each executable comment."""
    cuts = boundaries(sql)
    return [
        f"{sql[:a]}{w} {sql[a:b]} */{sql[b:]}"
        for i, a in enumerate(cuts) for b in cuts[i + 1 :] for w in WRAPPERS
    ]  # fmt: skip


@pytest.mark.parametrize("sql", ACCOUNT)
def test_account_statements_are_recognised(sql: str) -> None:
    assert is_account_statement(sql)
    assert for_log(sql) == HIDDEN


@pytest.mark.parametrize("sql", OTHER)
def test_other_statements_are_not(sql: str) -> None:
    assert not is_account_statement(sql)
    assert for_log(sql) == redacted(sql)


@pytest.mark.parametrize("sql", FUZZED)
def test_a_comment_at_any_token_boundary_is_seen_through(sql: str) -> None:
    missed = [s for s in commented(sql) if not is_account_statement(s)]
    assert not missed
    assert all(for_log(s) == HIDDEN for s in commented(sql))


@pytest.mark.parametrize("sql", FUZZED)
def test_executable_comments_around_any_tokens_are_read_as_code(sql: str) -> None:
    missed = [s for s in wrapped(sql) if not is_account_statement(s)]
    assert not missed


@pytest.mark.parametrize("sql", FUZZED)
def test_a_comment_inside_an_executable_comment_is_seen_through(sql: str) -> None:
    spellings = [f"{w}{s} */" for s in commented(sql) for w in ("/*!", "/*M!100100 ")]
    assert not [s for s in spellings if not is_account_statement(s)]


def test_comments_in_ordinary_ddl_do_not_make_it_an_account_statement() -> None:
    sql = "CREATE TABLE users (user INT, password INT, role INT) COMMENT 'CREATE USER x'"
    spellings = commented(sql) + wrapped(sql)
    assert not [s for s in spellings if is_account_statement(s)]


def test_redaction_masks_every_literal_and_keeps_names() -> None:
    sql = "ALTER TABLE `t` ADD c INT DEFAULT 'secret1', COMMENT \"secret2\", ADD `d` INT"
    assert redacted(sql) == "ALTER TABLE `t` ADD c INT DEFAULT '?', COMMENT '?', ADD `d` INT"


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO t VALUES ('se''cret', 'se\\'cret', \"se\\\"cret\", _utf8'secret')",
        "INSERT INTO t VALUES ('a\\', 'secret')",  # NO_BACKSLASH_ESCAPES: two strings
        'INSERT INTO t VALUES ("a\\", "secret")',  # ANSI_QUOTES or NO_BACKSLASH_ESCAPES
        "ALTER TABLE t COMMENT 'secret",  # unterminated: the rest is masked
        "ALTER TABLE t COMMENT X'5ec2e7'",
    ],
)
def test_redaction_masks_literals_however_backslashes_were_read(sql: str) -> None:
    shown = redacted(sql)
    assert "secret" not in shown and "5ec2e7" not in shown and "'?'" in shown


def test_for_log_masks_literals_of_other_statements() -> None:
    assert for_log("CREATE TABLE t (a INT DEFAULT 'pw-1')") == "CREATE TABLE t (a INT DEFAULT '?')"


def test_long_statements_are_cut_for_logs_and_a_literal_cut_short_stays_masked() -> None:
    shown = for_log("ALTER TABLE t COMMENT '" + "x" * 500 + "'")
    assert shown == "ALTER TABLE t COMMENT '?'..."
    assert for_log("ALTER TABLE t ADD c INT" + " " * LOG_CHARS).endswith("...")
