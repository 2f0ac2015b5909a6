"""What runs on the Spark executors: copy chunks from the origin into the target.

Everything a task needs travels in a :class:`Job` (pickled by Spark; the passwords travel with
it, never logged). Per chunk::

    origin   START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY; its binlog position;
             the chunk's rows rendered as VALUES tuples by the origin (drc.snapshot.rows);
             COMMIT                               (drc.snapshot.origin.reading)
    target   INSERT INTO t (...) VALUES <tuples>  (skip_replication: never captured, never
             echoed; @drc_apply: DRC's triggers let the rows be)
             the chunk's journal row: rows, read_at SCN   (drc.snapshot.journal.chunk_done)
             COMMIT

A chunk's journal row matches only while the chunk is not copied, so a chunk written twice
(a retried or speculative task) is rolled back the second time, and a re-run after a kill
copies exactly the chunks whose transaction did not commit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from drc.apply.sink import TargetSession
from drc.bulk.planner import chunk_where
from drc.core.chunks import Chunk
from drc.core.scn import SCN
from drc.mysql.driver import TargetSettings
from drc.mysql.sql import Statement
from drc.snapshot import journal, origin, rows
from drc.snapshot.origin import Stream
from drc.snapshot.rows import Column


@dataclass(frozen=True)
class TableCopy:
    """A source table and where its rows go."""

    source: tuple[str, str]
    target: tuple[str, str]
    columns: tuple[Column, ...]  # the columns written (generated ones left out)


@dataclass(frozen=True)
class Job:
    channel: str
    source: TargetSettings = field(repr=False)  # the origin's database
    target: TargetSettings = field(repr=False)
    stream: Stream
    tables: Mapping[tuple[str, str], TableCopy]
    max_bytes: int  # of one INSERT statement (under the target's max_allowed_packet)


@dataclass(frozen=True, slots=True)
class Copied:
    schema: str
    table: str
    number: int
    rows: int
    read_at: SCN
    seconds: float
    written: bool  # False: another task had copied it


def copy_chunks(job: Job, chunks: Iterable[Chunk]) -> Iterator[Copied]:
    """Copy each chunk (see the module docstring) on one target session. The origin renders
    the next chunk (a thread of its own, its own session) while this one is written, so both
    servers work at once, as a dump piped into a load does."""
    todo = list(chunks)
    ahead = origin.connect(job.source)
    target = TargetSession(job.target)
    try:
        target.execute(Statement("SET SESSION foreign_key_checks = 0", ()), "preparing")
        with ThreadPoolExecutor(1, thread_name_prefix="snapshot-read") as pool:
            pending = pool.submit(_read, job, ahead, todo[0]) if todo else None
            for i, chunk in enumerate(todo):
                assert pending is not None
                began, read = time.monotonic(), pending.result()
                pending = pool.submit(_read, job, ahead, todo[i + 1]) if i + 1 < len(todo) else None
                yield _write(job, target, chunk, read, began)
    finally:
        target.close()
        ahead.close()


def _read(job: Job, conn: object, chunk: Chunk) -> origin.Read | None:
    table = job.tables[(chunk.schema, chunk.table)]
    return origin.read_whole(conn, chunk.schema, chunk.table, table.columns, chunk_where(chunk),
                             job.max_bytes)  # fmt: skip


def _write(
    job: Job, target: TargetSession, chunk: Chunk, read: origin.Read | None, began: float
) -> Copied:
    """The chunk's rows and its journal row, one target transaction (a chunk too big for one
    piece is streamed from a session of its own)."""
    table = job.tables[(chunk.schema, chunk.table)]
    prefix = rows.insert_prefix(*table.target, table.columns)
    what = f"copying chunk {chunk.label()}"
    if read is None:
        source = origin.connect(job.source)
        try:
            with origin.reading(source, chunk.schema, chunk.table, table.columns,
                                chunk_where(chunk), job.max_bytes) as streamed:  # fmt: skip
                for piece in streamed.pieces:
                    target.execute_sql(prefix + piece, what)
                read = streamed
        finally:
            source.close()
    else:
        for piece in read.pieces:
            target.execute_sql(prefix + piece, what)
    read_at = job.stream.scn(read.file, read.pos)
    done = target.execute(journal.chunk_done(job.channel, chunk, read.rows, read_at), what)
    if done != 1:  # another task copied it meanwhile: keep its rows, not these
        target.recover(RuntimeError("chunk already copied"))
    else:
        target.commit()
    return Copied(chunk.schema, chunk.table, chunk.number, read.rows, read_at,
                  time.monotonic() - began, done == 1)  # fmt: skip
