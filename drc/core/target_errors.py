"""What the target database's side raises, inside DRC's one exception tree (drc.core.errors).

Apply channels, conflict handling (drc.conflicts), the target session and bulk catch-up all
raise or catch these, so they sit in the core below every one of them.

    DrcError
    +-- RetriableError
    |   +-- LockConflictError       deadlock (1213) or lock wait timeout (1205): re-apply the
    |   |                           whole target transaction, at most ChannelConfig.retries times
    |   +-- TargetUnavailableError  the target is down or dropped the connection (2003/2006/2013..)
    |       +-- TargetReadOnlyError the target refuses writes (read_only, 1290/1836)
    |       +-- TargetFullError     the target has no room: a table or its disk is full
    |                               (1114/1021); wait until space is freed
    |       +-- CatchupRunningError a bulk catch-up holds the channel (drc.apply.lease)
    |       +-- CatchupUnfinishedError  an interrupted catch-up run applied part of its range
    |                               beyond the checkpoint: wait for `drc catchup` to finish it
    |                               all: wait and retry without limit, nothing is lost
    +-- FatalError                  the channel stops; its checkpoint was not advanced
        +-- ApplyError              the target rejected a statement for another reason
        |   +-- RetriesExhaustedError  a lock conflict that kept coming back
        |   +-- TargetTlsError      TLS refused the connection (untrusted certificate, wrong
        |                           host name, no TLS on the server): fix the tls keys
        +-- TargetSchemaError       the target's tables do not fit the stream
        |   +-- MissingTableError
        |   +-- MissingColumnError
        |   +-- NoPrimaryKeyError   no_primary_key = "refuse" and the table has no primary key
        |   +-- TargetDivergedError a keyless table's UNIQUE key refused a source row
        +-- CheckpointMismatchError the checkpoint row belongs to another origin

A fatal error never loses a change: the failed target transaction is rolled back, so the
checkpoint row still names the last SCN that was applied, and a restart (after the operator's
fix) resumes right after it. No message carries a password; row values appear only where the
server's own error text quotes them (e.g. the key of a duplicate entry).
"""

from __future__ import annotations

from drc.core.errors import FatalError, RetriableError


class LockConflictError(RetriableError):
    """The target aborted the transaction for a deadlock or lock wait timeout; retry it whole."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class TargetUnavailableError(RetriableError):
    """The target database cannot be reached or dropped the connection; wait and reconnect."""


class CatchupRunningError(TargetUnavailableError):
    """A live bulk catch-up holds the channel's lease (drc.apply.lease): wait for it."""


class CatchupUnfinishedError(TargetUnavailableError):
    """An interrupted bulk catch-up run (drc.apply.catchup_journal) applied part of its range
    beyond the channel's checkpoint: streaming from the checkpoint would apply it twice (keyless
    tables' rows duplicated), so the channel first finishes the run (or waits while it cannot)."""


class TargetReadOnlyError(TargetUnavailableError):
    """The target is read-only (e.g. a demoted primary during a switchover); wait for writes."""


class TargetFullError(TargetUnavailableError):
    """The target refuses writes for lack of space (a full disk, a table at its size limit):
    nothing is wrong with the change, so wait until an operator frees space."""


class ApplyError(FatalError):
    """The target rejected a statement; ``code`` is the server's error number (or None)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class TargetTlsError(ApplyError):
    """TLS refused the connection to the target; reconnecting cannot fix a certificate."""


class RetriesExhaustedError(ApplyError):
    """A target transaction hit a deadlock or lock wait timeout more than ``retries`` times.

    Look for long transactions or hot rows on the target (SHOW ENGINE INNODB STATUS), then restart
    the channel, or raise ChannelConfig.retries.
    """


class TargetSchemaError(FatalError):
    """A row change that the target's table cannot take as it is defined."""


class MissingTableError(TargetSchemaError):
    """The target has no such table: create it (or map the source table to an existing one)."""


class MissingColumnError(TargetSchemaError):
    """A source column the target table lacks: add it, or map it with map_columns."""


class NoPrimaryKeyError(TargetSchemaError):
    """A change to a table without a primary key, and the channel is set to refuse them."""


class TargetDivergedError(TargetSchemaError):
    """The target holds rows the source does not (a keyless table's UNIQUE key refused a row the
    source inserted): compare the table on both sides and fix the target."""


class CheckpointMismatchError(FatalError):
    """The channel's checkpoint row was written for another origin datacenter.

    Reusing a channel name for another stream would resume at an SCN of the wrong stream;
    delete the row (or pick a new channel name) deliberately.
    """
