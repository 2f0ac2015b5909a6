"""``drc.applied_parts``: what a parallel channel committed beyond its checkpoint.

    drc.applied_parts
    +-------------+-------------+--------------------------------------------------------------+
    | channel  PK | VARCHAR(64) | ChannelConfig.name                                           |
    | worker   PK | INT         | the connection that wrote the row (drc.apply.parallel)       |
    | through     | VARCHAR(96) | the checkpoint the group being written will record           |
    | scns        | LONGTEXT    | SCNs of the source transactions committed out of order       |
    | updated_at  | DATETIME(6) | UTC commit time of the write                                 |
    +-------------+-------------+--------------------------------------------------------------+

A parallel group (drc.apply.parallel) commits its parts on several connections, then moves the
checkpoint (drc.apply.checkpoint) in a transaction of its own. Between the two, the target holds
transactions beyond the checkpoint: each part's transaction upserts its worker's row here, in
the same target transaction as its writes, listing every SCN of the group committed so far
(its own and those of the parts committed before it started). A row whose ``through`` is
beyond the checkpoint is a group left half-committed by a crash: on start its SCNs are skipped
as applied (drc.apply.stages.Idempotency), so each is applied exactly once; a row at or before
the checkpoint says nothing any more. Written by an apply session, the row is also a loop
marker (drc.core.markers.is_marker_table).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from drc.core.markers import APPLIED_PARTS_TABLE, CHECKPOINT_SCHEMA
from drc.core.scn import SCN
from drc.mysql.sql import Statement, ident

log = logging.getLogger(__name__)
_TABLE = f"{ident(CHECKPOINT_SCHEMA)}.{ident(APPLIED_PARTS_TABLE)}"


def create_statement() -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_TABLE} (`channel` VARCHAR(64) NOT NULL, "
        "`worker` INT NOT NULL, `through` VARCHAR(96) NOT NULL, `scns` LONGTEXT NOT NULL, "
        "`updated_at` DATETIME(6) NOT NULL, PRIMARY KEY (`channel`, `worker`)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )


@dataclass(frozen=True, slots=True)
class PartRow:
    """One worker's row, written with its part of a group."""

    channel: str
    worker: int
    through: SCN
    scns: frozenset[SCN]

    def upsert(self) -> Statement:
        listed = " ".join(sorted(str(s) for s in self.scns))
        return Statement(
            f"INSERT INTO {_TABLE} (`channel`, `worker`, `through`, `scns`, `updated_at`) "
            "VALUES (%s, %s, %s, %s, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
            "`through` = VALUES(`through`), `scns` = VALUES(`scns`), "
            "`updated_at` = VALUES(`updated_at`)",
            (self.channel, self.worker, str(self.through), listed),
        )


def select(channel: str) -> Statement:
    return Statement(f"SELECT `through`, `scns` FROM {_TABLE} WHERE `channel` = %s", (channel,))


def delete(channel: str) -> Statement:
    return Statement(f"DELETE FROM {_TABLE} WHERE `channel` = %s", (channel,))


def beyond(rows: Iterable[tuple[object, ...]], checkpoint: SCN) -> set[SCN]:
    """The SCNs committed beyond ``checkpoint``, from the channel's rows (:func:`select`)."""
    found: set[SCN] = set()
    for through, scns in rows:
        if SCN.parse(str(through)) <= checkpoint:
            continue
        found.update(s for s in (SCN.parse(t) for t in str(scns).split()) if s > checkpoint)
    return found


class Queries(Protocol):
    """What reading the rows needs of a target session (drc.apply.target.Target has it)."""

    def query(self, statement: Statement, what: str) -> list[tuple[Any, ...]]: ...


def read(session: Queries, channel: str, after: SCN) -> set[SCN]:
    """The SCNs ``channel``'s parts committed beyond ``after``, read on ``session`` (whose
    transaction the caller ends)."""
    return beyond(session.query(select(channel), "reading applied parts"), after)


def recover(session: Queries, channel: str, checkpoint: SCN) -> set[SCN]:
    """On start, after the checkpoint was read: the transactions a parallel group left
    half-written committed beyond it, logged; the writer skips them, so each is applied once."""
    done = read(session, channel, checkpoint)
    if done:
        log.info(
            "channel %s: %d transactions beyond the checkpoint %s were committed by a "
            "parallel group before a stop; they are skipped", channel, len(done), checkpoint,
        )  # fmt: skip
    return done
