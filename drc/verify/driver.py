"""``drc verify``: are a channel's source and target tables the same, row for row?

plan (driver)        the channel's tables on the origin database (``[channels.origin_db]``),
                     each checked against the target's definition, split into key ranges by
                     the planner (drc.bulk.planner) on the source
compare (executors)  every chunk on both servers at once: count + checksum, descending into
                     differing chunks down to keys (drc.verify.compare); Spark tasks
recheck (driver)     differing rows read again after both directions of replication passed
                     the points they were read at, until confirmed, equal, or out of rounds
                     (drc.verify.recheck, the rule in drc.core.settle)
repair (driver)      with --repair, each confirmed difference written over on one side
                     without echo, and logged (drc.verify.repair)

The result is a :class:`Report`: per table rows checked, chunks, differences by kind, the
first keys and the time; ``differences`` > 0 means the sides differ.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from drc.apply.lww_guard import GUARD_NAME, local_api_url
from drc.apply.service import target_settings
from drc.bulk.planner import CHUNK_ROWS, TablePlan, list_tables, plan_table
from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.core.chunks import Chunk, split_even
from drc.core.rowsum import Difference, TableReport
from drc.core.tablefilter import TableFilter
from drc.spark.progress import PROGRESS_EVERY_S, active_tasks, every
from drc.verify import compare, repair
from drc.verify.compare import ChunkResult, Sides, TableSpec
from drc.verify.recheck import Follower, Recheck, Stream
from drc.verify.sides import (
    Endpoint,
    VerifyError,
    checkpoint_of,
    checkpoints_from,
    columns,
    connect,
)

log = logging.getLogger(__name__)


@dataclass
class Options:
    tables: str | None = None  # --tables, source names
    repair: bool = False
    master: str = "local[*]"
    chunk_rows: int = CHUNK_ROWS
    leaf_rows: int = 1000
    streams: int = 2  # chunk comparisons each Spark task runs at once
    max_rounds: int = 6
    wait_timeout_s: float = 60.0
    keys_shown: int = 20
    recheck: bool = True  # False: report what the first comparison found (a frozen pair)
    job_group: str | None = None  # the Spark job group of the comparison (to cancel it)
    stop: threading.Event | None = None  # set: give up at the next wait (drc run stopping)


@dataclass
class Report:
    channel: str
    tables: list[TableReport] = field(default_factory=list)
    seconds: float = 0.0
    rounds: int = 0
    stalled: str | None = None  # the rechecks ended early: a channel did not move

    @property
    def differences(self) -> int:
        problems = sum(len(t.differences) - t.repaired for t in self.tables)
        return problems + sum(1 for t in self.tables if t.skipped)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)


def run_verify(
    config: DrcConfig,
    channel_name: str,
    options: Options | None = None,
    *,
    out: Callable[[str], None] = print,
    session: Any = None,
) -> Report:
    """Compare the channel's source and target tables (see the module docstring). ``session``:
    a running SparkSession to use (else one is built on ``options.master`` and stopped)."""
    options = options or Options()
    began = time.monotonic()
    say = out
    out = lambda line: say(f"[{time.monotonic() - began:6.1f}s] {line}")  # noqa: E731
    channel = find_channel(config, channel_name)
    sides = _sides(config, channel, options)
    source, target = connect(sides.source), connect(sides.target)
    report = Report(channel.name)
    spark = _Spark(session, options.master)  # its JVM starts while the tables are planned
    try:
        specs, plans = _plan(source, target, channel, options, report, out)
        chunks = [c for p in plans for c in p.chunks]
        out(f"{len(specs)} tables, {len(chunks)} chunks of about {options.chunk_rows} rows")
        results = _compare(sides, specs, chunks, options, spark.get(), out) if chunks else []
        candidates = _tally(report, results)
        _check_stop(options)
        if candidates:
            _recheck(config, channel, source, target, specs, candidates, options, report, out)
    finally:
        source.close()
        target.close()
        spark.stop()
    report.seconds = time.monotonic() - began
    return report


def find_channel(config: DrcConfig, name: str) -> ChannelConfig:
    for channel in config.channels:
        if channel.name == name:
            return channel
    known = ", ".join(c.name for c in config.channels) or "none"
    raise VerifyError(f"no channel named {name!r} in the config (channels: {known})")


def _sides(config: DrcConfig, channel: ChannelConfig, options: Options) -> Sides:
    if channel.origin_db is None:
        raise VerifyError(
            f"channel {channel.name} has no [channels.origin_db]: verify reads the origin "
            f"datacenter's ({channel.origin}) database directly; add its host, port, user and "
            "password_file to the channel (docs/verify.md)"
        )
    return Sides(
        Endpoint.of(target_settings(channel.origin_db)),
        Endpoint.of(target_settings(config.target_or_source())),
        options.leaf_rows,
        options.streams,
    )


def _plan(
    source: Any,
    target: Any,
    channel: ChannelConfig,
    options: Options,
    report: Report,
    out: Callable[[str], None],
) -> tuple[dict[str, TableSpec], list[TablePlan]]:
    """Table specs and plans; tables that cannot be compared get a report with the reason."""
    wanted = channel.table_filter()
    asked = TableFilter.parse_list(options.tables) if options.tables else None
    names = [(s, t) for s, t in list_tables(source, wanted) if asked is None or asked.matches(s, t)]
    if not names:
        raise VerifyError(
            f"no table of the origin database matches channel {channel.name}'s tables"
            + (f" and --tables {options.tables}" if options.tables else "")
        )
    specs, plans = {}, []
    for schema, table in names:
        name = f"{schema}.{table}"
        mapped = channel.map_tables.get(name, name).split(".", 1)
        entry = TableReport(name, ".".join(mapped))
        spec, why = _spec(source, target, channel, (schema, table), (mapped[0], mapped[1]))
        if spec is None:
            entry.skipped = why
            out(f"{name}: skipped, {why}")
            report.tables.append(entry)
            continue
        plan = plan_table(source, schema, table, options.chunk_rows)
        spec = replace(spec, key=plan.index_columns)
        entry.note, entry.chunks = plan.note, len(plan.chunks)
        if plan.note:
            out(f"{name}: {plan.note}")
        specs[name] = spec
        plans.append(plan)
        report.tables.append(entry)
    return specs, plans


def _spec(
    source: Any,
    target: Any,
    channel: ChannelConfig,
    src: tuple[str, str],
    dst: tuple[str, str],
) -> tuple[TableSpec | None, str]:
    if ".".join(src) in channel.map_columns:
        return None, "its columns are renamed by map_columns, which verify does not compare"
    if (stage := channel.row_stage(*src)) is not None:
        return None, f"the channel's {stage} selects it, which verify does not compare"
    mine, theirs = columns(source, *src), columns(target, *dst)
    if not theirs:
        return None, f"the target has no table {'.'.join(dst)} (a snapshot would create it)"
    if [(c.name.lower(), c.definition) for c in mine] != [
        (c.name.lower(), c.definition) for c in theirs
    ]:
        left = {(c.name, c.definition) for c in mine} ^ {(c.name, c.definition) for c in theirs}
        shown = ", ".join(f"{n} {d}" for n, d in sorted(left)[:6]) or "the column order"
        return None, f"the definitions differ between the sides ({shown}); align them first"
    names = tuple(c.name for c in mine)
    types, nullable = tuple(c.data_type for c in mine), tuple(c.nullable for c in mine)
    return TableSpec(src, dst, names, types, (), nullable), ""


# A Python worker serves task after task (its imports and connections' code loaded once);
# no console progress bar on stderr (verify prints its own progress lines). The JVMs only
# schedule tasks and pass a few numbers: the client compiler alone and the serial collector
# halve their start on a busy 2-core host (measured 45-51 s -> 23-24 s to the first task).
_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_CONF = {
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": _JVM,
    "spark.executor.extraJavaOptions": _JVM,
}
TASKS_PER_SLOT = 2  # tasks per core Spark offers: progress lines move, stragglers even out


class _Spark:
    """The session verify runs on: the one given, or one started in a thread at once (the
    JVM takes seconds to start; planning goes on meanwhile) and stopped at the end. A verify
    that ends before the session is up (nothing to compare, a planning error) does not wait
    for it: the thread stops it when it comes (a daemon thread; a JVM whose Python process
    exits stops on its own)."""

    def __init__(self, given: Any, master: str) -> None:
        self._session = given
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._unwanted = False
        self._thread: threading.Thread | None = None
        if given is None:
            self._thread = threading.Thread(target=self._build, args=(master,), daemon=True,
                                            name="verify-spark")  # fmt: skip
            self._thread.start()

    def _build(self, master: str) -> None:
        from drc.spark.session import build_session

        try:
            session = build_session(master, "drc-verify", conf=SPARK_CONF)
        except BaseException as exc:  # raised by get()
            self._error = exc
            return
        with self._lock:
            self._session = session
            unwanted = self._unwanted
        if unwanted:
            session.stop()

    def get(self) -> Any:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error
        return self._session

    def stop(self) -> None:
        if self._thread is None:
            return  # given by the caller, who stops it
        with self._lock:
            session, self._unwanted = self._session, True
        if session is not None:
            session.stop()


def _compare(
    sides: Sides,
    specs: dict[str, TableSpec],
    chunks: Sequence[Chunk],
    options: Options,
    spark: Any,
    out: Callable[[str], None],
) -> list[ChunkResult]:
    """Every chunk compared in Spark tasks, each a run of adjacent chunks."""
    sc = spark.sparkContext
    rows = sc.accumulator(0)
    pieces = split_even(chunks, sc.defaultParallelism * TASKS_PER_SLOT)

    def run(part: Iterator[list[Chunk]]) -> Iterator[ChunkResult]:
        for result in compare.compare_partition(sides, specs, (c for p in part for c in p)):
            rows.add(result.rows)
            yield result

    total = sum(c.estimated_rows for c in chunks)
    if options.job_group:  # drc run cancels it to stop at once
        sc.setJobGroup(options.job_group, "drc verify", interruptOnCancel=True)
    _check_stop(options)  # a job submitted after the cancel would run to its end
    with _progress(sc, rows, total, out):
        return list(sc.parallelize(pieces, len(pieces)).mapPartitions(run).collect())


@contextmanager
def _progress(sc: Any, rows: Any, total: int, out: Callable[[str], None]) -> Iterator[None]:
    """A line every PROGRESS_EVERY_S: chunks (tasks) done, rows/s, ETA."""
    began = time.monotonic()
    tracker = sc.statusTracker()

    def report() -> None:
        done = int(rows.value)
        elapsed = time.monotonic() - began
        finished, count = active_tasks(tracker)
        rate = done / elapsed if elapsed else 0.0
        eta = f"{(total - done) / rate:.0f}s" if rate and total > done else "unknown"
        out(f"compared {done} rows ({rate:.0f}/s), {finished}/{count} tasks done, ETA {eta}")

    with every(PROGRESS_EVERY_S, report, "verify-progress"):
        yield


def _tally(report: Report, results: Sequence[ChunkResult]) -> dict[str, list[Difference]]:
    by_name = {t.source: t for t in report.tables}
    candidates: dict[str, list[Difference]] = {}
    for result in results:
        entry = by_name[result.table]
        entry.rows += result.rows
        entry.seconds += result.seconds
        if result.differs:
            entry.chunks_differing += 1
        if result.candidates:
            candidates.setdefault(result.table, []).extend(result.candidates)
    return candidates


def _recheck(
    config: DrcConfig,
    channel: ChannelConfig,
    source: Any,
    target: Any,
    specs: dict[str, TableSpec],
    candidates: dict[str, list[Difference]],
    options: Options,
    report: Report,
    out: Callable[[str], None],
) -> None:
    count = sum(len(v) for v in candidates.values())
    if not options.recheck:
        out(f"{count} rows differ (not rechecked: --no-recheck)")
        _report_as_found(report, candidates)
        return
    out(f"{count} rows differ; rechecking them as replication moves on")
    forward = Follower(
        lambda: [s for s in [checkpoint_of(target, channel.name)] if s is not None],
        Stream(channel.remote, channel.secret(), channel.https_verify()),
        [".".join(s.source) for s in specs.values()],
        optional=False,
    )
    tokens = config.api.secrets()
    local = config.conflicts.local_api or (local_api_url(config.api),)
    reverse = Follower(
        lambda: list(checkpoints_from(source, config.datacenter.name, [GUARD_NAME]).values()),
        Stream(tuple(local), tokens[0] if tokens else None),
        [".".join(s.target) for s in specs.values()],
        optional=True,
    )
    outcome = Recheck(source, target, forward, reverse, max_rounds=options.max_rounds,
                      wait_timeout_s=options.wait_timeout_s,
                      sleep=lambda s: _sleep(options, s)).run(specs, candidates)  # fmt: skip
    report.rounds, report.stalled = outcome.rounds, outcome.stalled
    if outcome.stalled:
        out(f"rechecks ended: {outcome.stalled}")
    decisions = repair.decide_all(source, target, specs, outcome.confirmed, config.conflicts,
                                  config.datacenter.name, channel.origin)  # fmt: skip
    by_name = {t.source: t for t in report.tables}
    for (table, key), (kind, _) in outcome.confirmed.items():
        decided = decisions.get((table, key))
        action = None if decided is None else decided[0].action
        by_name[table].differences.append(Difference(kind, key, action))
    for (table, key), (kind, _) in outcome.unsettled.items():
        by_name[table].unsettled.append(Difference(kind, key))
    if options.repair and decisions:
        writer_source, writer_target = (connect(s, writes=True) for s in
                                        (_settings(channel), _settings(config)))  # fmt: skip
        try:
            done = repair.repair_all(writer_source, writer_target, specs, outcome.confirmed,
                                     decisions, channel.name)  # fmt: skip
        finally:
            writer_source.close()
            writer_target.close()
        for table, repaired in done.items():
            by_name[table].repaired = repaired
        out(f"repaired {sum(done.values())} rows (logged in the target's drc.verify_repairs)")


class VerifyStopped(VerifyError):
    """The run was stopped (``Options.stop``) before it finished."""


def _check_stop(options: Options) -> None:
    if options.stop is not None and options.stop.is_set():
        raise VerifyStopped("verify stopped before it finished (the process is stopping)")


def _sleep(options: Options, seconds: float) -> None:
    if options.stop is None:
        time.sleep(seconds)
    elif options.stop.wait(seconds):
        _check_stop(options)


def _report_as_found(report: Report, candidates: dict[str, list[Difference]]) -> None:
    by_name = {t.source: t for t in report.tables}
    for table, found in candidates.items():
        by_name[table].differences.extend(found)


def _settings(where: ChannelConfig | DrcConfig) -> Any:
    if isinstance(where, ChannelConfig):
        return target_settings(where.origin_db)
    return target_settings(where.target_or_source())
