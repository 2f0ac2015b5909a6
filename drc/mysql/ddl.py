"""One replicated DDL statement's connection (drc.mysql.session.Session.ddl_session opens it).

What drc.apply.ddl_journal asks of it before a statement runs: an advisory lock held for the
connection's life, the definition an object has now (SHOW CREATE), whether a definer account
exists; then the statement itself, run as the source ran it: its default database (``USE`` it,
or none when the target lacks it), its text as written, the source's statement time as NOW().
"""

from __future__ import annotations

from typing import Any

from drc.core.events import SchemaChange
from drc.core.target_errors import ApplyError
from drc.mysql import sql
from drc.mysql.driver import DriverError, translated
from drc.mysql.errors import translate

DDL_LOCK_WAIT_S = 60  # a DDL waiting on a metadata lock fails (1205) and is retried, not hung
_UNKNOWN_DATABASE = 1049
_NO_PRIVILEGE = (1142, 1044)


# kind -> (existence query, SHOW CREATE statement, column of the definition in its answer)
_SHOW: dict[str, tuple[str, str, int]] = {
    "database": ("SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
                 "SHOW CREATE DATABASE", 1),
    "table": ("SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
              "AND TABLE_NAME = %s", "SHOW CREATE TABLE", 1),
    "function": ("SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s "
                 "AND ROUTINE_NAME = %s AND ROUTINE_TYPE = 'FUNCTION'", "SHOW CREATE FUNCTION", 2),
    "procedure": ("SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = %s "
                  "AND ROUTINE_NAME = %s AND ROUTINE_TYPE = 'PROCEDURE'",
                  "SHOW CREATE PROCEDURE", 2),
    "trigger": ("SELECT 1 FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = %s "
                "AND TRIGGER_NAME = %s", "SHOW CREATE TRIGGER", 2),
    "event": ("SELECT 1 FROM information_schema.EVENTS WHERE EVENT_SCHEMA = %s "
              "AND EVENT_NAME = %s", "SHOW CREATE EVENT", 3),
}  # fmt: skip


class DdlSession:
    """One replicated DDL statement's connection: its advisory lock, the definitions of the
    objects it names (drc.apply.ddl_journal), and the statement itself."""

    def __init__(self, conn: Any, what: str) -> None:
        self._conn, self._what = conn, what

    def try_lock(self, name: str, wait_s: float) -> bool:
        """GET_LOCK: held until this connection closes (or its server thread ends)."""
        with translated(self._what), self._conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, %s)", (name, wait_s))
            row = cur.fetchone()
        return bool(row and row[0] == 1)

    def definition(self, kind: str, db: str, name: str | None) -> str | None:
        """SHOW CREATE text of a table (views included), database, routine, trigger or event,
        or None when there is no such object."""
        exists, show, column = _SHOW[kind]
        with translated(self._what), self._conn.cursor() as cur:
            cur.execute(exists, (db,) if name is None else (db, name))
            if cur.fetchone() is None:
                return None
            target = sql.quote(db) if name is None else f"{sql.quote(db)}.{sql.quote(name)}"
            cur.execute(f"{show} {target}")
            row = cur.fetchone()
        return None if row is None or row[column] is None else str(row[column])

    def account_exists(self, user: str, host: str) -> bool:
        """Whether the target has the account (a definer must exist to be used)."""
        try:
            with self._conn.cursor() as cur:
                cur.execute("SELECT 1 FROM mysql.user WHERE User = %s AND Host = %s", (user, host))
                return cur.fetchone() is not None
        except DriverError as exc:
            if exc.args and exc.args[0] in _NO_PRIVILEGE:  # no SELECT on mysql.user
                raise ApplyError(
                    f"cannot check whether the definer {user!r}@{host!r} of {self._what} exists "
                    "on the target: grant the apply user SELECT ON mysql.user",
                    exc.args[0],
                ) from exc
            raise translate(exc, self._what) from exc

    def run(self, change: SchemaChange, timestamp: int = 0) -> None:
        """Run the statement as the source did: its default database, its text as written, and
        (like native replication) the source's statement time as NOW(), so an event's STARTS
        or a column's DEFAULT CURRENT_TIMESTAMP gets the source's value."""
        with translated(self._what), self._conn.cursor() as cur:
            if timestamp > 0:
                cur.execute("SET SESSION timestamp = %s", (timestamp,))
            if change.schema:
                _use(cur, change.schema)
            cur.execute(change.statement)  # no parameters: the text runs as written


def _use(cursor: Any, schema: str) -> None:
    try:
        cursor.execute(f"USE {sql.quote(schema)}")
    except DriverError as exc:
        if not exc.args or exc.args[0] != _UNKNOWN_DATABASE:  # run without a default database
            raise
