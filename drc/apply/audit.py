"""``drc.channel_audit``: every control action taken on a channel (pause, resume, skip, rewind).

    drc.channel_audit
    +-------------+--------------+----------------------------------------------------------+
    | id      PK  | BIGINT AI    |                                                          |
    | channel     | VARCHAR(64)  | ChannelConfig.name                                       |
    | action      | VARCHAR(16)  | pause, resume, skip, rewind, reload (SIGHUP)             |
    | actor       | VARCHAR(128) | the admin token's name ("open" on an API without tokens) |
    | reason      | TEXT         | --reason, as given                                       |
    | detail      | LONGTEXT     | JSON: what the action did (SCNs, the skipped txn...)     |
    | at          | DATETIME(6)  | UTC time of the action                                   |
    +-------------+--------------+----------------------------------------------------------+

Written on the target by the channel's own session (skip_replication), so it stays in the
datacenter where the action was taken; a skip's row commits in the same transaction as the
checkpoint that moves past the skipped transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.scn import SCN
from drc.mysql.sql import Statement, ident

AUDIT_TABLE = "channel_audit"
_TABLE = f"{ident(CHECKPOINT_SCHEMA)}.{ident(AUDIT_TABLE)}"
ACTIONS = ("pause", "resume", "skip", "rewind", "reload")
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
        "`channel` VARCHAR(64) NOT NULL, `action` VARCHAR(16) NOT NULL, "
        "`actor` VARCHAR(128) NOT NULL, `reason` TEXT NOT NULL, `detail` LONGTEXT NOT NULL, "
        "`at` DATETIME(6) NOT NULL, PRIMARY KEY (`id`), KEY (`channel`, `at`)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )


def record(channel: str, action: str, actor: str, reason: str, detail: dict[str, Any]) -> Statement:
    if action not in ACTIONS:
        raise ValueError(f"unknown control action {action!r}")
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


def rewinds(channel: str, limit: int = 20) -> Statement:
    """The channel's latest rewinds' details: where each rewound from (see :func:`replay_until`)."""
    return Statement(
        f"SELECT `detail` FROM {_TABLE} WHERE `channel` = %s AND `action` = 'rewind' "
        "ORDER BY `id` DESC LIMIT %s",
        (channel, limit),
    )


def replay_until(details: list[str], applied: SCN) -> SCN | None:
    """How far a rewind's replay still runs past the checkpoint ``applied``: the furthest SCN any
    recent rewind went back from, when that is beyond the checkpoint. Read at start, so a restart
    in the middle of a replay still counts the rest as replays rather than logging conflicts."""
    furthest: SCN | None = None
    for text in details:
        try:
            source = SCN.parse(str(json.loads(text)["from"]))
        except (ValueError, KeyError, TypeError):
            continue  # an audit row of another shape is no replay window
        furthest = source if furthest is None else max(furthest, source)
    return furthest if furthest is not None and furthest > applied else None


def parse(row: tuple[Any, ...]) -> AuditEntry:
    id_, channel, action, actor, reason, detail, at = row
    return AuditEntry(int(id_), str(channel), str(action), str(actor), str(reason),
                      json.loads(detail), at)  # fmt: skip
