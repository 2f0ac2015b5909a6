"""Parallel apply: a group's independent transactions written on several connections at once.

A channel with ``parallel_workers = N`` (N > 1) splits each group (drc.apply.partition) into at
most N parts that share no primary or unique key (nor a table that keeps order, nor a keyless
table). One part is the group as it always was: the channel's own session writes it with the
checkpoint row. Several parts go out at once::

    channel session   lease read (shared lock, held to its COMMIT: no catch-up starts meanwhile)
    worker 1..N       part i: decisions (probes, conflicts) and writes, its row in
                      drc.applied_parts (every SCN of the group committed so far), COMMIT
    channel session   the checkpoint row moves past the group, COMMIT

Exactly once: a part commits its row of drc.applied_parts (drc.apply.applied_set) with its
writes, so after a crash between the parts and the checkpoint the channel knows which source
transactions beyond the checkpoint are applied, and skips them (:meth:`ParallelWriter.applied`,
read by the channel's Idempotency stage). A failed part is retried without the parts that
committed (they are remembered, and read back after a connection was lost); a fatal error
leaves the committed parts committed, and the channel writes the rest one transaction at a
time to name the one that failed, as it does for any group. DDL is a barrier: the channel
commits the group before it (drc.apply.channel), and each worker reads table definitions again
after the channel forgot them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from drc.apply import applied_set
from drc.apply.applied_set import PartRow
from drc.apply.checkpoint import CheckpointRow
from drc.apply.engine import Converging
from drc.apply.partition import split
from drc.apply.sink import TargetSession
from drc.apply.writer import GroupWriter, Written
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.core.target_errors import TargetUnavailableError
from drc.mysql.sql import Statement


@dataclass
class Worker:
    """One connection of a parallel channel and the writer deciding on it."""

    target: TargetSession
    writer: GroupWriter
    forgotten: int = 0  # the channel session's count of forgotten definitions, as last seen


class ParallelWriter:
    """A channel's group writer (see the module docstring). ``workers``: builds the writer of
    one more connection (drc.apply.service), called the first time a group has two parts."""

    def __init__(
        self, main: GroupWriter, channel: str, count: int, workers: Callable[[], Worker]
    ) -> None:
        assert isinstance(main.target, TargetSession)
        self.main = main
        self.target: TargetSession = main.target
        self.channel = channel
        self.count = count
        self._new_worker = workers
        self._workers: list[Worker] = []
        self._pool: ThreadPoolExecutor | None = None
        self._done: set[SCN] = set()  # committed beyond the checkpoint, by parts
        self._unsure = False  # a part's COMMIT may have landed unseen: read the rows again
        self._committed: list[Written] = []  # parts committed since the last checkpoint
        self._lock = threading.Lock()

    def applied(self, scn: SCN) -> bool:
        """Whether a part committed the source transaction ``scn`` beyond the checkpoint."""
        return scn in self._done

    def rewound(self) -> list[Statement]:
        """A rewind moves the checkpoint back: what parts committed beyond the old one is
        applied again, so their rows go, in the rewind's transaction (returned)."""
        self._done = set()
        return [applied_set.delete(self.channel)]

    def recover(self, checkpoint: SCN) -> None:
        """On start, after the checkpoint was read: the transactions a group left half-written
        committed beyond it (drc.apply.applied_set)."""
        self._done = applied_set.recover(self.target, self.channel, checkpoint)
        self.target.commit()  # no read left open (a catch-up keeps this session idle)

    def half_written(self) -> bool:
        """Whether parts committed transactions beyond the checkpoint (a group a stop left
        half-written): a catch-up starting from the checkpoint would apply them again."""
        return bool(self._done)

    def splits(self, transactions: Sequence[Transaction]) -> bool:
        """Whether the group may go out in parts (then the channel reads the lease first)."""
        return len(transactions) > 1 and transactions[0].scn != transactions[-1].scn

    def write(
        self,
        transactions: Sequence[Transaction],
        row: CheckpointRow,
        before_commit: Callable[[], None] | None,
        converging: Converging | None,
    ) -> Written:
        """One attempt, as GroupWriter.write; the parts that commit stay committed."""
        if self._unsure and self._workers:  # read on a worker: the channel's snapshot is older
            reader = self._workers[0].target
            self._done |= applied_set.read(reader, self.channel, SCN.zero())
            reader.commit()
            self._unsure = False
        todo = [t for t in transactions if t.scn not in self._done]
        if before_commit is not None or not self.splits(todo):
            return self._settled(row.scn, self.main.write(todo, row, before_commit, converging))
        # The channel's session holds the lease while the parts run: it must hold no lock a
        # part may queue for (a table's metadata lock, behind an ALTER waiting for it), so the
        # tables are read and set up on the first part's session, which then writes its part.
        first = self._worker(0)
        try:
            parts = split(todo, first.target.table, self.count)
            if len(parts) > 1 and first.writer.conflicts is not None:
                tables = {(c.schema, c.table) for t in todo for c in t.changes}
                first.writer.conflicts.ready_for(tables)
        except BaseException as exc:
            first.target.recover(exc)  # its reads hold metadata locks a DDL would wait for
            raise
        if len(parts) <= 1:
            first.target.recover(_Done())  # nothing written there: the reads let go
            return self._settled(row.scn, self.main.write(todo, row, before_commit, converging))
        self._run(parts, row, converging)
        effects = self.target.write([], [], row, None)  # the checkpoint moves past the group
        return self._settled(row.scn, Written(effects, [], 0))

    def write_piece(
        self, transactions: Sequence[Transaction], converging: Converging | None
    ) -> Written:
        """A piece of a large source transaction: it goes alone, on the channel's own
        connection (GroupWriter.write_piece), as its last piece and COMMIT do."""
        return self.main.write_piece(transactions, converging)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for worker in self._workers:
            worker.target.close()

    # ------------------------------------------------------------------ parts

    def _run(
        self, parts: list[list[Transaction]], row: CheckpointRow, converging: Converging | None
    ) -> None:
        for index in range(len(parts)):
            self._worker(index)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.count, thread_name_prefix=f"apply-{self.channel}")
        done = frozenset(self._done)
        futures = [
            self._pool.submit(self._part, index, part, row, done, converging)
            for index, part in enumerate(parts)
        ]
        failure: BaseException | None = None
        for future in futures:
            try:
                future.result()
            except BaseException as exc:  # every part settled first; the first failure wins
                failure = failure or exc
        if failure is not None:
            raise failure

    def _worker(self, index: int) -> Worker:
        while len(self._workers) <= index:
            self._workers.append(self._new_worker())
        worker = self._workers[index]
        if worker.forgotten != self.target.forgotten:  # DDL since: definitions read again
            worker.target.forget_tables()
            worker.forgotten = self.target.forgotten
        return worker

    def _part(
        self,
        index: int,
        part: list[Transaction],
        row: CheckpointRow,
        done: frozenset[SCN],
        converging: Converging | None,
    ) -> None:
        worker = self._workers[index]
        scns = frozenset(t.scn for t in part)
        marker = PartRow(self.channel, index, row.scn, done | scns)
        try:
            written = worker.writer.write(part, marker, None, converging)
        except BaseException as exc:
            worker.target.recover(exc)
            if not isinstance(exc, Exception) or _commit_unsure(exc):
                self._unsure = True
            raise
        with self._lock:  # counted with the checkpoint that covers it, whatever comes first
            self._done |= scns
            self._committed.append(written)

    def _settled(self, checkpoint: SCN, written: Written) -> Written:
        """The checkpoint committed at ``checkpoint``: what parts committed up to it is covered
        and counted with it (the parts of an attempt that failed afterwards too)."""
        if self._done:
            self._done = {s for s in self._done if s > checkpoint}
        with self._lock:
            parts, self._committed = self._committed, []
        for part in parts:
            written.effects.add(part.effects)
            written.conflict_tables.extend(part.conflict_tables)
            written.replays += part.replays
        written.parts += len(parts)
        return written


def _commit_unsure(exc: BaseException) -> bool:
    """A lost connection may have lost the reply to a COMMIT that landed."""
    return isinstance(exc, TargetUnavailableError)


class _Done(Exception):
    """Passed to a session's recover(): roll back what was only read."""
