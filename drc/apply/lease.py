"""The catch-up lease: one row per channel in the target's ``drc`` schema that a running catch-up
holds, and that the streaming channel checks before it applies.

    drc.catchup_lease
    +-------------+--------------+--------------------------------------------------------+
    | channel  PK | VARCHAR(64)  | ChannelConfig.name                                     |
    | owner       | VARCHAR(128) | who holds it: host, pid and a random part, never       |
    |             |              | anything secret; '' once released                      |
    | taken_at    | DATETIME(6)  | UTC, when this owner took it                           |
    | renewed_at  | DATETIME(6)  | UTC, its last renewal                                  |
    | expires_at  | DATETIME(6)  | UTC; the lease is held while expires_at > now          |
    +-------------+--------------+--------------------------------------------------------+

Every time is the *target server's* ``UTC_TIMESTAMP(6)``, never a client clock, so a catch-up
driver on one host and a streaming channel on another agree on when a lease has expired.

- :func:`take`: one conditional UPDATE (after making sure the row exists), so two catch-ups
  racing for a channel cannot both win: the row lock serialises them and the second sees the
  first's unexpired lease. The same owner may take it again (a restarted driver with its id).
- :func:`renew` succeeds only while the lease is the caller's and unexpired: a catch-up whose
  renewals stopped for longer than the TTL (paused, partitioned) has lost it and must stop
  writing, even if nobody took it since (the streaming channel may have applied meanwhile).
  :class:`Renewer` renews in a thread and records the loss.
- :func:`release` gives it up at once; :func:`release_statement` lets the catch-up release it
  in the same transaction as its final checkpoint, so streaming resumes exactly there.
- :func:`lease_holder` is the streaming channel's check. To be exact against a catch-up taking
  the lease at that moment, run :func:`holder_statement` with ``lock=True`` inside the apply
  transaction: the shared lock makes :func:`take` wait until that transaction has committed, and
  the catch-up reads the checkpoint only after it holds the lease.

Connections: any DB-API connection in autocommit mode (pymysql). Run them with
``skip_replication = 1`` (an apply session), so lease writes are never captured as changes.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from drc.core.errors import FatalError, RetriableError
from drc.core.markers import CHECKPOINT_SCHEMA
from drc.mysql import driver
from drc.mysql.sql import Statement, ident

log = logging.getLogger(__name__)

TABLE = "catchup_lease"
DEFAULT_TTL_S = 30.0
_TABLE = f"{ident(CHECKPOINT_SCHEMA)}.{ident(TABLE)}"
_NOW = "UTC_TIMESTAMP(6)"
_EXPIRES = f"{_NOW} + INTERVAL %s MICROSECOND"


class LeaseHeldError(RetriableError):
    """Another live catch-up holds the channel's lease; ``holder`` says who and until when."""

    def __init__(self, message: str, holder: Holder) -> None:
        super().__init__(message)
        self.holder = holder


class LeaseLostError(FatalError):
    """The lease expired before it was renewed, or another owner took it: stop writing."""


@dataclass(frozen=True, slots=True)
class Holder:
    channel: str
    owner: str
    expires_at: dt.datetime  # UTC, the target server's clock


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease this process holds (until ``expires_at`` unless renewed)."""

    channel: str
    owner: str
    ttl_s: float
    expires_at: dt.datetime


class Connection(Protocol):
    def cursor(self) -> Any: ...


def new_owner() -> str:
    """An owner id for one catch-up run: host, pid and a random part (unique per run)."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def create_statement() -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_TABLE} (`channel` VARCHAR(64) NOT NULL, "
        "`owner` VARCHAR(128) NOT NULL DEFAULT '', `taken_at` DATETIME(6) NULL, "
        "`renewed_at` DATETIME(6) NULL, `expires_at` DATETIME(6) NOT NULL, "
        "PRIMARY KEY (`channel`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )


