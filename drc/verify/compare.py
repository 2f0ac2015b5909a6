"""Chunks compared on both servers: counts and checksums, then down to rows where they differ.

Runs inside a Spark task. A task gets a run of adjacent chunks and compares them in
``streams`` threads (the servers do the work, the threads wait on them), each with one
connection to either side, kept for all its chunks, the two sides queried at once. A thread
checksums several adjacent chunks in one query while they agree, as many as keep the query
near ``target_s`` (drc.core.chunks.Stride, pt-table-checksum's adaptive chunk size)::

    stride: COUNT + BIT_XOR(row hash) over k adjacent chunks     (drc.core.rowsum)
            equal                   -> done (k chunks)
            differ                  -> each chunk of the stride on its own:
    chunk:  COUNT + BIT_XOR(row hash) on source and target
            equal                   -> done
            differ, big             -> split at every leaf_rows-th key of the source
                                       (drc.bulk.planner.walk_boundaries), sums again
            differ, small or keyless-> key + row hash of every row on both sides, compared
                                       (a keyless table: row hashes as a multiset)

Only counts, checksums and (for differing leaves) keys with hashes cross the network. The
differences found are candidates: drc.verify.recheck decides which are real.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drc.bulk.planner import chunk_where, walk_boundaries
from drc.core.chunks import Chunk, Stride, from_boundaries, merged, split_even, take_adjacent
from drc.core.rowsum import (
    Difference,
    chunk_sum,
    compare_multisets,
    compare_sums,
    row_hash,
    row_sums,
)
from drc.mysql import sql
from drc.verify.sides import Endpoint, connect, query

STRIDE_TARGET_S = 0.25  # a checksum query covers as many adjacent chunks as take about this


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A table pair as compared: names on each side, the columns hashed, the key (empty: a
    keyless table, compared as a multiset of rows)."""

    source: tuple[str, str]
    target: tuple[str, str]
    columns: tuple[str, ...]
    types: tuple[str, ...]
    key: tuple[str, ...]
    nullable: tuple[bool, ...] | None = None  # None: all may be NULL

    @property
    def name(self) -> str:
        return ".".join(self.source)

    def hash_expr(self) -> str:
        return row_hash([sql.ident(c) for c in self.columns], self.types, self.nullable)

    @property
    def floats(self) -> frozenset[str]:
        """The FLOAT columns: matched and read as drc.mysql.sql.row_values and read_column."""
        return sql.float_columns(self.columns, self.types)

    def quoted_key(self) -> list[str]:
        """The key columns as read: a FLOAT at full precision, so it can be looked up."""
        return [sql.read_column(c, self.floats) for c in self.key]


@dataclass(frozen=True, slots=True)
class Sides:
    """What an executor needs to reach both servers (pickled to the tasks)."""

    source: Endpoint
    target: Endpoint
    leaf_rows: int = 1000
    streams: int = 2  # chunk comparisons a task runs at once
    stride_target_s: float = STRIDE_TARGET_S


@dataclass
class ChunkResult:
    table: str
    number: int
    rows: int  # on the source
    seconds: float = 0.0
    differs: bool = False
    candidates: list[Difference] = field(default_factory=list)


class Pair:
    """A connection to each side and a thread to query them at once."""

    def __init__(self, sides: Sides) -> None:
        self.sides = sides
        self.source = connect(sides.source)
        self.target = connect(sides.target)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="verify-target")
        self._names = ("", "")

    def both(self, text: Callable[[str], str], params: tuple[Any, ...]) -> Any:
        """The same query on both sides (each with its own table name), run at once."""
        source_name, target_name = self._names
        later = self._pool.submit(query, self.target, text(target_name), params)
        mine = query(self.source, text(source_name), params)
        return mine, later.result()

    def for_table(self, spec: TableSpec) -> Pair:
        self._names = (sql.table_name(*spec.source), sql.table_name(*spec.target))
        return self

    def close(self) -> None:
        self._pool.shutdown()
        for conn in (self.source, self.target):
            conn.close()


