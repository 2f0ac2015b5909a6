"""An operator's follow-up of a logged conflict: take one side's row, everywhere, audited.

``drc conflicts resolve ID --take local|remote`` reads conflict ID from this datacenter's log
(drc.conflicts.log) and writes the row it chose as an application would: on a session that is
NOT an apply session (replicated, no ``@drc_apply``), so DRC carries it once to every other
datacenter, where it is applied like any change and never comes back. ``local`` is the row this
datacenter held when the conflict was detected, ``remote`` the incoming version (no row: the
row is deleted). On a table whose policy has a timestamp column (lww), that column is set to the
server's current time, so the written row is the newest everywhere and every datacenter's lww
takes it; another policy decides again on each side as it does for any write (``keep`` keeps
what the other side has).

The write and its record in ``drc.conflict_resolutions`` (who, which side, why, when) commit in
one transaction. The record stays in this datacenter (channels never apply DRC's own tables).

    drc.conflict_resolutions
    +----------------+---------------------+-------------------------------------------------+
    | id          PK | BIGINT UNSIGNED AI  |                                                 |
    | conflict_id    | BIGINT UNSIGNED     | drc.conflicts.id on this datacenter             |
    | schema_name    | VARCHAR(64)         | the table written                               |
    | table_name     | VARCHAR(64)         |                                                 |
    | primary_key    | TEXT                | JSON, as in drc.conflicts                       |
    | taken          | VARCHAR(8)          | local or remote                                 |
    | actor          | VARCHAR(128)        | --actor, default the OS user and host           |
    | reason         | TEXT                | --reason                                        |
    | written_row    | MEDIUMTEXT NULL     | JSON of the row written (NULL: deleted)         |
    | at             | DATETIME(6)         | UTC                                             |
    +----------------+---------------------+-------------------------------------------------+
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from drc.conflicts.log import SCHEMA, QuerySession, StoredConflict, encode_row
from drc.core.target_errors import ApplyError
from drc.core.values import utc_aware
from drc.mysql import sql
from drc.mysql.sql import Statement, ident, quote

TABLE = "conflict_resolutions"
SIDES = ("local", "remote")
_TABLE = f"{ident(SCHEMA)}.{ident(TABLE)}"


def create_statements() -> list[str]:
    return [
        f"CREATE DATABASE IF NOT EXISTS {quote(SCHEMA)}",
        f"CREATE TABLE IF NOT EXISTS {quote(SCHEMA)}.{quote(TABLE)} ("
        "`id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, `conflict_id` BIGINT UNSIGNED NOT NULL, "
        "`schema_name` VARCHAR(64) NOT NULL, `table_name` VARCHAR(64) NOT NULL, "
        "`primary_key` TEXT NOT NULL, `taken` VARCHAR(8) NOT NULL, `actor` VARCHAR(128) NOT "
        "NULL, `reason` TEXT NOT NULL, `written_row` MEDIUMTEXT NULL, `at` DATETIME(6) NOT "
        "NULL, PRIMARY KEY (`id`), KEY (`conflict_id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    ]


@dataclass(frozen=True, slots=True)
class Resolution:
    """What resolving a conflict writes: the chosen row (None: delete it) and the record."""

    conflict: StoredConflict
    taken: str  # one of SIDES
    row: Mapping[str, Any] | None

    @classmethod
    def of(cls, conflict: StoredConflict, taken: str, stamp: tuple[str, Any] | None) -> Resolution:
        """The row ``taken`` for ``conflict``; ``stamp``: the table's timestamp column and the
        time to give it (lww), or None."""
        if taken not in SIDES:
            raise ValueError(f"--take must be one of {', '.join(SIDES)}, got {taken!r}")
        chosen = conflict.local_row if taken == "local" else conflict.incoming_after
        row = None if chosen is None else dict(chosen)
        if row is not None and stamp is not None:
            column, now = stamp
            name = next((c for c in row if c.lower() == column.lower()), column)
            row[name] = now
        return cls(conflict, taken, row)

    def write(self) -> Statement:
        c = self.conflict
        if self.row is None:
            key = list(c.key)
            where = sql.by_keys(key, [[c.key[k] for k in key]], frozenset())
            return sql.delete(c.schema, c.table, where)
        columns = list(self.row)
        return sql.upsert(c.schema, c.table, columns, [[self.row[k] for k in columns]])

    def record(self, actor: str, reason: str) -> Statement:
        c = self.conflict
        return Statement(
            f"INSERT INTO {_TABLE} (`conflict_id`, `schema_name`, `table_name`, `primary_key`, "
            "`taken`, `actor`, `reason`, `written_row`, `at`) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, UTC_TIMESTAMP(6))",
            (c.id, c.schema, c.table, encode_row(c.key), self.taken, actor[:128], reason,
             encode_row(self.row)),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Recorded:
    """A resolution read back (``drc conflicts show``)."""

    taken: str
    actor: str
    reason: str
    at: dt.datetime

    def as_dict(self) -> dict[str, Any]:
        return {"taken": self.taken, "actor": self.actor, "reason": self.reason,
                "at": self.at.isoformat()}  # fmt: skip


def resolutions(session: QuerySession, conflict_id: int) -> list[Recorded]:
    """How conflict ``conflict_id`` was resolved by operators, oldest first (none: none, or no
    resolution ever recorded on this target)."""
    try:
        rows = session.query(select(conflict_id), "reading the conflict's resolutions")
    except ApplyError as exc:
        if exc.code in (1146, 1049):  # no such table, no such database
            return []
        raise
    return [parse(row) for row in rows]


def select(conflict_id: int) -> Statement:
    return Statement(
        f"SELECT `taken`, `actor`, `reason`, `at` FROM {_TABLE} WHERE `conflict_id` = %s "
        "ORDER BY `id`",
        (int(conflict_id),),
    )


def parse(row: tuple[Any, ...]) -> Recorded:
    taken, actor, reason, at = row
    return Recorded(str(taken), str(actor), str(reason), utc_aware(at))