def holder_statement(channel: str, lock: bool = False) -> Statement:
    """The unexpired holder of ``channel``'s lease; ``lock`` adds a shared lock on the row
    (inside the streaming channel's apply transaction, see the module docstring)."""
    return Statement(
        f"SELECT `owner`, `expires_at` FROM {_TABLE} WHERE `channel` = %s "
        f"AND `expires_at` > {_NOW}" + (" LOCK IN SHARE MODE" if lock else ""),
        (channel,),
    )


def state_statement(channel: str) -> Statement:
    """The streaming channel's check, inside its apply transaction (shared lock, as
    :func:`holder_statement` with ``lock``): (owner, held now, taken_at). A ``taken_at`` other
    than the one the channel saw when it read its checkpoint means a catch-up ran since and
    moved the checkpoint: the channel continues from there."""
    return Statement(
        f"SELECT `owner`, `expires_at` > {_NOW}, `taken_at` FROM {_TABLE} "
        "WHERE `channel` = %s LOCK IN SHARE MODE",
        (channel,),
    )


def release_statement(lease: Lease) -> Statement:
    return Statement(
        f"UPDATE {_TABLE} SET `owner` = '', `expires_at` = {_NOW} "
        "WHERE `channel` = %s AND `owner` = %s",
        (lease.channel, lease.owner),
    )


def _micros(ttl_s: float) -> int:
    if not 0 < ttl_s <= 86_400:
        raise ValueError(f"a lease TTL must be within 0..86400 seconds, got {ttl_s}")
    return int(ttl_s * 1_000_000)


def ensure_table(conn: Connection) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {ident(CHECKPOINT_SCHEMA)}")
        cur.execute(create_statement())


def lease_holder(conn: Connection, channel: str) -> Holder | None:
    """Who holds ``channel``'s lease now, None when nobody does (never taken, released or
    expired). The streaming channel applies nothing while this is not None."""
    statement = holder_statement(channel)
    with conn.cursor() as cur:
        cur.execute(statement.sql, statement.params)
        row = cur.fetchone()
    return None if row is None else Holder(channel, str(row[0]), row[1])


def take(conn: Connection, channel: str, owner: str, ttl_s: float = DEFAULT_TTL_S) -> Lease:
    """Take ``channel``'s lease for ``ttl_s`` seconds; LeaseHeldError while another owner's
    lease is unexpired."""
    micros = _micros(ttl_s)
    with conn.cursor() as cur:
        cur.execute(
            f"INSERT IGNORE INTO {_TABLE} (`channel`, `expires_at`) VALUES (%s, {_NOW})",
            (channel,),
        )
        cur.execute(
            f"UPDATE {_TABLE} SET `owner` = %s, `taken_at` = {_NOW}, `renewed_at` = {_NOW}, "
            f"`expires_at` = {_EXPIRES} WHERE `channel` = %s "
            f"AND (`expires_at` <= {_NOW} OR `owner` = %s)",
            (owner, micros, channel, owner),
        )
        taken = cur.rowcount == 1
    holder = lease_holder(conn, channel)
    if taken and holder is not None and holder.owner == owner:
        log.info("catch-up lease of channel %s taken by %s", channel, owner)
        return Lease(channel, owner, ttl_s, holder.expires_at)
    if holder is None:  # expired again before it could be read back (a tiny TTL): retry
        holder = Holder(channel, "", dt.datetime.min)
    raise LeaseHeldError(
        f"channel {channel} is held by catch-up {holder.owner or '(none)'} until "
        f"{holder.expires_at} UTC; wait for it to finish, or for its lease to expire if it "
        "was killed",
        holder,
    )


