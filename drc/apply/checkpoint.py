"""The channel's row in ``drc.checkpoint``: where it resumes, written in every target transaction.

    drc.checkpoint
    +-----------------+------------------+------------------------------------------------+
    | channel    PK   | VARCHAR(64)      | ChannelConfig.name                             |
    | scn             | VARCHAR(96)      | last source SCN applied (text form)            |
    | epoch           | VARCHAR(64) NULL | remote buffer epoch that served it (info only) |
    | origin          | VARCHAR(64)      | remote datacenter; checked on start            |
    | pending_ddl_scn | VARCHAR(96) NULL | SCN of a DDL that may have run after ``scn``   |
    | updated_at      | DATETIME(6)      | UTC commit time of the write                   |
    +-----------------+------------------+------------------------------------------------+

Exactly once: the row is upserted in the same target transaction as the changes it covers, so
after a crash at any instruction the target holds either both or neither, and the channel
subscribes after ``scn``. That write is also the loop marker (drc.core.markers) the local
replicator recognises.

DDL cannot share a transaction (it commits implicitly), so it is bracketed: first the row gets
``pending_ddl_scn`` (committed), then the DDL runs, then ``scn`` moves to the DDL's SCN and
``pending_ddl_scn`` is cleared. A crash in between redelivers the DDL; drc.apply.ddl_journal
then knows whether it ran (no list of "already applied" error codes).

``updated_at`` changes on every write, so every write is a real row change and always lands in
the binlog (an UPDATE to identical values would log nothing and carry no marker).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from drc.apply import applied_set, audit, ddl_journal, osc_pending
from drc.core.markers import CHECKPOINT_SCHEMA, CHECKPOINT_TABLE
from drc.core.scn import SCN
from drc.mysql.sql import Statement, ident, quote

TABLE = f"{quote(CHECKPOINT_SCHEMA)}.{quote(CHECKPOINT_TABLE)}"
COLUMNS: Mapping[str, str] = {
    "channel": "VARCHAR(64) NOT NULL",
    "scn": "VARCHAR(96) NOT NULL DEFAULT ''",
    "epoch": "VARCHAR(64) NULL",
    "origin": "VARCHAR(64) NOT NULL DEFAULT ''",
    "pending_ddl_scn": "VARCHAR(96) NULL",
    "updated_at": "DATETIME(6) NULL",
}


@dataclass(frozen=True, slots=True)
class CheckpointRow:
    channel: str
    scn: SCN
    origin: str
    epoch: str | None = None
    pending_ddl_scn: SCN | None = None

    def at_least(self, applied: SCN) -> CheckpointRow:
        """This row, or one at ``applied`` where that is further (a catch-up moved the
        checkpoint there), keeping only a pending DDL beyond it."""
        if self.scn > applied:
            return self
        pending = self.pending_ddl_scn
        return replace(
            self, scn=applied, pending_ddl_scn=pending if pending and pending > applied else None
        )

    def upsert(self) -> Statement:
        return upsert(self)


def create_statements() -> list[str]:
    """DDL that makes sure the schema and tables exist (run without parameters)."""
    columns = ",\n  ".join(f"{quote(name)} {kind}" for name, kind in COLUMNS.items())
    return [
        f"CREATE DATABASE IF NOT EXISTS {quote(CHECKPOINT_SCHEMA)}",
        f"CREATE TABLE IF NOT EXISTS {TABLE} (\n  {columns},\n  PRIMARY KEY (`channel`)\n)"
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        ddl_journal.create_statement(),
        audit.create_statement(),
        applied_set.create_statement(),
        osc_pending.create_statement(),
    ]


def add_missing_columns(existing: set[str]) -> list[str]:
    """ALTERs that bring an older or hand-made checkpoint table up to :data:`COLUMNS`."""
    present = {name.lower() for name in existing}
    return [
        f"ALTER TABLE {TABLE} ADD COLUMN {quote(name)} {kind}"
        for name, kind in COLUMNS.items()
        if name not in present
    ]


def select(channel: str) -> Statement:
    return Statement(
        "SELECT `scn`, `origin`, `epoch`, `pending_ddl_scn` FROM "
        f"{ident(CHECKPOINT_SCHEMA)}.{ident(CHECKPOINT_TABLE)} WHERE `channel` = %s",
        (channel,),
    )


def parse(channel: str, row: tuple[object, ...]) -> CheckpointRow:
    scn, origin, epoch, pending = row
    return CheckpointRow(
        channel=channel,
        scn=SCN.parse(str(scn)),
        origin=str(origin),
        epoch=None if epoch is None else str(epoch),
        pending_ddl_scn=None if pending is None else SCN.parse(str(pending)),
    )


def upsert(row: CheckpointRow) -> Statement:
    pending = None if row.pending_ddl_scn is None else str(row.pending_ddl_scn)
    return Statement(
        f"INSERT INTO {ident(CHECKPOINT_SCHEMA)}.{ident(CHECKPOINT_TABLE)} "
        "(`channel`, `scn`, `epoch`, `origin`, `pending_ddl_scn`, `updated_at`) "
        "VALUES (%s, %s, %s, %s, %s, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
        "`scn` = VALUES(`scn`), `epoch` = VALUES(`epoch`), `origin` = VALUES(`origin`), "
        "`pending_ddl_scn` = VALUES(`pending_ddl_scn`), `updated_at` = VALUES(`updated_at`)",
        (row.channel, str(row.scn), row.epoch, row.origin, pending),
    )