def compare_partition(
    sides: Sides, specs: dict[str, TableSpec], chunks: Iterable[Chunk]
) -> Iterator[ChunkResult]:
    """Every chunk of the partition compared, ``sides.streams`` at once (a Spark
    mapPartitions function); results come as they are done."""
    runs = [r for r in split_even(list(chunks), sides.streams) if r]
    if len(runs) <= 1:
        yield from compare_run(sides, specs, runs[0] if runs else [])
        return
    done: queue.Queue[Any] = queue.Queue()
    stop = threading.Event()

    def work(run: list[Chunk]) -> None:
        try:
            for result in compare_run(sides, specs, run, stop):
                done.put(result)
        except BaseException as exc:  # handed to the task's thread, which raises it
            done.put(exc)
        finally:
            done.put(None)

    threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in runs]
    for thread in threads:
        thread.start()
    running = len(threads)
    try:
        while running:
            item = done.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def compare_run(
    sides: Sides,
    specs: dict[str, TableSpec],
    run: list[Chunk],
    stop: threading.Event | None = None,
) -> Iterator[ChunkResult]:
    """Chunks in order on one connection to each side, adjacent ones checksummed together
    while they agree (see the module docstring)."""
    if not run:
        return
    pair = Pair(sides)
    stride = Stride(sides.stride_target_s)
    try:
        at = 0
        while at < len(run) and not (stop is not None and stop.is_set()):
            group = take_adjacent(run, at, stride.size)
            at += len(group)
            spec = specs[f"{group[0].schema}.{group[0].table}"]
            pair.for_table(spec)
            if len(group) == 1:
                yield compare_chunk(pair, spec, group[0], stride)
                continue
            began = time.monotonic()
            (count, _), differs = _sums(pair, spec, merged(group))
            stride.observe(time.monotonic() - began, len(group))
            if not differs:
                yield ChunkResult(spec.name, group[0].number, count,
                                  time.monotonic() - began)  # fmt: skip
                continue
            for chunk in group:
                yield compare_chunk(pair, spec, chunk)
    finally:
        pair.close()


def compare_chunk(
    pair: Pair, spec: TableSpec, chunk: Chunk, stride: Stride | None = None
) -> ChunkResult:
    began = time.monotonic()
    (count, _), differs = _sums(pair, spec, chunk)
    if stride is not None:
        stride.observe(time.monotonic() - began, 1)
    result = ChunkResult(spec.name, chunk.number, count)
    if differs:
        result.differs = True
        result.candidates = list(_descend(pair, spec, chunk))
    result.seconds = time.monotonic() - began
    return result


def _sums(pair: Pair, spec: TableSpec, chunk: Chunk) -> tuple[tuple[int, int], bool]:
    where = chunk_where(chunk)
    mine, theirs = pair.both(lambda t: chunk_sum(t, spec.hash_expr(), where.sql), where.params)
    source = (int(mine[0][0]), int(mine[0][1]))
    return source, source != (int(theirs[0][0]), int(theirs[0][1]))


def _descend(pair: Pair, spec: TableSpec, chunk: Chunk) -> Iterator[Difference]:
    leaf = pair.sides.leaf_rows
    if spec.key and chunk.estimated_rows > 4 * leaf and not chunk.whole_table:
        bounds = walk_boundaries(pair.source, *spec.source, spec.key, leaf, chunk.lower,
                                 chunk.upper)  # fmt: skip
        subs = from_boundaries(chunk.schema, chunk.table, spec.key, bounds, leaf, chunk.lower,
                               chunk.upper)  # fmt: skip
        for sub in subs:
            if _sums(pair, spec, sub)[1]:
                yield from _rows(pair, spec, sub)
        return
    yield from _rows(pair, spec, chunk)


def _rows(pair: Pair, spec: TableSpec, chunk: Chunk) -> list[Difference]:
    where = chunk_where(chunk)
    mine, theirs = pair.both(
        lambda t: row_sums(t, spec.quoted_key(), spec.hash_expr(), where.sql), where.params
    )
    if not spec.key:
        return compare_multisets(_multiset(mine), _multiset(theirs))
    width = len(spec.key)
    return compare_sums(
        {tuple(r[:width]): int(r[width]) for r in mine},
        {tuple(r[:width]): int(r[width]) for r in theirs},
    )


def _multiset(rows: Iterable[tuple[Any, ...]]) -> dict[int, int]:
    return {int(h): int(n) for h, n in rows}
