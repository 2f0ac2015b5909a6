"""Statements that carry secrets: account and privilege statements. Pure.

``CREATE USER 'bob'@'%' IDENTIFIED BY 'plain text'`` reaches the binlog as written (MariaDB
does not rewrite the password), and so do GRANT .. IDENTIFIED BY, ALTER USER and SET PASSWORD.
Accounts and privileges are per datacenter, so the replicator never stores these statements:
it drops them at capture and counts them. Anything that logs a statement text goes through
:func:`for_log`, so an account statement is never written to a log either (e.g. one already in
a buffer written by an older version).
"""

from __future__ import annotations

import re

# Leading comments (MariaDB writes version comments such as /*!50003 ... */ around some parts),
# then an optional SET STATEMENT var = value [, ...] FOR prefix, then the statement itself.
_ACCOUNT = re.compile(
    r"\s*(?:(?:/\*.*?\*/|--[^\n]*\n|#[^\n]*\n)\s*)*"
    r"(?:SET\s+STATEMENT\s+.*?\s+FOR\s+)?"
    r"(?:(?:CREATE|ALTER|DROP|RENAME)\s+(?:OR\s+REPLACE\s+)?(?:USER|ROLE)\b"
    r"|GRANT\b|REVOKE\b|SET\s+(?:PASSWORD|(?:DEFAULT\s+)?ROLE)\b)",
    re.IGNORECASE | re.DOTALL,
)
LOG_CHARS = 200


def is_account_statement(sql: str) -> bool:
    """CREATE/ALTER/DROP/RENAME USER or ROLE, GRANT, REVOKE, SET PASSWORD, SET [DEFAULT] ROLE."""
    return _ACCOUNT.match(sql) is not None


def for_log(sql: str) -> str:
    """A statement as it may appear in a log line or error: cut, and never an account one."""
    if is_account_statement(sql):
        return "<account or privilege statement, not shown>"
    return sql if len(sql) <= LOG_CHARS else sql[:LOG_CHARS] + "..."
