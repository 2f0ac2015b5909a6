"""A large source transaction written into ONE open target transaction, piece by piece.

A channel holds a group's transactions until they commit (drc.apply.group), so that a failed
attempt is made again from memory. A transaction of a million rows held that way cost the
channel hundreds of megabytes; instead, once its fragments pass a piece's size
(:meth:`drc.apply.group.Group.piece_due`) they are decided and written into an open target
transaction and dropped, and so is each later piece; the last piece is written with the
checkpoint row and COMMIT. Still one target transaction for one source transaction: atomic as
on the source, one DRC-originated transaction for the other side to recognise (no echo).

    first piece   the lease read first (drc.apply.handover.check: its shared lock keeps a
                  catch-up out until COMMIT), then the piece's writes; retried whole as any
                  target transaction is (nothing of the transaction is written before it)
    later pieces  written in the same transaction, no checkpoint, no COMMIT
    last piece    with the checkpoint row (at the transaction's SCN), and COMMIT

What is written before the last piece is in memory no more, so a failure after the first
piece cannot be retried from memory: the retrier rolls the transaction back and waits as
usual (drc.apply.retrier), then the channel subscribes again after its checkpoint
(:class:`drc.apply.actions.Restart`), which precedes the transaction, and takes it again
from its first fragment. A crash anywhere before the COMMIT leaves nothing of it on the
target (the server rolls the transaction back), and a restart does the same: exactly once.
A change the target rejects stops the channel at this transaction (its stoppage names it).

Each piece is decided by the same engine as a group (conflict probes read and lock the rows
in the open transaction, which sees the earlier pieces' writes; replays, idempotent fixes),
so what a piece decides is what a group boundary there would have decided. A large
transaction goes alone, on the channel's own connection, also with parallel apply.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from drc.apply.actions import Restart
from drc.apply.checkpoint import CheckpointRow
from drc.apply.control import Stoppage
from drc.apply.engine import Converging
from drc.apply.handover import CatchupHandover
from drc.apply.parallel import ParallelWriter
from drc.apply.plan import Effects
from drc.apply.target import Target
from drc.apply.writer import GroupWriter, Written
from drc.core.errors import FatalError
from drc.core.events import Transaction
from drc.core.scn import SCN

log = logging.getLogger(__name__)

Retrying = Callable[[Callable[[], Any]], Any]  # an attempt run as the channel's are


class LargeTransaction:
    """The one large source transaction a channel has open on its target, if any. Used by
    the channel's thread only.

    ``retrying``: the channel's retries; ``converging``: the snapshot windows' changes applied
    without conflict detection, as of now; ``moved``: called when the lease says a catch-up or
    snapshot ran since the checkpoint was read, in the open transaction (the channel reads the
    checkpoint it wrote, and its tables)."""

    def __init__(
        self,
        target: Target,
        writer: GroupWriter | ParallelWriter,
        handover: CatchupHandover,
        retrying: Retrying,
        converging: Callable[[], Converging | None],
        moved: Callable[[], None],
    ) -> None:
        self.target = target
        self.writer = writer
        self.handover = handover
        self._retrying = retrying
        self._converging = converging
        self._moved = moved
        self.scn: SCN | None = None  # the source transaction open on the target
        self.pieces = 0  # written so far, the last one not counted
        self.rows = 0  # row changes of those pieces
        self._written = Written(Effects(), [], 0)
        self._failed = False  # an attempt failed after the first piece: take it again

    @property
    def open(self) -> bool:
        return self.scn is not None

    def write(self, piece: Sequence[Transaction], applied: SCN) -> None:
        """Write ``piece`` (fragments of one source transaction, after the checkpoint
        ``applied``) into the open target transaction, opening it with the first piece."""
        if not piece:
            return
        if self.scn is None:
            self.scn = piece[0].scn
            written = self._attempt(piece, lambda: self._first(piece, applied), again=True)
            log.info("channel %s: applying the large transaction %s piece by piece",
                     self.handover.name, self.scn)  # fmt: skip
        else:
            converging = self._converging()
            written = self._attempt(piece, lambda: self.writer.write_piece(piece, converging))
        self._add(written)
        self.pieces += 1
        self.rows += sum(len(t.changes) for t in piece)

    def commit(self, last: Sequence[Transaction], row: CheckpointRow) -> Written:
        """Write the last piece with the checkpoint ``row`` and COMMIT; what every piece did."""
        converging = self._converging()
        written = self._attempt(
            last, lambda: self.writer.write(last, row, None, converging), commit=True
        )
        self._add(written)
        done = self._written
        log.info("channel %s: committed the large transaction %s (%d rows, %d pieces)",
                 self.handover.name, self.scn, self.rows + sum(len(t.changes) for t in last),
                 self.pieces + 1)  # fmt: skip
        self.reset()
        return done

    def abandon(self, exc: BaseException) -> None:
        """Roll back what was written (the channel stops, or takes the stream again)."""
        if self.scn is not None:
            self.target.recover(exc)
        self.reset()

    def reset(self) -> None:
        self.scn = None
        self.pieces = self.rows = 0
        self._written = Written(Effects(), [], 0)
        self._failed = False

    # ------------------------------------------------------------------ attempts

    def _first(self, piece: Sequence[Transaction], applied: SCN) -> Written:
        """The transaction's first statements: the lease (its shared lock), then the piece."""
        if self.handover.check(applied):
            self._moved()
            exc = Restart()  # take the stream again after the checkpoint just read
            self.target.recover(exc)
            raise exc
        return self.writer.write_piece(piece, self._converging())

    def _attempt(
        self,
        piece: Sequence[Transaction],
        attempt: Callable[[], Written],
        *,
        again: bool = False,
        commit: bool = False,
    ) -> Written:
        """``attempt`` as the channel's target transactions run; ``again``: it may be made
        again after a failure (the first piece). Any other attempt, once one failed and was
        rolled back (and the target waited for), subscribes again after the checkpoint."""

        def once() -> Written:
            if self._failed and not again:
                self.reset()
                raise Restart()
            try:
                return attempt()
            except Restart:
                raise
            except BaseException:
                self._failed = True
                raise

        try:
            written: Written = self._retrying(once)
        except FatalError as exc:
            if exc.stoppage is None:
                exc.stoppage = Stoppage.at(self.scn, exc, piece)
            self.reset()
            raise
        self._failed = False
        return written

    def _add(self, written: Written) -> None:
        self._written.effects.add(written.effects)
        self._written.conflict_tables.extend(written.conflict_tables)
        self._written.replays += written.replays
