"""The catch-up driver: a channel's backlog replayed in bulk on Spark, then handed to streaming.

take the lease      drc.apply.lease (renewed in a thread); streaming channels wait
read the checkpoint through the channel itself (ApplyChannel.open), after the lease: exact
choose the range    (checkpoint, --to], --to defaulting to the remote's last committed SCN;
                    an unfinished run of this channel keeps its range (drc.apply.catchup_journal)
list segments       GET /v1/segments; gone from the replicator: stop, nothing written
pass 1 (executors)  copy the segments, find the DDL and the tables changed
steps               drc.core.reduce.plan_steps: spans of row changes, DDL between them
  span (executors)  read, route by key, reduce, decide, write per partition and batch
                    (drc.catchup.executor), the target's definitions broadcast by the driver
  DDL (driver)      the streaming channel's own exactly-once DDL path (ApplyChannel.apply_ddl)
finish              one transaction: the checkpoint at the range end, the run forgotten, the
                    lease released: streaming continues from exactly there

Killed or failed before the finish, the run stays recorded. A re-run resumes it with its
range, partitions and batch size, skipping the batches committed; so does the streaming
channel once the run's lease is released or expired (:func:`finish_interrupted`, in its own
process without Spark, drc.catchup.runners.Inline): it never streams the run's range again
(it would apply it twice). A failed driver releases the lease at once; a killed one's
expires. Spark tries a failed task again (local masters as ``local[N,4]``); the retried task
skips the batches its first attempt committed.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from drc.apply import catchup_journal as journal
from drc.apply import checkpoint, lease, windows
from drc.apply.channel import ApplyChannel
from drc.apply.retry import Stopped
from drc.apply.service import build_channel, target_settings
from drc.apply.sink import TargetSession
from drc.catchup import executor, runners
from drc.catchup.executor import Job, PartitionResult
from drc.client import PositionTooOldError, SegmentInfo, SegmentList, discovery
from drc.client.fragments import merge
from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.conflicts.settings import ConflictsConfig
from drc.core.errors import FatalError
from drc.core.events import Transaction
from drc.core.reduce import DdlStep, Span, plan_steps
from drc.core.scn import SCN
from drc.core.target_errors import MissingTableError
from drc.core.target_table import TargetTable
from drc.core.windows import Windows
from drc.mysql.driver import TargetSettings

log = logging.getLogger(__name__)

LEASE_TTL_S = 30.0


class CatchupError(FatalError):
    """Catch-up cannot replay the range; the message says why and what to do."""


@dataclass
class Summary:
    channel: str
    after: SCN
    to: SCN
    segments: int = 0
    bytes: int = 0
    changes: int = 0  # row changes decoded (after the filter chain)
    shuffled: int = 0  # net changes of the slices, sent to the partitions
    reduced: int = 0
    rows: int = 0
    conflicts: int = 0
    ddl: int = 0
    batches_skipped: int = 0
    seconds: float = 0.0
    partitions: list[PartitionResult] = field(default_factory=list)

    def line(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        return (
            f"catch-up of {self.channel} done: ({self.after}, {self.to}] in {self.seconds:.1f}s; "
            f"{self.segments} segments ({self.bytes / 1e6:.1f} MB), {self.changes} changes "
            f"reduced to {self.reduced}, {self.rows} rows written ({rate:.0f}/s), "
            f"{self.conflicts} conflicts, {self.ddl} DDL, {self.batches_skipped} batches "
            "already done by an earlier run; streaming continues from here"
        )


def run_catchup(
    config: DrcConfig,
    channel_name: str,
    *,
    to: SCN | None = None,
    master: str | None = "local[*]",
    partitions: int = 8,
    batch_changes: int = executor.BATCH_CHANGES,
    out: Callable[[str], None] = print,
    lease_ttl_s: float = LEASE_TTL_S,
) -> Summary:
    """Replay ``channel_name``'s backlog into the target (see the module docstring); ``master``
    None runs the executors' work in this process (drc.catchup.runners.Inline)."""
    plan = Plan(to, master, partitions, batch_changes, lease_ttl_s)
    where = Where(config.channel(channel_name), target_settings(config.target_or_source()),
                  config.conflicts, config.datacenter.name)  # fmt: skip
    summary = catch_up(where, plan, out)
    assert summary is not None  # only a resume_only plan may find nothing to do
    return summary


