"""Replicated DDL applied exactly once across crashes and rewinds: the journal. Pure.

A DDL statement commits by itself, so it cannot ride in the transaction of the checkpoint row.
Each one is therefore journalled in the target's ``drc`` schema::

    drc.ddl_journal
    +--------------+--------------+-----------------------------------------------------------+
    | channel  PK  | VARCHAR(64)  | ChannelConfig.name                                        |
    | scn      PK  | VARCHAR(96)  | the source transaction's SCN                              |
    | seq      PK  | INT          | the statement's place in that transaction                 |
    | state        | VARCHAR(8)   | "running" (committed before the statement is sent),       |
    |              |              | "done" (committed after it finished)                      |
    | before_def   | LONGTEXT     | JSON: the target's definition of every object the         |
    | after_def    | LONGTEXT     |       statement names, before and after it ran            |
    | statement    | LONGTEXT     | the statement (DDL text carries no secrets: account      |
    |              |              | statements are never captured)                            |
    | started_at, finished_at     | UTC times                                                 |
    +--------------+--------------+-----------------------------------------------------------+

A definition is the ``SHOW CREATE`` text (TABLE, views included; DATABASE; FUNCTION,
PROCEDURE, TRIGGER, EVENT) of each object the statement names, AUTO_INCREMENT counters left
out, or null for a missing object.

What the channel does with the DDL at (scn, seq), :func:`decide`:

    no entry                 record "running" with the current definitions, run it, "done"
    "done"                   skip: it ran (a crash after it, or a rewound channel)
    "running", definitions   it never ran (the crash came first, or it failed): run it
      equal to before_def
    "running", definitions   it ran and the crash came before "done": mark it done
      differ from before_def

The statement runs on a connection holding the advisory lock ``drc_ddl:<channel>`` (GET_LOCK).
A killed channel's statement goes on running in the server until it finishes, still holding the
lock; the restarted channel takes the lock before it reads the definitions, so it never sees a
half-finished ALTER as "not run" and sends it a second time.

A statement that changes no definition (TRUNCATE, OPTIMIZE-like ALTERs, CREATE TABLE IF NOT
EXISTS of an existing table) is run again after a crash, which changes nothing more. Statements
that name no object DRC can read run again too (the journal still records them). Done entries
older than :data:`RETENTION_DAYS` are purged when the channel starts.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass

from drc.core import schema_objects
from drc.core.ddl import ddl_tables, parse_table_name
from drc.core.events import SchemaChange
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.mysql.sql import Statement, ident

TABLE = "ddl_journal"
RETENTION_DAYS = 30
RUNNING, DONE = "running", "done"

Definitions = dict[str, str | None]  # "table `db`.`t`" or "database `db`" -> SHOW CREATE text


@dataclass(frozen=True, slots=True)
class Entry:
    state: str
    before: Definitions


class Decision(enum.Enum):
    RUN = "run"  # it has not run on the target: run it
    SKIP = "skip"  # journalled as done
    RAN = "ran"  # it ran before a crash: record it as done


def decide(entry: Entry | None, current: Definitions) -> Decision:
    if entry is None:
        return Decision.RUN
    if entry.state == DONE:
        return Decision.SKIP
    return Decision.RUN if current == entry.before else Decision.RAN


# ------------------------------------------------------------------ the objects a statement names

_NAME = r"((?:`(?:[^`]|``)+`|[^\s`(;,]+)(?:\s*\.\s*(?:`(?:[^`]|``)+`|[^\s`(;,]+))?)"
_INDEX = re.compile(
    r"\s*(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+|OFFLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|"
    r"SPATIAL\s+)?INDEX|DROP\s+INDEX)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    r"(?:`(?:[^`]|``)+`|\S+)\s+ON\s+" + _NAME,
    re.IGNORECASE,
)
_DATABASE = re.compile(
    r"\s*(?:CREATE|ALTER|DROP)\s+(?:OR\s+REPLACE\s+)?(?:DATABASE|SCHEMA)\s+"
    r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(`(?:[^`]|``)+`|[^\s`;]+)",
    re.IGNORECASE,
)


def objects(change: SchemaChange) -> list[tuple[str, str, str | None]]:
    """``("table", db, name)`` / ``("database", db, None)`` for each object the statement names;
    a view is a table here (SHOW CREATE TABLE shows it), a routine, trigger or event its kind."""
    found_object = schema_objects.parse(change.statement, change.schema)
    if found_object is not None:
        kind = "table" if found_object.kind == schema_objects.VIEW else found_object.kind
        return [(kind, found_object.schema, found_object.name)]
    found: list[tuple[str, str, str | None]] = [
        ("table", db, table) for db, table, _kind in ddl_tables(change)
    ]
    match = _INDEX.match(change.statement)
    if match and not found:
        db, table = _qualified(match.group(1), change.schema)
        found.append(("table", db, table))
    database = _DATABASE.match(change.statement)
    if database and not found:
        found.append(("database", _unquote(database.group(1)), None))
    return list(dict.fromkeys(found))


def _qualified(text: str, default_schema: str) -> tuple[str, str]:
    try:
        db, table = parse_table_name(text)
    except ValueError:
        return default_schema, _unquote(text)
    return db or default_schema, table


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def key(kind: str, db: str, name: str | None) -> str:
    return f"{kind} `{db}`" if name is None else f"{kind} `{db}`.`{name}`"


def normalise(create: str) -> str:
    """A SHOW CREATE text without what changes by itself (the next AUTO_INCREMENT value)."""
    return re.sub(r" AUTO_INCREMENT=\d+", "", create)


# ------------------------------------------------------------------ statements

_TABLE = f"{ident(CHECKPOINT_SCHEMA)}.{ident(TABLE)}"


def create_statement() -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_TABLE} (`channel` VARCHAR(64) NOT NULL, "
        "`scn` VARCHAR(96) NOT NULL, `seq` INT NOT NULL, `state` VARCHAR(8) NOT NULL, "
        "`before_def` LONGTEXT NOT NULL, `after_def` LONGTEXT NULL, `statement` LONGTEXT NOT "
        "NULL, `started_at` DATETIME(6) NOT NULL, `finished_at` DATETIME(6) NULL, "
        "PRIMARY KEY (`channel`, `scn`, `seq`), KEY (`finished_at`)) ENGINE=InnoDB "
        "DEFAULT CHARSET=utf8mb4"
    )


def select(channel: str, scn: str, seq: int) -> Statement:
    return Statement(
        f"SELECT `state`, `before_def` FROM {_TABLE} WHERE `channel` = %s AND `scn` = %s "
        "AND `seq` = %s",
        (channel, scn, seq),
    )


def parse(row: tuple[object, ...]) -> Entry:
    state, before = row
    return Entry(str(state), json.loads(str(before)))


def start(channel: str, scn: str, seq: int, statement: str, before: Definitions) -> Statement:
    return Statement(
        f"INSERT INTO {_TABLE} (`channel`, `scn`, `seq`, `state`, `before_def`, `statement`, "
        "`started_at`) VALUES (%s, %s, %s, %s, %s, %s, UTC_TIMESTAMP(6)) ON DUPLICATE KEY "
        "UPDATE `state` = VALUES(`state`), `before_def` = VALUES(`before_def`)",
        (channel, scn, seq, RUNNING, json.dumps(before, sort_keys=True), statement),
    )


def finish(channel: str, scn: str, seq: int, statement: str, after: Definitions) -> Statement:
    """Mark done (inserting the entry if a rewind or an older version left none)."""
    after_json = json.dumps(after, sort_keys=True)
    return Statement(
        f"INSERT INTO {_TABLE} (`channel`, `scn`, `seq`, `state`, `before_def`, `after_def`, "
        "`statement`, `started_at`, `finished_at`) VALUES (%s, %s, %s, %s, %s, %s, %s, "
        "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE `state` = VALUES(`state`), "
        "`after_def` = VALUES(`after_def`), `finished_at` = VALUES(`finished_at`)",
        (channel, scn, seq, DONE, after_json, after_json, statement),
    )


def purge(channel: str) -> Statement:
    return Statement(
        f"DELETE FROM {_TABLE} WHERE `channel` = %s AND `state` = %s AND `finished_at` < "
        "UTC_TIMESTAMP(6) - INTERVAL %s DAY",
        (channel, DONE, RETENTION_DAYS),
    )


def lock_name(channel: str) -> str:
    return f"drc_ddl:{channel}"
