"""The snapshot driver: copy the origin's tables into this target while writes go on, then join
them to the channel (docs/snapshot.md).

take the lease      drc.apply.lease, as bulk catch-up does: the streaming channel waits at
                    its checkpoint C (so C is before every chunk's read)
the stream          the origin replicator's change_id and server_id (/v1/status), and the
                    origin database must be the server it reads (drc.snapshot.origin)
tables              selected, checked or created on the target, conflict setup, planned in
                    key-range chunks (drc.bulk.planner) recorded in drc.snapshot_chunk
copy (executors)    each chunk one consistent read, written with its journal row
                    (drc.snapshot.copier); a re-run copies only what did not commit
join                one target transaction: each table's window (drc.apply.windows: changes
                    up to the earliest chunk read dropped, up to the latest applied
                    converging), the checkpoint of a new channel (or of one whose checkpoint
                    its remote no longer serves: its buffer was started again after a purged
                    binlog), the journal deleted, the lease released. The channel then goes
                    on from C (or the copy) with the tables joined
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from drc.api import pullquery
from drc.apply import checkpoint, lease, windows
from drc.apply.service import build_parts, target_settings
from drc.apply.sink import TargetSession
from drc.apply.stages import NameMap
from drc.bulk.planner import list_tables, plan_table
from drc.client import discovery, http
from drc.client.status import fetch_status
from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter, TableFilterError
from drc.core.windows import Window
from drc.mysql.driver import TargetSettings
from drc.mysql.sql import Statement, quote
from drc.snapshot import copier, journal, origin, rows, tables
from drc.snapshot.journal import Recorded, Run
from drc.snapshot.origin import SnapshotError, Stream
from drc.spark.progress import PROGRESS_EVERY_S, every
from drc.spark.session import build_session

log = logging.getLogger(__name__)

LEASE_TTL_S = 60.0
_DRC_ERROR = re.compile(r"drc(?:\.\w+)+\.\w*Error: [^\n]*")
CHUNK_ROWS = 20_000


@dataclass
class Summary:
    channel: str
    copied: dict[str, int] = field(default_factory=dict)  # table -> rows
    skipped: dict[str, str] = field(default_factory=dict)  # table -> why
    chunks: int = 0
    resumed: int = 0  # chunks an earlier run had copied
    seconds: float = 0.0
    windows: list[Window] = field(default_factory=list)

    def line(self) -> str:
        rows_total = sum(self.copied.values())
        rate = rows_total / self.seconds if self.seconds else 0.0
        skipped = f"; SKIPPED {', '.join(self.skipped)}" if self.skipped else ""
        return (
            f"snapshot of {self.channel} done: {len(self.copied)} tables, {rows_total} rows "
            f"in {self.chunks} chunks ({self.resumed} copied by an earlier run) in "
            f"{self.seconds:.1f}s ({rate:.0f} rows/s){skipped}; the channel applies them from "
            "here"
        )


def run_snapshot(
    config: DrcConfig,
    channel_name: str,
    *,
    patterns: Sequence[str] = (),
    master: str = "local[*]",
    chunk_rows: int = CHUNK_ROWS,
    partitions: int = 4,
    out: Callable[[str], None] = print,
    lease_ttl_s: float = LEASE_TTL_S,
) -> Summary:
    """Copy the channel's (or ``patterns``') tables and join them (module docstring)."""
    began = time.monotonic()
    say, out = out, lambda line: say(f"[{time.monotonic() - began:6.1f}s] {line}")
    channel = config.channel(channel_name)
    if channel.origin_db is None:
        raise SnapshotError(
            f"channel {channel.name} has no [channels.origin_db]: give the origin "
            "datacenter's database (host, port, a user with SELECT) so the snapshot can read "
            "it (docs/configuration.md)"
        )
    target = target_settings(config.target_or_source())
    session = TargetSession(target)
    conn = origin.connect(target_settings(channel.origin_db))
    try:
        session.run_setup(
            [*journal.create_statements(), *windows.create_statements()[1:],
             lease.create_statement()], "creating the snapshot tables",
        )  # fmt: skip
        session.ensure_checkpoint_table()
        found = session.query(journal.select_run(channel.name), "reading the snapshot run")
        session.commit()
        run = journal.parse_run(found[0]) if found else None
        names = _names(conn, channel, patterns, run, out)
        owner = run.owner if run else f"snapshot:{lease.new_owner()}"[:128]
        held = lease.take_waiting(target, channel.name, owner, lease_ttl_s, out)
        renewer = lease.Renewer(held, lambda: lease.session(target)).start()
        try:
            summary = Summary(channel.name)
            job = Snapshot(config, channel, target, session, conn, summary, out)
            job.run(Run(owner, tuple(names)), run is not None, master, chunk_rows, partitions)
            renewer.check()
            job.join(held)
        except BaseException:
            renewer.stop()
            _release_if_untouched(session, channel.name, renewer.lease)
            raise
        renewer.stop()
        summary.seconds = time.monotonic() - began
        out(summary.line())
        return summary
    finally:
        session.close()
        conn.close()


@dataclass
class Snapshot:
    """One run's state, from the lease to the join."""

    config: DrcConfig
    channel: ChannelConfig
    target: TargetSettings
    session: TargetSession
    conn: Any  # the origin's database
    summary: Summary
    out: Callable[[str], None]
    stream: Stream | None = None
    copies: dict[tuple[str, str], copier.TableCopy] = field(default_factory=dict)
    definitions: dict[tuple[str, str], str] = field(default_factory=dict)
    checkpoint_scn: SCN | None = None

    def run(self, run: Run, resuming: bool, master: str, chunk_rows: int, partitions: int) -> None:
        name = self.channel.name
        self.stream = _stream(self.channel)
        origin.check_same_server(self.conn, self.stream)
        row = self.session.read_checkpoint(name)
        self.checkpoint_scn = None if row is None else row.scn
        self.session.commit()
        if self.checkpoint_scn is not None and not _serves_after(self.channel, self.checkpoint_scn):
            self.out(f"channel {name}'s checkpoint {self.checkpoint_scn} is no longer served by "
                     "its remote (its buffer was started again, or retention deleted it): the "
                     "channel starts at the copy, as a new one does; a table of it not copied "
                     "now misses the changes in between")  # fmt: skip
            self.checkpoint_scn = None
        if not resuming:
            self.session.execute(journal.start_run(name, run))
            self.session.commit()
        for source in (tuple(n.split(".", 1)) for n in run.tables):
            self._prepare(source[0], source[1])  # type: ignore[index]
        self._conflict_setup()
        plans = {source: self._plan(source, chunk_rows) for source in list(self.copies)}
        pending = [r.chunk for recorded in plans.values() for r in recorded if not r.done]
        total = sum(len(r) for r in plans.values())
        self.summary.chunks, self.summary.resumed = total, total - len(pending)
        self.out(f"snapshot of {name}: {len(self.copies)} tables, {total} chunks "
                 f"({total - len(pending)} copied by an earlier run), master {master}, "
                 f"{partitions} partitions")  # fmt: skip
        if pending:
            self._copy(pending, master, partitions)

    # ------------------------------------------------------------------ tables

    def _prepare(self, schema: str, table: str) -> None:
        """Check or create the target table; a problem is a named skip."""
        label, channel = f"{schema}.{table}", self.channel
        names = NameMap(channel.map_tables, {})
        target = names.table(schema, table)
        try:
            if label in channel.map_columns or f"{schema}.*" in channel.map_columns:
                raise tables.Skip("its columns are renamed (map_columns), which a snapshot "
                                  "does not do: copy it by hand")  # fmt: skip
            if (stage := channel.row_stage(schema, table)) is not None:
                raise tables.Skip(f"the channel's {stage} selects it, which a snapshot does not "
                                  "apply: copy the rows it keeps by hand")  # fmt: skip
            shape = tables.origin_shape(self.conn, schema, table)
            if not shape.primary_key and channel.no_primary_key == "refuse":
                raise tables.Skip(f"it has no primary key and channel {channel.name} refuses "
                                  "such tables (no_primary_key = \"refuse\")")  # fmt: skip
            definition = tables.origin_definition(self.conn, schema, table)
            recorded = self.session.query(
                journal.select_chunks(channel.name, schema, table), "reading the plan"
            )
            self.session.commit()
            done = tables.prepare(self.session, shape, definition, target, bool(recorded))
        except tables.Skip as exc:
            self.summary.skipped[label] = str(exc)
            self.out(f"skipped {label}: {exc}")
            return
        cols = rows.copied(origin.columns(self.conn, schema, table))
        self.copies[(schema, table)] = copier.TableCopy((schema, table), target, tuple(cols))
        self.definitions[(schema, table)] = definition
        self.out(f"{label} -> {'.'.join(target)}: {done}")

    def _conflict_setup(self) -> None:
        """Tombstones and triggers for the new tables before any row arrives."""
        parts = build_parts(
            self.channel, self.target, conflicts=self.config.conflicts,
            datacenter=self.config.datacenter.name,
        )  # fmt: skip
        try:
            if parts.conflicts is not None:
                parts.conflicts.setup()
        finally:
            parts.target.close()

    def _plan(self, source: tuple[str, str], chunk_rows: int) -> list[Recorded]:
        """The table's recorded plan, or a new one. A plan is dropped (and the table emptied)
        when the channel applied past a chunk's read while the lease was lost."""
        name, (schema, table) = self.channel.name, source
        found = self._recorded(source)
        stale = [r for r in found if r.read_at is not None and self.checkpoint_scn is not None
                 and r.read_at < self.checkpoint_scn]  # fmt: skip
        if stale:
            self.out(f"{schema}.{table}: the channel applied past chunks an earlier run "
                     "copied (its lease lapsed): copying the table again")  # fmt: skip
            self._forget(source)
            found = []
        if found:
            return found
        plan = plan_table(self.conn, schema, table, chunk_rows)
        if plan.note:
            self.out(f"{schema}.{table}: {plan.note}")
        for chunk in plan.chunks:
            self.session.execute(journal.plan_chunk(name, chunk), "recording the plan")
        self.session.commit()
        return self._recorded(source)

    def _recorded(self, source: tuple[str, str]) -> list[Recorded]:
        statement = journal.select_chunks(self.channel.name, *source)
        found = journal.parse_chunks(*source, self.session.query(statement, "reading the plan"))
        self.session.commit()
        return found

    def _forget(self, source: tuple[str, str]) -> None:
        """Empty the target table and drop its plan (copied again from scratch)."""
        target = self.copies[source].target
        self.session.run_setup(
            [f"TRUNCATE TABLE {quote(target[0])}.{quote(target[1])}"], "emptying a table"
        )
        self.session.execute(journal.forget_table(self.channel.name, *source))
        self.session.commit()

    # ------------------------------------------------------------------ copy

    def _copy(self, pending: list[Any], master: str, partitions: int) -> None:
        assert self.stream is not None
        packet = self.session.query(Statement("SELECT @@max_allowed_packet", ()), "reading")
        self.session.commit()
        max_bytes = min(origin.GROUP_CONCAT_MAX, int(packet[0][0]) // 2)
        job = copier.Job(self.channel.name, target_settings(self.channel.origin_db),
                         self.target, self.stream, self.copies, max_bytes)  # fmt: skip
        spark = build_session(master, f"drc-snapshot-{self.channel.name}")
        began = time.monotonic()
        try:
            sc = spark.sparkContext
            slices = max(1, min(partitions, len(pending)))
            with self._progress(began):
                done = (
                    sc.parallelize(pending, slices)
                    .mapPartitions(lambda part: copier.copy_chunks(job, part))
                    .collect()
                )
        except Exception as exc:
            raise self._failed(exc) from exc
        finally:
            spark.stop()
        took = max(time.monotonic() - began, 1e-6)
        copied = sum(c.rows for c in done if c.written)
        self.out(f"copied {len(done)} chunks, {copied} rows in {took:.1f}s "
                 f"({copied / took:.0f} rows/s)")  # fmt: skip

    @contextmanager
    def _progress(self, began: float) -> Iterator[None]:
        """A line every PROGRESS_EVERY_S from the journal: chunks and rows copied, rate, ETA."""
        statement = journal.copied_so_far(self.channel.name)
        session = TargetSession(self.target)
        try:
            before = int(session.query(statement, "reading progress")[0][1])
            session.commit()

            def report() -> None:
                try:
                    done, rows_done, total = (int(v) for v in session.query(statement, "")[0])
                    session.commit()
                except Exception as exc:  # best effort: the copy decides the outcome
                    log.warning("snapshot progress: %s", exc)
                    return
                elapsed = max(time.monotonic() - began, 1e-6)
                new = max(done - self.summary.resumed, 0)
                eta = f"{elapsed / new * (total - done):.0f}s" if new else "unknown"
                self.out(f"copying: {done}/{total} chunks, {rows_done} rows, "
                         f"{(rows_done - before) / elapsed:.0f} rows/s, ETA {eta}")  # fmt: skip

            with every(PROGRESS_EVERY_S, report, "snapshot-progress"):
                yield
        finally:
            session.close()

    def _failed(self, exc: BaseException) -> SnapshotError:
        """What a failed copy says: the cause, and that a re-run resumes."""
        text = str(exc)
        ours = _DRC_ERROR.findall(text)
        cause = ours[0] if ours else text.strip().splitlines()[-1] if text.strip() else repr(exc)
        return SnapshotError(
            f"the copy stopped: {cause[:500]}. Chunks copied so far are recorded in "
            f"drc.snapshot_chunk; run the same command again to copy the rest (the channel "
            f"stays held meanwhile until its lease expires)"
        )

    # ------------------------------------------------------------------ join

    def join(self, held: lease.Lease) -> None:
        """Windows, checkpoint, journal and lease, in one transaction (module docstring)."""
        name, session = self.channel.name, self.session
        self._check_unchanged()
        joined: list[tuple[Window, int]] = []
        for source, copy in self.copies.items():
            recorded = self._recorded(source)
            reads = [r.read_at for r in recorded if r.read_at is not None]
            if len(reads) != len(recorded):
                raise SnapshotError(f"{'.'.join(source)} has chunks not copied; run again")
            window = Window(source, copy.target, min(reads), max(reads))
            joined.append((window, sum(r.copied_rows or 0 for r in recorded)))
        state = session.query(lease.state_statement(name), "checking the lease")
        if not state or str(state[0][0]) != held.owner or not state[0][1]:
            raise lease.LeaseLostError(
                f"snapshot {held.owner} lost the lease of channel {name} before joining the "
                "tables: run it again (what was copied is kept)"
            )
        for window, count in joined:
            session.execute(windows.join(name, window, count), "joining a table")
            self.summary.windows.append(window)
            self.summary.copied[".".join(window.source)] = count
        if self.checkpoint_scn is None and joined:  # a new channel starts at the copy
            start = min(w.copied_at for w, _ in joined)
            session.write_checkpoint(checkpoint.CheckpointRow(name, start, self.channel.origin))
        for statement in journal.finish(name):
            session.execute(statement, "forgetting the snapshot run")
        session.execute(lease.release_statement(held), "releasing the lease")
        session.commit()
        for window, count in joined:
            self.out(f"joined {'.'.join(window.source)}: {count} rows; changes up to "
                     f"{window.copied_at} are in the copy, up to {window.converge_until} "
                     "converge")  # fmt: skip

    def _check_unchanged(self) -> None:
        """A DDL on the origin during the copy: that table is emptied and copied again."""
        for source, before in self.definitions.items():
            if tables.origin_definition(self.conn, *source) != before:
                self._forget(source)
                raise SnapshotError(
                    f"{'.'.join(source)} changed on the origin while it was copied (DDL): its "
                    "copy was discarded; run the snapshot again"
                )
        if self.stream is not None and _stream(self.channel).change_id != self.stream.change_id:
            raise SnapshotError(
                "the origin replicator moved to another source server during the copy (its "
                "change_id changed): run the snapshot again against the new server"
            )


def _release_if_untouched(session: TargetSession, channel: str, held: lease.Lease) -> None:
    """After a failure before any chunk was copied, give the channel back at once (as
    catch-up does); with chunks copied it stays held until the lease expires, so a prompt
    re-run finds it where the copy left it."""
    try:
        session.recover(RuntimeError("the snapshot stopped"))
        copied = int(session.query(journal.copied_so_far(channel), "reading progress")[0][0])
        session.commit()
        if copied == 0:
            conn = lease.session(session.settings)
            try:
                lease.release(conn, held)
            finally:
                conn.close()
    except Exception as exc:  # the target may be what failed: the lease then expires
        log.warning("snapshot of %s: the channel's lease stays until it expires: %s", channel, exc)


def _names(
    conn: Any,
    channel: ChannelConfig,
    patterns: Sequence[str],
    run: Run | None,
    out: Callable[[str], None],
) -> list[str]:
    """The source tables to copy: an unfinished run's, else those ``patterns`` (default: the
    channel's ``tables``) select on the origin, less the channel's ``exclude``."""
    if run is not None:
        if patterns and sorted(patterns) != sorted(run.tables):
            out(f"an unfinished snapshot of {channel.name} copies {', '.join(run.tables)}; "
                "finishing it first (--tables is ignored until it is done)")  # fmt: skip
        return list(run.tables)
    try:
        wanted = TableFilter.build(list(patterns)) if patterns else channel.table_filter()
    except TableFilterError as exc:
        raise SnapshotError(f"--tables: {exc}") from exc
    found = list_tables(conn, wanted)
    excluded = TableFilter.build((), channel.exclude) if channel.exclude else None
    names = []
    for schema, table in found:
        if excluded is not None and not excluded.matches(schema, table):
            out(f"skipped {schema}.{table}: channel {channel.name} excludes it (exclude)")
            continue
        if channel.tables and not channel.table_filter().matches(schema, table):
            out(f"{schema}.{table} is not in channels.{channel.name}.tables: the snapshot "
                "joins it to the channel anyway; add it there too")  # fmt: skip
        names.append(f"{schema}.{table}")
    if not names:
        asked = ", ".join(patterns) or ", ".join(channel.tables) or "*.*"
        raise SnapshotError(f"no table on the origin matches {asked}: nothing to copy")
    return names


def _serves_after(channel: ChannelConfig, after: SCN) -> bool:
    """False when every remote of the channel that answered said 410 for a pull after
    ``after`` (its buffer, and its source's binlog, no longer hold that position); True when
    one served it, or none answered (nothing is known: the checkpoint is kept)."""
    token = channel.secret()
    client = http.make_client(token, verify=channel.https_verify())
    params = {pullquery.PARAM_AFTER: str(after), pullquery.PARAM_MAX_EVENTS: "1",
              pullquery.PARAM_WAIT_MS: str(pullquery.WAIT_NONE)}  # fmt: skip
    too_old = False
    try:
        for url in (u.rstrip("/") for u in _origin_urls(channel)):
            try:
                http.get_events(
                    client, url, params, True, http.read_timeout(pullquery.WAIT_NONE), token
                )
                return True
            except http.TooOld:
                too_old = True
            except Exception as exc:  # this one is unreachable: ask the next one
                log.info("snapshot: %s did not answer a pull after %s: %s", url, after, exc)
    finally:
        http.close_client(client)
    return not too_old


def _stream(channel: ChannelConfig) -> Stream:
    """The origin replicator's change_id and server_id, from its last SCN."""
    failures = []
    for url in _origin_urls(channel):
        try:
            status = fetch_status(url, channel.secret(), verify=channel.https_verify())
        except Exception as exc:  # this member is unreachable: ask the next one
            failures.append(f"{url}: {exc}")
            continue
        last = (status.get("buffer") or {}).get("last_scn")
        if last is None:
            raise SnapshotError(
                f"the origin replicator {url} has captured nothing yet: start it (drc run) "
                "and run the snapshot again"
            )
        scn = SCN.parse(str(last))
        return Stream(scn.change_id, scn.server_id)
    raise SnapshotError("no origin replicator answered: " + "; ".join(failures))


def _origin_urls(channel: ChannelConfig) -> tuple[str, ...]:
    """The channel's ``remote``, its ``zk://`` groups resolved to their members."""
    try:
        return discovery.members(channel.remote)
    except discovery.DiscoveryError as exc:
        raise SnapshotError(f"channel {channel.name}: {exc}") from exc