def finish_interrupted(
    where: Where, stopped: Callable[[], bool], out: Callable[[str], None]
) -> Summary | None:
    """Finish the channel's interrupted run in this process (no Spark), to the end it recorded,
    and write the checkpoint there: a streaming channel that found the run's lease expired
    calls it (drc.apply.handover) before it streams on. None when no run was left to finish
    (another catch-up finished it meanwhile): nothing is written."""
    return catch_up(where, Plan(master=None, resume_only=True, stopped=stopped), out)


@dataclass(frozen=True)
class Where:
    """The channel, its target and what its decisions need (drc.apply.service.build_parts)."""

    channel: ChannelConfig
    settings: TargetSettings
    conflicts: ConflictsConfig | None
    datacenter: str


@dataclass(frozen=True)
class Plan:
    to: SCN | None = None
    master: str | None = "local[*]"  # None: in this process
    partitions: int = 8
    batch_changes: int = executor.BATCH_CHANGES
    lease_ttl_s: float = LEASE_TTL_S
    resume_only: bool = False  # only an interrupted run is finished, never a new one started
    stopped: Callable[[], bool] = lambda: False


def catch_up(where: Where, plan: Plan, out: Callable[[str], None]) -> Summary | None:
    began = time.monotonic()
    say, out = out, lambda line: say(f"[{time.monotonic() - began:6.1f}s] {line}")
    settings = where.settings
    channel = where.channel
    held = lease.take_waiting(settings, channel.name, lease.new_owner(), plan.lease_ttl_s, out)
    renewer = lease.Renewer(held, lambda: lease.session(settings)).start()
    job: Job | None = None
    streaming: ApplyChannel | None = None
    try:
        streaming = build_channel(
            channel, settings, conflicts=where.conflicts, datacenter=where.datacenter,
            lease_owner=held.owner,
        )  # fmt: skip
        job, summary = _run(where, streaming, held, plan, out, renewer)
        if summary is None:  # nothing to finish: the lease given back untouched
            renewer.stop()
            _release(settings, held)
        return summary
    except BaseException:
        # Hand the channel back now, so a re-run need not wait for the lease to expire. An
        # unfinished run stays recorded: streaming finishes it before it streams on. A batch
        # still being written checked the lease under a shared lock: the release waits for it.
        renewer.stop()
        _release(settings, renewer.lease)
        raise
    finally:
        renewer.stop()
        if streaming is not None:  # its session: in a channel's own process it would linger
            streaming.target.close()
        if job is not None:
            shutil.rmtree(job.cache, ignore_errors=True)


def _run(
    where: Where,
    streaming: ApplyChannel,
    held: lease.Lease,
    plan: Plan,
    out: Callable[[str], None],
    renewer: lease.Renewer,
) -> tuple[Job | None, Summary | None]:
    to, partitions, batch_changes = plan.to, plan.partitions, plan.batch_changes
    started = time.monotonic()
    start = streaming.open()  # the checkpoint, read under the lease
    if streaming.writer.half_written():  # it would apply those transactions a second time
        raise CatchupError(
            f"channel {where.channel.name} left a parallel group half-written beyond its "
            f"checkpoint {start} (drc.applied_parts): start the channel once (`drc run`) so "
            "it finishes that group, then run the catch-up again"
        )
    session = TargetSession(where.settings)
    try:
        session.run_setup(journal.create_statements(), "creating the catch-up tables")
        channel = windows.widened(where.channel, _no_open_window(session, where.channel.name,
                                                                 start))  # fmt: skip
        found = session.query(journal.select_run(channel.name), "reading the catch-up run")
        session.commit()
        run = journal.parse_run(channel.name, found[0]) if found else None
        if run is not None and run.owner != held.owner:
            # Its driver is gone (the lease is ours): nothing else removes its segment copies
            # on this host, and this run downloads its own.
            shutil.rmtree(executor.cache_dir(run.owner), ignore_errors=True)
        if plan.resume_only and run is None:
            out(f"channel {channel.name}: no interrupted catch-up run to finish")
            return None, None
        resuming = run is not None and run.to > start
        if run is not None and (resuming or plan.resume_only):  # the same range and cuts
            if to is not None and to != run.to:
                out(f"--to {to} is ignored until the unfinished run is done")
            out(f"resuming the interrupted {run.describe()}: what it committed is skipped")
            to, partitions, batch_changes = max(run.to, start), run.partitions, run.batch_changes
        token = channel.secret()
        listing = _listing(channel, token, start, to)
        end = to or listing.last_scn or start
        summary = Summary(channel.name, start, end)
        if end <= start:
            out(f"channel {channel.name} is caught up at {start}: nothing to replay")
            _finish(session, channel, held, start, listing.epoch)
            return None, summary
        if not resuming:  # a new run: no earlier run's batch counts as done
            for statement in journal.finish(channel.name):
                session.execute(statement, "forgetting an earlier catch-up run")
            recorded = journal.start_run(channel.name, end, partitions, batch_changes, held.owner)
            session.execute(recorded, "recording the run")
            session.commit()
        # By first record: one going on with the range's last transaction has its SCN before it.
        infos = [s for s in listing.segments if s.first_scn is not None and s.first_scn <= end]
        job = Job(channel, where.settings, where.conflicts, where.datacenter, held.owner,
                  listing.url, listing.epoch, token, partitions, batch_changes)  # fmt: skip
        master = plan.master or "in this process"
        out(f"catch-up of {channel.name}: ({start}, {end}] from {listing.url}, {len(infos)} "
            f"segments, master {master}, {partitions} partitions")  # fmt: skip
        with runners.runner(plan.master, channel.name, plan.stopped) as runner:
            _replay(runner, job, streaming, session, infos, summary, out, renewer, plan.stopped)
        renewer.check()
        _finish(session, channel, held, end, listing.epoch)
        summary.seconds = time.monotonic() - started
        out(summary.line())
        return job, summary
    finally:
        session.close()


