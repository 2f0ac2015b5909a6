"""The channel's side of the catch-up lease: when a bulk catch-up or a snapshot writes into the
channel, and where streaming goes on after it.

A catch-up or snapshot holds the channel's lease (drc.apply.lease) while it writes; a catch-up
also records its run (drc.apply.catchup_journal). Every apply transaction of the channel first
reads both, with a shared lock on the lease row held to its COMMIT, so a catch-up cannot take
the lease in the middle of it (:meth:`CatchupHandover.check`):

    lease held by another owner      wait (CatchupRunningError, retried without limit)
    a run unfinished, lease free     the run applied part of its range beyond the checkpoint:
                                     finish it here (``finish``, given by the composition
                                     root: drc.catchup.driver.finish_interrupted) or wait for
                                     ``drc catchup`` to (CatchupUnfinishedError)
    taken_at changed since the       a catch-up or snapshot ran meanwhile and moved the
      checkpoint was read            checkpoint: the channel reads it again and goes on there
    otherwise                        write

While the lease was last seen free and unchanged the read is sent ahead of the writes, in the
same round trip, and checked before COMMIT (:meth:`CatchupHandover.send_ahead`); if it moved,
the attempt is rolled back (LeaseMoved) and made again reading the lease first. A channel with
nothing to write looks at the lease every LEASE_CHECK_S (:meth:`CatchupHandover
.taken_meanwhile`), so it sees the tables a snapshot joined although it never commits.

A catch-up driver opens the channel itself and applies DDL through it: that channel is built
with the driver's lease ``owner`` and writes only while that owner holds the lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from drc.apply import catchup_journal, checkpoint, lease
from drc.apply.retry import Retried, Stopped
from drc.apply.target import Target
from drc.core.scn import SCN
from drc.core.target_errors import CatchupRunningError, CatchupUnfinishedError

log = logging.getLogger(__name__)

LEASE_CHECK_S = 1.0  # how often a channel with nothing to write looks at its lease
FINISH_RETRY_S = 30.0  # after a failed finish of an interrupted catch-up run, the next try
WAIT_LOG_EVERY_S = 30.0  # a wait for a catch-up (it may last hours) is logged this often

# Finishes the channel's interrupted catch-up run in this process, asked whether the channel
# is stopping (drc.catchup.driver.finish_interrupted, bound by the composition root).
FinishRun = Callable[[Callable[[], bool]], object]

_MOVED = object()  # the checkpoint may have moved since it was read: read it again

LeaseState = tuple[str, bool, object, catchup_journal.Run | None]  # owner, held, taken_at, run


class LeaseMoved(Exception):
    """The lease read sent ahead of the writes found it taken or moved: roll back, read first."""


class CatchupHandover:
    """The lease as the channel last saw it, and the interrupted run it is finishing, if any.
    Used by the channel's thread only."""

    def __init__(
        self,
        target: Target,
        name: str,
        *,
        owner: str = "",
        finish: FinishRun | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self.name = name
        self.owner = owner  # a catch-up driver's own channel applies under its lease
        self.finish = finish  # None: the channel waits for a `drc catchup` to finish a run
        self.unfinished: catchup_journal.Run | None = None  # the run being finished, if any
        self._clock = clock
        self._taken: object = None  # the lease's taken_at when the checkpoint was read
        self._seen: object = None  # ... and as the last check found it
        self._checked = -LEASE_CHECK_S  # clock of the last idle look (taken_meanwhile)
        self._steady = False  # the lease was last seen free, unchanged (send_ahead)
        # The last attempt lost its connection (drc.apply.retrier): its COMMIT may have
        # landed unseen, so the next one reads the checkpoint first, as after a catch-up.
        self.unsure = False
        self._finish_after = 0.0  # clock before which a failed finish is not tried again
        self._finish_failure = ""  # why the last try failed, shown while the channel waits
        self._logged: tuple[str, float] = ("", 0.0)  # a wait is logged every WAIT_LOG_EVERY_S

    @staticmethod
    def create_statements() -> list[str]:
        return [lease.create_statement(), *catchup_journal.create_statements()]

    def opened(self) -> None:
        """The channel is about to read its checkpoint (its start, in no transaction)."""
        owner, held, taken, _run = self._state()
        # Held by a catch-up: the checkpoint read next is not the one to stream from.
        self._taken = _MOVED if held and owner != self.owner else taken

    # ------------------------------------------------------------------ in the apply transaction

    @property
    def steady(self) -> bool:
        """Whether the next attempt may send the lease read ahead of its writes."""
        return self._steady and not self.owner and not self.unsure

    def send_ahead(self) -> Callable[[], None]:
        """Send the lease read first in the transaction, without waiting for it; returns the
        check to make before COMMIT (LeaseMoved when the lease is no longer free, unchanged)."""
        seen: list[Any] = []
        self.target.send_read(catchup_journal.channel_state(self.name), seen.extend)
        return partial(self._still_steady, seen)

    def _still_steady(self, rows: list[Any]) -> None:
        owner, held, taken, run = self._parse(rows)
        if held or run is not None or taken != self._taken:
            self._steady = False
            raise LeaseMoved()

    def check(self, applied: SCN) -> bool:
        """Read the lease and run first in the transaction (shared lock): raise while a live
        catch-up holds the channel, or while an interrupted one's run is unfinished (the
        target holds part of its range beyond ``applied``, the checkpoint). True when a
        catch-up or snapshot ran since the checkpoint was read, or the last attempt lost its
        connection (:attr:`unsure`): the channel reads it again, then calls :meth:`caught_up`."""
        owner, held, taken, run = self._state()
        if self.owner and not (held and owner == self.owner):
            raise lease.LeaseLostError(
                f"catch-up {self.owner} lost the lease of channel {self.name}: nothing "
                "more is written; run the catch-up again"
            )
        self.unfinished = run if run is not None and not held else None
        if held and owner != self.owner:
            raise CatchupRunningError(f"bulk catch-up {owner} holds channel {self.name}")
        if self.unfinished is not None:
            raise CatchupUnfinishedError(self._unfinished_message(self.unfinished, applied))
        self._steady = not held and run is None
        self._seen = taken
        return taken != self._taken or self.unsure

    def caught_up(self) -> SCN | None:
        """The checkpoint the catch-up or snapshot the last :meth:`check` found wrote, or the
        one a COMMIT whose reply was lost wrote (None: no row), read in the channel's
        transaction; the channel goes on from there."""
        found = self.target.query(checkpoint.select(self.name), "reading the checkpoint")
        self._taken = self._seen
        unsure, self.unsure = self.unsure, False
        if not found:
            return None
        moved = checkpoint.parse(self.name, found[0]).scn
        why = "the checkpoint after a lost connection is" if unsure else "a catch-up applied up to"
        log.info("channel %s: %s %s; streaming from there", self.name, why, moved)
        return moved

    # ------------------------------------------------------------------ between transactions

    def taken_meanwhile(self, retrying: Retried) -> bool:
        """Whether a catch-up or snapshot took the lease since the checkpoint was read, looked
        at every LEASE_CHECK_S at most (False in between). A channel with nothing to write
        reads the lease only when it commits: without this, one whose selected tables are idle
        (or whose changes are all echoes) would never see the tables a snapshot joined, nor
        apply their changes. ``retrying`` runs the read as the channel's transactions run."""
        now = self._clock()
        if now - self._checked < LEASE_CHECK_S:
            return False
        self._checked = now
        return bool(retrying(self._taken_since))

    def _taken_since(self) -> bool:
        taken = self._state()[2]
        self.target.commit()  # the read committed: nothing stays locked
        return taken != self._taken

    def finish_interrupted(
        self, stopping: Callable[[], bool], waiting: Callable[[str], None]
    ) -> None:
        """Finish the interrupted catch-up run in this thread, to the end it recorded; the
        retried transaction then streams on from the checkpoint it wrote (:meth:`check`).
        A failure (the remote or target away, the range gone) is logged and shown through
        ``waiting`` (the channel's state), and tried again after FINISH_RETRY_S."""
        run, now = self.unfinished, self._clock()
        if self.finish is None or run is None or now < self._finish_after:
            return
        log.info("channel %s: the interrupted %s holds no live lease any more: finishing it "
                 "here (what it committed is skipped), then streaming on from its end",
                 self.name, run.describe())  # fmt: skip
        waiting(f"finishing the interrupted {run.describe()}")
        try:
            self.finish(stopping)
        except Stopped:
            raise
        except Exception as exc:  # shown (the wait's message) and tried again meanwhile
            self._finish_after = now + FINISH_RETRY_S
            self._finish_failure = f"{type(exc).__name__}: {exc}"
            log.error("channel %s: finishing the interrupted %s failed: %s; trying again in "
                      "%.0fs", self.name, run.describe(), exc, FINISH_RETRY_S)  # fmt: skip
            return
        self.unfinished, self._finish_failure = None, ""
        log.info("channel %s: the interrupted catch-up run is finished", self.name)

    def finished_meanwhile(self, exc: BaseException) -> bool:
        """``exc`` waited for an interrupted run that is finished since: nothing to report."""
        return isinstance(exc, CatchupUnfinishedError) and self.unfinished is None

    def logged_lately(self, exc: BaseException) -> bool:
        """Whether this wait for a catch-up (it may last hours) was logged in the last
        WAIT_LOG_EVERY_S; if not, it is logged now."""
        if not isinstance(exc, CatchupRunningError | CatchupUnfinishedError):
            return False
        now = self._clock()
        if str(exc) == self._logged[0] and now - self._logged[1] < WAIT_LOG_EVERY_S:
            return True
        self._logged = (str(exc), now)
        return False

    # ------------------------------------------------------------------ reading

    def _state(self) -> LeaseState:
        """The catch-up lease (owner, held now, taken_at) and the channel's unfinished run."""
        statement = catchup_journal.channel_state(self.name)
        return self._parse(self.target.query(statement, "reading the catch-up lease"))

    def _parse(self, found: Sequence[Any]) -> LeaseState:
        if not found:
            return "", False, None, None
        row = found[0]
        return str(row[0]), bool(row[1]), row[2], catchup_journal.parse_run(self.name, row[3:])

    def _unfinished_message(self, run: catchup_journal.Run, applied: SCN) -> str:
        how = "run"
        if self.finish is not None:
            failed = self._finish_failure
            every = f"tried again every {FINISH_RETRY_S:.0f} s"
            tried = f" (its last try failed: {failed}; {every})" if failed else ""
            how = f"the channel finishes it itself{tried}, or run"
        return (
            f"channel {self.name} waits: the interrupted {run.describe()} applied part of its "
            f"range beyond the checkpoint {applied}, and streaming it again would apply "
            f"that twice. To finish it, {how} `drc catchup --config FILE --channel {self.name}` "
            "(what the run committed is skipped)"
        )