def renew(conn: Connection, lease: Lease) -> Lease:
    """Extend ``lease`` by its TTL; LeaseLostError when it expired or another owner has it."""
    with conn.cursor() as cur:
        cur.execute(
            f"UPDATE {_TABLE} SET `renewed_at` = {_NOW}, `expires_at` = {_EXPIRES} "
            f"WHERE `channel` = %s AND `owner` = %s AND `expires_at` > {_NOW}",
            (_micros(lease.ttl_s), lease.channel, lease.owner),
        )
        renewed = cur.rowcount == 1
    holder = lease_holder(conn, lease.channel) if renewed else None
    if holder is None or holder.owner != lease.owner:
        raise LeaseLostError(
            f"catch-up {lease.owner} lost the lease of channel {lease.channel}: it expired "
            "before it was renewed, or another catch-up took it. Stop writing; run the "
            "catch-up again"
        )
    return Lease(lease.channel, lease.owner, lease.ttl_s, holder.expires_at)


def release(conn: Connection, lease: Lease) -> None:
    """Give the lease up now (nothing happens if it is not this owner's any more)."""
    statement = release_statement(lease)
    with conn.cursor() as cur:
        cur.execute(statement.sql, statement.params)
    log.info("catch-up lease of channel %s released by %s", lease.channel, lease.owner)


class Renewer:
    """Renews a lease every ``ttl / 3`` in a thread, on a connection from ``connect``, until
    :meth:`stop`. A renewal that fails for another reason (the target unreachable) is tried
    again; once the TTL has passed since the last successful renewal (``clock``, monotonic),
    or a renewal finds the lease gone, ``lost`` is set and ``on_lost`` called. Writers call
    :meth:`check` before each write."""

    def __init__(
        self,
        lease: Lease,
        connect: Callable[[], Any],
        on_lost: Callable[[BaseException], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease = lease
        self.lost = threading.Event()
        self.error: BaseException | None = None
        self._connect = connect
        self._on_lost = on_lost
        self._clock = clock
        self._renewed = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="catchup-lease", daemon=True)

    def start(self) -> Renewer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def check(self) -> None:
        """LeaseLostError once the lease is lost (or may be: not renewed within its TTL)."""
        if not self.lost.is_set() and self._clock() - self._renewed >= self.lease.ttl_s:
            self._lose(LeaseLostError(f"the lease of {self.lease.channel} was not renewed in time"))
        if self.lost.is_set():
            raise LeaseLostError(str(self.error))

    def _run(self) -> None:
        conn = None
        while not self._stop.wait(self.lease.ttl_s / 3) and not self.lost.is_set():
            started = self._clock()
            try:
                conn = conn or self._connect()
                self.lease = renew(conn, self.lease)
                self._renewed = started
            except LeaseLostError as exc:
                self._lose(exc)
            except Exception as exc:  # the target unreachable: retry until the TTL has passed
                log.warning("renewing the catch-up lease of %s failed: %s", self.lease.channel, exc)
                _closed(conn)
                conn = None
                try:
                    self.check()
                except LeaseLostError:
                    pass
        _closed(conn)

    def _lose(self, exc: BaseException) -> None:
        if self.lost.is_set():
            return
        self.error = exc
        self.lost.set()
        log.error("%s", exc)
        if self._on_lost is not None:
            self._on_lost(exc)


def _closed(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # closing a broken connection may fail too; it is dropped anyway
            pass


def session(settings: Any) -> Any:
    """An autocommit apply-like session for the lease (skip_replication: never captured);
    ``settings``: drc.mysql.driver.TargetSettings."""
    conn = driver.connect(settings)
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1, time_zone = '+00:00'")
    return conn


def take_waiting(
    settings: Any, channel: str, owner: str, ttl_s: float, out: Callable[[str], None]
) -> Lease:
    """``channel``'s lease for ``owner``, waiting while another owner's (a killed one's until
    it expires) is held. Bulk catch-up and snapshots both take it."""
    while True:
        conn = session(settings)
        try:
            ensure_table(conn)
            return take(conn, channel, owner, ttl_s)
        except LeaseHeldError as exc:
            out(f"waiting: {exc}")
        finally:
            conn.close()
        time.sleep(min(ttl_s / 3, 5.0))