def _replay(
    runner: runners.Runner,
    job: Job,
    streaming: ApplyChannel,
    session: TargetSession,
    infos: Sequence[SegmentInfo],
    summary: Summary,
    out: Callable[[str], None],
    renewer: lease.Renewer,
    stopped: Callable[[], bool],
) -> None:
    after, end = summary.after, summary.to
    began = time.monotonic()
    scans = runner.scan(job, infos, (after, end), out)
    took = max(time.monotonic() - began, 1e-6)
    summary.segments, summary.bytes = len(scans), sum(s.size for s in scans)
    records = sum(s.records for s in scans)
    out(f"segments fetched: {len(scans)}, {summary.bytes / 1e6:.1f} MB, "
        f"{summary.bytes / 1e6 / took:.1f} MB/s; {records} transactions in the range "
        f"(copied and scanned in {took:.1f}s)")  # fmt: skip
    ddl = {scn: before for s in scans for scn, before in s.ddl}
    tables = sorted(executor.target_tables(job, {t for s in scans for t in s.tables}))
    steps = plan_steps(after, end, ddl)
    statements = _ddl_transactions(runner, job, infos, set(ddl)) if ddl else {}
    streaming.source.load_state()  # the pending online schema changes: the steps change them
    spans = sum(isinstance(step, Span) for step in steps)
    done = 0
    replaying = time.monotonic()
    for step in steps:
        renewer.check()
        if stopped():
            raise Stopped()
        if isinstance(step, DdlStep):
            before = ddl[step.scn]
            kept = streaming.source.after_ddl_chain(statements[step.scn])
            if kept is None:  # an online schema change tool's statement, left out
                continue
            streaming.apply_ddl(kept, before if before > after else after)
            session.forget_tables()
            summary.ddl += 1
            out(f"DDL at {step.scn} applied")
            continue
        done += 1
        span_began = time.monotonic()
        pieces = [
            (info, k, job.partitions) for info in infos for k in range(job.partitions)
            if step.overlaps(info.first_scn, info.last_scn)  # type: ignore[arg-type]
        ]  # fmt: skip
        what = f"span {done}/{spans}"
        decoded, results = (
            runner.span(
                runners.SpanTask(job, step, pieces, _definitions(session, tables), what), out
            )
            if pieces
            else (0, [])
        )
        summary.changes += decoded
        for result in results:
            summary.shuffled += result.changes
            summary.reduced += result.reduced
            summary.rows += result.rows
            summary.conflicts += result.conflicts
            summary.batches_skipped += result.skipped
        summary.partitions.extend(results)
        elapsed = max(time.monotonic() - replaying, 1e-6)
        slowest = max(results, key=lambda r: r.reduce_s + r.write_s, default=None)
        where = "" if slowest is None else (
            f"; slowest partition: {slowest.reduce_s:.1f}s reducing, {slowest.write_s:.1f}s "
            "writing")  # fmt: skip
        out(f"span {done}/{spans} ({step.after}, {step.end}] in "
            f"{time.monotonic() - span_began:.1f}s: {summary.changes} changes decoded "
            f"({summary.shuffled} after each slice's reduction), reduced to {summary.reduced}, "
            f"{summary.rows} rows written ({summary.rows / elapsed:.0f}/s){where}")  # fmt: skip


