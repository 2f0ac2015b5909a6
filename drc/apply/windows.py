"""The tables ``drc snapshot`` joined to a channel, kept in the target's ``drc`` schema, and the
filter stage that applies their windows (drc.core.windows explains the windows).

    drc.snapshot_tables
    +-----------------+--------------+---------------------------------------------------+
    | channel     PK  | VARCHAR(64)  | ChannelConfig.name                                |
    | src_db      PK  | VARCHAR(64)  | the table on the origin                           |
    | src_table   PK  | VARCHAR(64)  |                                                   |
    | db, tbl         | VARCHAR(64)  | the table on this target (after map_tables)       |
    | copied_at       | VARCHAR(96)  | SCN: changes up to here are in the copy (dropped) |
    | converge_until  | VARCHAR(96)  | SCN: changes up to here apply converging          |
    | copied_rows     | BIGINT       | rows the snapshot wrote                           |
    | joined_at       | DATETIME(6)  | UTC, when the snapshot finished                   |
    +-----------------+--------------+---------------------------------------------------+

A row is written by the snapshot's last transaction, with the channel's checkpoint and the
release of the channel's lease (drc.apply.lease), so a channel sees the table joined exactly
when it may apply its changes. A joined table stays in the channel's selection even when the
config's ``tables`` do not name it (the snapshot said to add it there too).
"""

from __future__ import annotations

import dataclasses

from drc.config_channels import ChannelConfig
from drc.core.events import Transaction
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.scn import SCN
from drc.core.windows import Window, Windows
from drc.mysql.sql import Statement, ident

TABLE = f"{ident(CHECKPOINT_SCHEMA)}.{ident('snapshot_tables')}"


def create_statements() -> list[str]:
    return [
        f"CREATE DATABASE IF NOT EXISTS {ident(CHECKPOINT_SCHEMA)}",
        f"CREATE TABLE IF NOT EXISTS {TABLE} (`channel` VARCHAR(64) NOT NULL, "
        "`src_db` VARCHAR(64) NOT NULL, `src_table` VARCHAR(64) NOT NULL, "
        "`db` VARCHAR(64) NOT NULL, `tbl` VARCHAR(64) NOT NULL, "
        "`copied_at` VARCHAR(96) NOT NULL, `converge_until` VARCHAR(96) NOT NULL, "
        "`copied_rows` BIGINT NOT NULL DEFAULT 0, `joined_at` DATETIME(6) NOT NULL, "
        "PRIMARY KEY (`channel`, `src_db`, `src_table`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
    ]


def select(channel: str) -> Statement:
    return Statement(
        f"SELECT `src_db`, `src_table`, `db`, `tbl`, `copied_at`, `converge_until` FROM {TABLE} "
        "WHERE `channel` = %s ORDER BY `src_db`, `src_table`",
        (channel,),
    )


def parse(rows: list[tuple[object, ...]]) -> Windows:
    return Windows(
        Window(
            (str(r[0]), str(r[1])),
            (str(r[2]), str(r[3])),
            SCN.parse(str(r[4])),
            SCN.parse(str(r[5])),
        )  # fmt: skip
        for r in rows
    )


def join(channel: str, window: Window, rows: int) -> Statement:
    """The table joined to the channel (a snapshot taken again replaces its window)."""
    return Statement(
        f"REPLACE INTO {TABLE} (`channel`, `src_db`, `src_table`, `db`, `tbl`, `copied_at`, "
        "`converge_until`, `copied_rows`, `joined_at`) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, "
        "UTC_TIMESTAMP(6))",
        (
            channel,
            *window.source,
            *window.target,
            str(window.copied_at),
            str(window.converge_until),
            rows,
        ),  # fmt: skip
    )


def unselected(channel: ChannelConfig, joined: Windows) -> list[str]:
    """Joined source tables (``db.table``) the channel's ``tables`` leave out; none when the
    channel selects everything (a snapshot refuses the tables ``exclude`` names)."""
    if not channel.tables:
        return []
    selected = channel.table_filter()
    return [n for n in joined.source_names() if not selected.matches(*n.split(".", 1))]


def widened(channel: ChannelConfig, joined: Windows) -> ChannelConfig:
    """``channel`` with the joined tables it leaves out selected too (bulk catch-up builds its
    chain from this; a streaming channel rebuilds its own: drc.apply.source)."""
    extra = unselected(channel, joined)
    return channel.model_copy(update={"tables": (*channel.tables, *extra)}) if extra else channel


class DropCopied:
    """Filter stage (after MapNames: target names): drops the changes of a joined table that
    its copy already holds (drc.core.windows). ``windows`` is replaced when the channel reads
    the registry again."""

    def __init__(self, windows: Windows | None = None) -> None:
        self.windows = windows or Windows()
        self.dropped = 0

    def __call__(self, txn: Transaction) -> Transaction | None:
        windows = self.windows
        if not windows:
            return txn
        kept = tuple(c for c in txn.changes if not windows.drops(txn.scn, c.schema, c.table))
        if len(kept) == len(txn.changes):
            return txn
        self.dropped += len(txn.changes) - len(kept)
        return dataclasses.replace(txn, changes=kept)
