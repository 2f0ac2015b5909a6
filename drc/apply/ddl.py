"""Replicated DDL, each statement run exactly once on the target.

DDL has no transaction for the checkpoint row to ride in, so the channel brackets it: it
commits what is open with the checkpoint's ``pending_ddl_scn`` set to the DDL's SCN, then
:meth:`DdlApplier.apply` runs each statement, then the channel moves the checkpoint to the
DDL's SCN. Each statement, on a session of its own with the source's default database::

    journal read     drc.ddl_journal (drc.apply.ddl_journal): done already? skip it
    lock             a named lock per channel: a killed channel's statement may still be
                     running in the server, wait for it
    definitions      of the objects the statement names, as the target has them now
    decide           journalled as running and the definitions changed since: it ran before
                     a crash, record it as done; otherwise run it (journalled as running
                     first, with the definitions it found)
    journal done     with the definitions it left

After a crash in between, or after a rewind, the journal says whether the statement ran. The
target's table definitions are read again after every DDL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from drc.apply import ddl_journal, objects
from drc.apply.control import Stoppage
from drc.apply.retry import Retried, Stopped
from drc.apply.target import DdlRunner, Target
from drc.conflicts.target import ConflictTarget
from drc.core.errors import FatalError
from drc.core.events import SchemaChange, Transaction
from drc.core.statements import for_log

log = logging.getLogger(__name__)

DDL_LOCK_POLL_S = 5  # how long one wait for an earlier run's DDL lock lasts


class DdlApplier:
    """A channel's DDL on its target; ``definer``: ChannelConfig.definer (drc.apply.objects),
    ``conflicts``: the channel's conflict handling, whose tables are checked after DDL."""

    def __init__(
        self, target: Target, name: str, definer: str, conflicts: ConflictTarget | None = None
    ) -> None:
        self.target = target
        self.name = name
        self.definer = definer
        self.conflicts = conflicts
        self.ran = 0  # statements run (ApplyStats.ddl); not those found done

    def apply(self, txn: Transaction, retrying: Retried, stopping: Callable[[], bool]) -> None:
        """Run each statement of ``txn`` exactly once, then read the target's tables again. A
        statement the target refuses stops the channel at ``txn`` (FatalError.stoppage)."""
        for seq, change in enumerate(txn.ddl):
            attempt = partial(self._statement, str(txn.scn), seq, change, txn.timestamp, stopping)
            try:
                retrying(attempt)
            except FatalError as exc:
                exc.stoppage = Stoppage.at(txn.scn, exc, [txn])
                raise
        self.target.forget_tables()
        if self.conflicts is not None:  # a new or altered table may need its tombstones
            retrying(self.conflicts.refresh_tables)

    def _statement(
        self,
        scn: str,
        seq: int,
        change: SchemaChange,
        timestamp: int,
        stopping: Callable[[], bool],
    ) -> None:
        target, name = self.target, self.name
        rows = target.query(ddl_journal.select(name, scn, seq), "reading the DDL journal")
        target.commit()
        entry = ddl_journal.parse(rows[0]) if rows else None
        if entry is not None and entry.state == ddl_journal.DONE:
            log.info("channel %s: DDL at %s #%d already applied, skipped", name, scn, seq)
            return
        what = f"DDL {for_log(change.statement)!r}"
        with target.ddl_session(what) as ddl:
            # A killed channel's DDL may still be running in the server: wait for it first.
            while not ddl.try_lock(ddl_journal.lock_name(name), DDL_LOCK_POLL_S):
                if stopping():
                    raise Stopped()
                log.info("channel %s: waiting for an earlier run of %s to finish", name, what)
            current = _definitions(ddl, change)
            decision = ddl_journal.decide(entry, current)
            if decision is ddl_journal.Decision.RAN:
                log.info("channel %s: %s ran before a restart; recorded as done", name, what)
                after = current
            else:
                statement = objects.prepared(change, ddl, self.definer, name)
                if entry is None:
                    target.execute(ddl_journal.start(name, scn, seq, change.statement, current))
                    target.commit()
                ddl.run(statement, timestamp)
                self.ran += 1
                after = _definitions(ddl, change)
        target.execute(ddl_journal.finish(name, scn, seq, change.statement, after))
        target.commit()


def _definitions(ddl: DdlRunner, change: SchemaChange) -> ddl_journal.Definitions:
    return {
        ddl_journal.key(kind, db, obj): _normalised(ddl.definition(kind, db, obj))
        for kind, db, obj in ddl_journal.objects(change)
    }


def _normalised(create: str | None) -> str | None:
    return None if create is None else ddl_journal.normalise(create)
