"""``drc.channel_audit``: every control action taken on a channel (drc.apply.actions).

    drc.channel_audit
    +-------------+--------------+----------------------------------------------------------+
    | id      PK  | BIGINT AI    |                                                          |
    | channel     | VARCHAR(64)  | ChannelConfig.name                                       |
    | action      | VARCHAR(16)  | the action's name (drc.apply.actions)                    |
    | actor       | VARCHAR(128) | the admin token's name ("open" on an API without tokens) |
    | reason      | TEXT         | --reason, as given                                       |
    | detail      | LONGTEXT     | JSON: what the action did (SCNs, the skipped txn...)     |
    | at          | DATETIME(6)  | UTC time of the action                                   |
    +-------------+--------------+----------------------------------------------------------+

Written on the target by the channel's own session (skip_replication), so it stays in the
datacenter where the action was taken; a queued action's row (a skip's, a rewind's) commits in
the same transaction as the checkpoint it moves. The trail names no actions: what each one
writes, and reads back (a rewind's replay window), is the action's (drc.apply.actions).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from drc.core.markers import CHECKPOINT_SCHEMA
from drc.mysql.sql import Statement, ident

AUDIT_TABLE = "channel_audit"
_TABLE = f"{ident(CHECKPOINT_SCHEMA)}.{ident(AUDIT_TABLE)}"
ACTION_MAX = 16  # the action column's width
REASON_MAX = 2000


@dataclass(frozen=True)
class AuditEntry:
    id: int
    channel: str
    action: str
    actor: str
    reason: str
    detail: dict[str, Any]
    at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "channel": self.channel, "action": self.action, "actor": self.actor,
            "reason": self.reason, "detail": self.detail, "at": self.at.isoformat(),
        }  # fmt: skip


def create_statement() -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_TABLE} (`id` BIGINT NOT NULL AUTO_INCREMENT, "
        f"`channel` VARCHAR(64) NOT NULL, `action` VARCHAR({ACTION_MAX}) NOT NULL, "
        "`actor` VARCHAR(128) NOT NULL, `reason` TEXT NOT NULL, `detail` LONGTEXT NOT NULL, "
        "`at` DATETIME(6) NOT NULL, PRIMARY KEY (`id`), KEY (`channel`, `at`)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )


def record(channel: str, action: str, actor: str, reason: str, detail: dict[str, Any]) -> Statement:
    return Statement(
        f"INSERT INTO {_TABLE} (`channel`, `action`, `actor`, `reason`, `detail`, `at`) "
        "VALUES (%s, %s, %s, %s, %s, UTC_TIMESTAMP(6))",
        (channel, action, actor[:128], reason[:REASON_MAX], json.dumps(detail, sort_keys=True)),
    )


def history(channel: str, limit: int = 100) -> Statement:
    return Statement(
        f"SELECT `id`, `channel`, `action`, `actor`, `reason`, `detail`, `at` FROM {_TABLE} "
        "WHERE `channel` = %s ORDER BY `id` DESC LIMIT %s",
        (channel, limit),
    )


def details(channel: str, action: str, limit: int) -> Statement:
    """The details of the channel's latest ``limit`` rows of ``action``, newest first."""
    return Statement(
        f"SELECT `detail` FROM {_TABLE} WHERE `channel` = %s AND `action` = %s "
        "ORDER BY `id` DESC LIMIT %s",
        (channel, action, limit),
    )


def parse(row: tuple[Any, ...]) -> AuditEntry:
    id_, channel, action, actor, reason, detail, at = row
    return AuditEntry(int(id_), str(channel), str(action), str(actor), str(reason),
                      json.loads(detail), at)  # fmt: skip
