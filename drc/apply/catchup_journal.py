"""What a catch-up run has done, in the target's ``drc`` schema, so a re-run does nothing twice.

    drc.catchup_run                          one row per channel while a run is unfinished
    +-------------+-------------+------------------------------------------------------------+
    | channel  PK | VARCHAR(64) | ChannelConfig.name                                         |
    | to_scn      | VARCHAR(96) | the range end the run chose (a re-run keeps it: the same   |
    |             |             | range gives the same spans, partitions and batches)        |
    | partitions  | INT         | how many partitions its spans were cut into                |
    | batch_      | INT         | net changes per batch (a re-run cuts the same batches);    |
    |   changes   |             |                                                            |
    | owner       | VARCHAR(128)| the lease owner that started it (drc.apply.lease)          |
    | started_at  | DATETIME(6) | UTC                                                        |
    +-------------+-------------+------------------------------------------------------------+

    drc.catchup_done                         one row per batch written
    +-------------+-------------+------------------------------------------------------------+
    | channel  PK | VARCHAR(64) |                                                            |
    | span     PK | VARCHAR(200)| the span's SCNs ``after..end``                             |
    | part     PK | INT         | the partition                                              |
    | batch    PK | INT         | the batch within it (its changes in SCN order, cut at a    |
    |             |             | fixed size: the same input gives the same batches)         |
    | changes     | INT         | net changes the batch applied                              |
    +-------------+-------------+------------------------------------------------------------+

A batch's row is inserted in the same target transaction as its writes, so after a kill the
target holds both or neither, and a re-run skips exactly the batches that committed (keyless
tables' inserts are not idempotent: this is what keeps them exactly once). The run's final
transaction writes the channel checkpoint at the range end, deletes both kinds of rows and
releases the lease (drc.apply.lease), so streaming continues from exactly there.

While a ``catchup_run`` row exists the target holds part of its range beyond the channel
checkpoint: the streaming channel reads it with the lease (:func:`channel_state`) and applies
nothing of its own until the run is finished (drc.apply.handover, CatchupUnfinishedError):
once the lease expired it finishes the run itself (drc.catchup.driver.finish_interrupted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drc.apply import lease
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.scn import SCN
from drc.mysql.sql import Statement, ident

_RUN = f"{ident(CHECKPOINT_SCHEMA)}.{ident('catchup_run')}"
_LEASE = f"{ident(CHECKPOINT_SCHEMA)}.{ident(lease.TABLE)}"
_DONE = f"{ident(CHECKPOINT_SCHEMA)}.{ident('catchup_done')}"


def create_statements() -> list[str]:
    return [
        f"CREATE DATABASE IF NOT EXISTS {ident(CHECKPOINT_SCHEMA)}",
        f"CREATE TABLE IF NOT EXISTS {_RUN} (`channel` VARCHAR(64) NOT NULL, "
        "`to_scn` VARCHAR(96) NOT NULL, `partitions` INT NOT NULL, `batch_changes` INT NOT NULL, "
        "`owner` VARCHAR(128) NOT NULL, `started_at` DATETIME(6) NOT NULL, "
        "PRIMARY KEY (`channel`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        f"CREATE TABLE IF NOT EXISTS {_DONE} (`channel` VARCHAR(64) NOT NULL, "
        "`span` VARCHAR(200) NOT NULL, `part` INT NOT NULL, `batch` INT NOT NULL, "
        "`changes` INT NOT NULL, PRIMARY KEY (`channel`, `span`, `part`, `batch`)) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    ]


@dataclass(frozen=True, slots=True)
class Run:
    """An unfinished run of a channel, as ``catchup_run`` keeps it."""

    channel: str
    to: SCN
    partitions: int
    batch_changes: int
    owner: str
    started_at: object  # datetime, UTC

    def describe(self) -> str:
        return f"catch-up run {self.owner} (started {self.started_at} UTC, up to {self.to})"


_COLUMNS = ("to_scn", "partitions", "batch_changes", "owner", "started_at")


def select_run(channel: str) -> Statement:
    columns = ", ".join(ident(c) for c in _COLUMNS)
    return Statement(f"SELECT {columns} FROM {_RUN} WHERE `channel` = %s", (channel,))


def parse_run(channel: str, row: Sequence[object]) -> Run | None:
    """A row of :func:`select_run` (None: all NULL, no run)."""
    to, partitions, batch_changes, owner, started = row
    if to is None:
        return None
    return Run(channel, SCN.parse(str(to)), int(str(partitions)), int(str(batch_changes)),
               str(owner), started)  # fmt: skip


def channel_state(channel: str) -> Statement:
    """The streaming channel's check inside its apply transaction: the lease as
    drc.apply.lease.state_statement reads it (owner, held now, taken_at, with its shared
    lock), then the unfinished run's :func:`select_run` columns (NULLs: none). No lease row
    means no catch-up ever took the channel, so no run either."""
    columns = ", ".join(f"r.{ident(c)}" for c in _COLUMNS)
    return Statement(
        f"SELECT l.`owner`, l.`expires_at` > UTC_TIMESTAMP(6), l.`taken_at`, {columns} "
        f"FROM {_LEASE} l LEFT JOIN {_RUN} r ON r.`channel` = l.`channel` "
        "WHERE l.`channel` = %s LOCK IN SHARE MODE",
        (channel,),
    )


def start_run(channel: str, to: SCN, partitions: int, batch_changes: int, owner: str) -> Statement:
    return Statement(
        f"REPLACE INTO {_RUN} (`channel`, `to_scn`, `partitions`, `batch_changes`, `owner`, "
        "`started_at`) VALUES (%s, %s, %s, %s, %s, UTC_TIMESTAMP(6))",
        (channel, str(to), partitions, batch_changes, owner),
    )


def is_done(channel: str, span: str, part: int, batch: int) -> Statement:
    """A plain read: a locking one would take gap locks that make the partitions' inserts of
    their own rows wait for each other. Two writers of one batch cannot both commit anyway:
    one run holds the lease, and the primary key refuses a second row."""
    return Statement(
        f"SELECT 1 FROM {_DONE} WHERE `channel` = %s AND `span` = %s AND `part` = %s "
        "AND `batch` = %s",
        (channel, span, part, batch),
    )


def mark_done(channel: str, span: str, part: int, batch: int, changes: int) -> Statement:
    return Statement(
        f"INSERT INTO {_DONE} (`channel`, `span`, `part`, `batch`, `changes`) "
        "VALUES (%s, %s, %s, %s, %s)",
        (channel, span, part, batch, changes),
    )


def finish(channel: str) -> list[Statement]:
    """Forget the run (in its final transaction, with the checkpoint and the lease release)."""
    return [
        Statement(f"DELETE FROM {_DONE} WHERE `channel` = %s", (channel,)),
        Statement(f"DELETE FROM {_RUN} WHERE `channel` = %s", (channel,)),
    ]
