"""Where a catch-up's executor work runs: on Spark (``local[*]`` or a cluster), or inline in
this process, one task after another (a streaming channel finishing an interrupted run,
drc.apply.handover: no JVM in a long-running node, no second SparkContext next to a periodic
verify's).

Both run the same executor functions (drc.catchup.executor) on the same slices, partitions
and batches, so either finishes what the other began: a batch committed by one is skipped by
the other (drc.apply.catchup_journal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from drc.apply.retry import Stopped
from drc.catchup import executor
from drc.catchup.executor import Job, PartitionResult, SegmentScan
from drc.client import SegmentInfo
from drc.core.events import Transaction
from drc.core.reduce import Span
from drc.core.scn import SCN
from drc.core.target_table import TargetTable

Definitions = Mapping[tuple[str, str], TargetTable]
Infos = Sequence[SegmentInfo]
Bounds = tuple[SCN, SCN]  # (after, end]
Out = Callable[[str], None]


class SpanTask(NamedTuple):
    """A span's work: its slices (``pieces``), the target's definitions, and its name in
    progress lines (``what``)."""

    job: Job
    span: Span
    pieces: Sequence[executor.Slice]
    definitions: Definitions
    what: str


@contextmanager
def runner(master: str | None, name: str, stopped: Callable[[], bool]) -> Iterator[Runner]:
    """A Spark runner on ``master``, or the inline one for ``master`` None."""
    if master is None:
        yield Inline(stopped)
        return
    from drc.spark.session import LIGHT_JVM, build_session, with_task_retries

    spark = build_session(with_task_retries(master), f"drc-catchup-{name}", conf=LIGHT_JVM)
    try:
        yield OnSpark(spark.sparkContext)
    finally:
        spark.stop()


class OnSpark:
    """Each segment, slice and partition a Spark task. Its methods and :class:`Inline`'s:
    ``scan`` is pass 1 over every segment (executor.scan), ``fragments`` the fragments of
    the DDL transactions at ``scns`` (executor.fragments_at), ``span`` the row changes
    decoded and what each partition did (executor.read_span, then executor.apply_partition
    per partition)."""

    def __init__(self, sc: Any) -> None:
        self.sc = sc

    def scan(self, job: Job, infos: Infos, bounds: Bounds, out: Out) -> list[SegmentScan]:
        after, end = bounds
        from drc.spark.progress import progress

        with progress(self.sc, out, "copying and scanning segments"):
            return list(
                self.sc.parallelize(list(infos), max(1, len(infos)))
                .mapPartitions(lambda part: executor.scan(job, part, after, end))
                .collect()
            )

    def fragments(
        self, job: Job, infos: Sequence[SegmentInfo], scns: set[SCN]
    ) -> list[Transaction]:
        return list(
            self.sc.parallelize(list(infos), max(1, len(infos)))
            .mapPartitions(lambda part: executor.fragments_at(job, part, scns))
            .collect()
        )

    def span(self, task: SpanTask, out: Out) -> tuple[int, list[PartitionResult]]:
        job, span, pieces, definitions, what = task
        from drc.spark.progress import progress

        sc, key = self.sc, span_key(span)
        broadcast = sc.broadcast(dict(definitions))
        decoded = sc.accumulator(0)

        def read(part: Iterator[executor.Slice]) -> Iterator[Any]:
            keys = {name: t.primary_key for name, t in broadcast.value.items()}
            return executor.read_span(job, part, span, keys, decoded.add)

        def apply(index: int, items: Iterator[Any]) -> Iterator[PartitionResult]:
            rows = (item for _, item in items)
            yield executor.apply_partition(job, key, broadcast.value, index, rows)

        try:
            with progress(sc, out, what):
                routed = sc.parallelize(list(pieces), len(pieces)).mapPartitions(read)
                shuffled = routed.partitionBy(job.partitions, lambda part: part)
                results = list(shuffled.mapPartitionsWithIndex(apply).collect())
        finally:
            broadcast.unpersist()
        return int(decoded.value), results


class Inline:
    """Every task in this process, one after another; ``stopped`` is asked between them."""

    def __init__(self, stopped: Callable[[], bool]) -> None:
        self.stopped = stopped

    def scan(self, job: Job, infos: Infos, bounds: Bounds, out: Out) -> list[SegmentScan]:
        after, end = bounds
        found = []
        for scanned in executor.scan(job, infos, after, end):
            self._check()
            found.append(scanned)
        return found

    def fragments(
        self, job: Job, infos: Sequence[SegmentInfo], scns: set[SCN]
    ) -> list[Transaction]:
        return list(executor.fragments_at(job, infos, scns))

    def span(self, task: SpanTask, out: Out) -> tuple[int, list[PartitionResult]]:
        job, span, pieces, definitions, what = task
        keys = {name: t.primary_key for name, t in definitions.items()}
        decoded = [0]
        parts: dict[int, list[Any]] = {}
        for part, item in executor.read_span(job, pieces, span, keys, decoded.append):
            parts.setdefault(part, []).append(item)
        results = []
        for index in range(job.partitions):  # as Spark's: every partition, even an empty one
            self._check()
            items = parts.pop(index, [])
            results.append(executor.apply_partition(job, span_key(span), definitions, index, items))
            out(f"{what}: partition {index + 1}/{job.partitions} written")
        return sum(decoded), results

    def _check(self) -> None:
        if self.stopped():
            raise Stopped()


Runner = OnSpark | Inline  # the same methods, the same results


def span_key(span: Span) -> str:
    """A span's name in drc.catchup_done (the same for every runner)."""
    return f"{span.after}..{span.end}"
