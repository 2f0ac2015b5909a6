"""One group's target transaction: what the engine decides, written with the checkpoint row.

    pending  = engine.prepare(transactions)      which target rows to read and lock
    observed = conflicts.probe(pending.probes)   SELECT .. FOR UPDATE, batched
    decision = engine.decide(pending, observed)  writes, conflict log, tombstones, counts
    target.write(decision.writes, decision.log_statements(), checkpoint row)   COMMIT

After a rewind (drc.apply.actions) the channel meets its own earlier writes again: what those
changes find is a replay, neither logged nor counted as a conflict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from drc.apply import applied_set
from drc.apply.applied_set import PartRow
from drc.apply.checkpoint import CheckpointRow
from drc.apply.control import ChannelControl
from drc.apply.engine import ApplyEngine, Converging, Decision
from drc.apply.plan import Effects
from drc.apply.target import Target
from drc.conflicts.probes import Observed
from drc.conflicts.target import ConflictTarget
from drc.core.events import Transaction
from drc.core.scn import SCN
from drc.mysql.sql import Statement


@dataclass(slots=True)
class Written:
    """What one committed group did; counted once committed (an attempt may fail)."""

    effects: Effects
    conflict_tables: list[str]  # "db.table" of each conflict logged
    replays: int
    parts: int = 0  # target transactions besides the checkpoint's (drc.apply.parallel)


class GroupWriter:
    """``control``: the channel's, whose replay window a rewind opens; ``conflicts``: the
    channel's conflict handling, if any; ``channel``: the name of the channel it writes for
    (None: a part of a parallel group's, drc.apply.parallel)."""

    def __init__(
        self,
        target: Target,
        engine: ApplyEngine,
        control: ChannelControl,
        conflicts: ConflictTarget | None = None,
        channel: str | None = None,
    ) -> None:
        self.target = target
        self.engine = engine
        self.control = control
        self.conflicts = conflicts
        self.channel = channel
        # Committed beyond the checkpoint by the parts of a parallel group a stop left
        # half-written, before the channel was set to one worker (drc.apply.applied_set).
        self._done: set[SCN] = set()

    def write(
        self,
        transactions: Sequence[Transaction],
        row: CheckpointRow | PartRow,
        before_commit: Callable[[], None] | None,
        converging: Converging | None,
    ) -> Written:
        """One attempt, COMMIT included (``before_commit``: Target.write's). ``converging``:
        changes applied without conflict detection (a snapshot's window, drc.apply.source)."""
        decision, replays = self._decide(transactions, converging)
        effects = self.target.write(decision.writes, decision.log_statements(), row, before_commit)
        effects.conflicts = decision.counts.conflicts
        return Written(effects, [f"{e.schema}.{e.table}" for e in decision.entries], replays)

    def write_piece(
        self, transactions: Sequence[Transaction], converging: Converging | None
    ) -> Written:
        """Part of a large source transaction written into the open target transaction, its
        rows decided as :meth:`write` decides a group's, with neither checkpoint nor COMMIT
        (drc.apply.streamed): :meth:`write` commits its last piece."""
        decision, replays = self._decide(transactions, converging)
        effects = self.target.write_open(decision.writes, decision.log_statements())
        effects.conflicts = decision.counts.conflicts
        return Written(effects, [f"{e.schema}.{e.table}" for e in decision.entries], replays)

    def _decide(
        self, transactions: Sequence[Transaction], converging: Converging | None
    ) -> tuple[Decision, int]:
        """The engine's decision on the rows the probes read and locked, replays left out of
        the conflict log; and how many there were."""
        pending = self.engine.prepare(transactions, converging)
        observed: list[Observed] = []
        if self.conflicts is not None:  # first: it reads and locks the rows the group touches
            observed = self.conflicts.probe(pending.probes)
        decision = self.engine.decide(pending, observed, lazy=True)  # planned as it is sent
        replays = [e for e in decision.entries if self.control.is_replay(SCN.parse(e.scn))]
        if replays:
            decision.entries = [e for e in decision.entries if e not in replays]
            decision.counts.conflicts -= len(replays)
        return decision, len(replays)

    # A channel's writer on one connection (drc.apply.parallel.ParallelWriter has several).

    def applied(self, scn: SCN) -> bool:
        """Whether ``scn``, beyond the checkpoint, was committed already (by a parallel group
        before the channel was set to one worker)."""
        return scn in self._done

    def recover(self, checkpoint: SCN) -> None:
        """On start, after the checkpoint was read: what parts of a parallel group committed
        beyond it, if the channel ran with ``parallel_workers`` > 1 before (a config change
        with that group half-written): skipped, so each is applied once."""
        if self.channel is None:
            return
        self._done = applied_set.recover(self.target, self.channel, checkpoint)
        self.target.commit()  # no read left open (a catch-up keeps this session idle)

    def rewound(self) -> list[Statement]:
        """What a rewind also writes: the rows parallel parts left (their transactions are
        applied again now, and must not be skipped at a later start)."""
        if self.channel is None:
            return []
        self._done = set()
        return [applied_set.delete(self.channel)]

    def half_written(self) -> bool:
        """Whether transactions beyond the checkpoint were committed already (by a parallel
        group, before the channel was set to one worker)."""
        return bool(self._done)

    def splits(self, transactions: Sequence[Transaction]) -> bool:
        """Whether a group may go out in parts: never, here."""
        return False

    def close(self) -> None:
        """The channel is done (its own session is closed by the channel)."""
