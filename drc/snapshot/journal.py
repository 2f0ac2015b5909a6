"""Where a snapshot resumes: its run and its chunks, in the target's ``drc`` schema.

    drc.snapshot_run                      one row per channel while a snapshot is unfinished
    +-----------+--------------+-------------------------------------------------------+
    | channel PK| VARCHAR(64)  | ChannelConfig.name                                    |
    | owner     | VARCHAR(128) | the lease owner: a re-run takes the lease over at once |
    | tables    | TEXT         | JSON: the source tables it copies, in order            |
    | started_at| DATETIME(6)  | UTC                                                    |
    +-----------+--------------+-------------------------------------------------------+

    drc.snapshot_chunk                    the plan, and what is copied
    +-----------------+--------------+----------------------------------------------------+
    | channel, src_db, src_table, number  PK                                             |
    | key_columns     | TEXT         | JSON list (empty: the whole table, one read)       |
    | lower, upper    | BLOB NULL    | the key range (lower, upper], DRC's value codec    |
    | estimated_rows  | BIGINT       | the planner's estimate                             |
    | copied_rows     | BIGINT NULL  | NULL until the chunk is copied                     |
    | read_at         | VARCHAR(96)  | SCN of the origin's binlog at the chunk's read     |
    +-----------------+--------------+----------------------------------------------------+

A chunk's rows and its ``copied_rows``/``read_at`` commit in one target transaction, so after a
kill the target holds a chunk's rows exactly when its row says so: a re-run copies only the
chunks still NULL, from the plan recorded here (a new plan could cut the keys elsewhere). The
snapshot's last transaction (drc.snapshot.driver) deletes both with the channel's checkpoint,
the joined tables (drc.apply.windows) and the lease release.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from drc.core.chunks import Chunk
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.core.scn import SCN
from drc.core.value_codec import decode_value, encode_value
from drc.mysql.sql import Statement, ident

_RUN = f"{ident(CHECKPOINT_SCHEMA)}.{ident('snapshot_run')}"
_CHUNK = f"{ident(CHECKPOINT_SCHEMA)}.{ident('snapshot_chunk')}"


def create_statements() -> list[str]:
    return [
        f"CREATE DATABASE IF NOT EXISTS {ident(CHECKPOINT_SCHEMA)}",
        f"CREATE TABLE IF NOT EXISTS {_RUN} (`channel` VARCHAR(64) NOT NULL, "
        "`owner` VARCHAR(128) NOT NULL, `tables` TEXT NOT NULL, `started_at` DATETIME(6) "
        "NOT NULL, PRIMARY KEY (`channel`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        f"CREATE TABLE IF NOT EXISTS {_CHUNK} (`channel` VARCHAR(64) NOT NULL, "
        "`src_db` VARCHAR(64) NOT NULL, `src_table` VARCHAR(64) NOT NULL, `number` INT NOT "
        "NULL, `key_columns` TEXT NOT NULL, `lower` BLOB NULL, `upper` BLOB NULL, "
        "`estimated_rows` BIGINT NOT NULL, `copied_rows` BIGINT NULL, `read_at` VARCHAR(96) "
        "NULL, PRIMARY KEY (`channel`, `src_db`, `src_table`, `number`)) ENGINE=InnoDB "
        "DEFAULT CHARSET=utf8mb4",
    ]


@dataclass(frozen=True, slots=True)
class Run:
    owner: str
    tables: tuple[str, ...]  # "db.table" on the origin


@dataclass(frozen=True, slots=True)
class Recorded:
    """A chunk of the plan and, once copied, its rows and the SCN it was read at."""

    chunk: Chunk
    copied_rows: int | None = None
    read_at: SCN | None = None

    @property
    def done(self) -> bool:
        return self.copied_rows is not None


def select_run(channel: str) -> Statement:
    return Statement(f"SELECT `owner`, `tables` FROM {_RUN} WHERE `channel` = %s", (channel,))


def parse_run(row: tuple[Any, ...]) -> Run:
    return Run(str(row[0]), tuple(json.loads(str(row[1]))))


def start_run(channel: str, run: Run) -> Statement:
    return Statement(
        f"REPLACE INTO {_RUN} (`channel`, `owner`, `tables`, `started_at`) "
        "VALUES (%s, %s, %s, UTC_TIMESTAMP(6))",
        (channel, run.owner, json.dumps(list(run.tables))),
    )


def plan_chunk(channel: str, chunk: Chunk) -> Statement:
    return Statement(
        f"INSERT INTO {_CHUNK} (`channel`, `src_db`, `src_table`, `number`, `key_columns`, "
        "`lower`, `upper`, `estimated_rows`) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            channel,
            chunk.schema,
            chunk.table,
            chunk.number,
            json.dumps(list(chunk.index_columns)),
            _bound(chunk.lower),
            _bound(chunk.upper),
            chunk.estimated_rows,
        ),  # fmt: skip
    )


def select_chunks(channel: str, schema: str, table: str) -> Statement:
    return Statement(
        "SELECT `number`, `key_columns`, `lower`, `upper`, `estimated_rows`, `copied_rows`, "
        f"`read_at` FROM {_CHUNK} WHERE `channel` = %s AND `src_db` = %s AND `src_table` = %s "
        "ORDER BY `number`",
        (channel, schema, table),
    )


def parse_chunks(schema: str, table: str, rows: list[tuple[Any, ...]]) -> list[Recorded]:
    found = []
    for number, columns, lower, upper, estimate, copied, read_at in rows:
        chunk = Chunk(schema, table, tuple(json.loads(str(columns))), _unbound(lower),
                      _unbound(upper), int(estimate), int(number))  # fmt: skip
        found.append(Recorded(
            chunk, None if copied is None else int(copied),
            None if read_at is None else SCN.parse(str(read_at)),
        ))  # fmt: skip
    return found


def chunk_done(channel: str, chunk: Chunk, rows: int, read_at: SCN) -> Statement:
    """In the chunk's own transaction; matches only a chunk not yet copied, so a second
    writer of the same chunk finds 0 rows and rolls back (drc.snapshot.copier)."""
    return Statement(
        f"UPDATE {_CHUNK} SET `copied_rows` = %s, `read_at` = %s WHERE `channel` = %s AND "
        "`src_db` = %s AND `src_table` = %s AND `number` = %s AND `copied_rows` IS NULL",
        (rows, str(read_at), channel, chunk.schema, chunk.table, chunk.number),
    )


def copied_so_far(channel: str) -> Statement:
    """(chunks copied, their rows, chunks planned) of the channel's run: progress lines."""
    return Statement(
        "SELECT COUNT(`copied_rows`), COALESCE(SUM(`copied_rows`), 0), COUNT(*) FROM "
        f"{_CHUNK} WHERE `channel` = %s",
        (channel,),
    )


def forget_table(channel: str, schema: str, table: str) -> Statement:
    return Statement(
        f"DELETE FROM {_CHUNK} WHERE `channel` = %s AND `src_db` = %s AND `src_table` = %s",
        (channel, schema, table),
    )


def finish(channel: str) -> list[Statement]:
    return [
        Statement(f"DELETE FROM {_CHUNK} WHERE `channel` = %s", (channel,)),
        Statement(f"DELETE FROM {_RUN} WHERE `channel` = %s", (channel,)),
    ]


def _bound(values: tuple[Any, ...] | None) -> bytes | None:
    return None if values is None else encode_value(list(values))


def _unbound(data: Any) -> tuple[Any, ...] | None:
    return None if data is None else tuple(decode_value(bytes(data)))