def _no_open_window(session: TargetSession, name: str, start: SCN) -> Windows:
    """The tables snapshots joined to the channel; CatchupError for a range a snapshot's
    window covers: catch-up neither drops what a copy holds nor converges without conflict
    detection (drc.core.windows); streaming does both."""
    rows = session.query(windows.select(name), "reading the snapshot tables")
    session.commit()
    joined = windows.parse(rows)
    still = joined.open_after(start)
    if still:
        last = max(w.converge_until for w in still)
        raise CatchupError(
            f"channel {name} is inside a snapshot's window up to {last} (tables "
            f"{', '.join('.'.join(w.target) for w in still)}): catch-up replays only after "
            "streaming has passed it. Nothing was written; let drc run stream, then run again"
        )
    return joined


def _ddl_transactions(
    runner: runners.Runner, job: Job, infos: Sequence[SegmentInfo], scns: set[SCN]
) -> dict[SCN, Transaction]:
    """The DDL transactions, whole (their fragments may sit in several segments)."""
    holding = [
        i for i in infos
        if i.first_scn is not None and any(i.first_scn <= s <= i.last_scn for s in scns)  # type: ignore[operator]
    ]  # fmt: skip
    fragments = runner.fragments(job, holding, scns)
    by_scn: dict[SCN, list[Transaction]] = {}
    for fragment in sorted(fragments, key=lambda t: (t.scn, t.fragment)):
        found = by_scn.setdefault(fragment.scn, [])
        if not found or found[-1].fragment != fragment.fragment:  # a segment boundary repeats none
            found.append(fragment)
    return {scn: merge(parts) if len(parts) > 1 else parts[0] for scn, parts in by_scn.items()}


def _definitions(
    session: TargetSession, tables: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], TargetTable]:
    """The target's definitions of the tables the range changes, as they are now (between
    DDL steps, a span's definitions do not change); a table the target lacks is left out (its
    changes then fail as streaming's would)."""
    found = {}
    for schema, table in tables:
        try:
            found[(schema, table)] = session.table(schema, table, refresh=True)
        except MissingTableError:
            continue
    session.commit()
    return found


def _finish(
    session: TargetSession, channel: ChannelConfig, held: lease.Lease, end: SCN, epoch: str
) -> None:
    """The checkpoint at ``end``, the run forgotten and the lease released, in one commit."""
    rows = session.query(lease.state_statement(channel.name), "checking the catch-up lease")
    if not rows or str(rows[0][0]) != held.owner or not rows[0][1]:
        raise lease.LeaseLostError(
            f"catch-up {held.owner} lost the lease of channel {channel.name} before its last "
            "transaction: the checkpoint was not moved; run the catch-up again"
        )
    for statement in journal.finish(channel.name):
        session.execute(statement, "forgetting the catch-up run")
    session.execute(lease.release_statement(held), "releasing the catch-up lease")
    session.write_checkpoint(checkpoint.CheckpointRow(channel.name, end, channel.origin, epoch))
    session.commit()


def _listing(channel: ChannelConfig, token: str | None, after: SCN, to: SCN | None) -> SegmentList:
    """The segments holding (after, to] from the first remote that answers."""
    failures = []
    try:
        urls = discovery.members(channel.remote)
    except discovery.DiscoveryError as exc:
        raise CatchupError(f"channel {channel.name}: {exc}") from exc
    for url in urls:
        try:
            with executor.segment_source(channel, url, token) as source:
                return source.list(after=after, to=to)
        except PositionTooOldError as exc:
            raise CatchupError(
                f"the remote replicator {url} no longer has the changes after {after} (its "
                f"oldest servable SCN is {exc.oldest}): catch-up cannot replay "
                f"({after}, {to or 'its last SCN'}]. Nothing was written. Copy the tables "
                "with a snapshot instead, then start the channel from the snapshot's SCN"
            ) from exc
        except Exception as exc:  # this replicator is unreachable: ask the next one
            failures.append(f"{url}: {exc}")
    raise CatchupError("no remote replicator answered: " + "; ".join(failures))


def _release(settings: TargetSettings, held: lease.Lease) -> None:
    try:
        conn = lease.session(settings)
        try:
            lease.release(conn, held)
        finally:
            conn.close()
    except Exception as exc:  # the target is away: the lease expires on its own
        log.warning("releasing the catch-up lease of %s failed: %s", held.channel, exc)
