"""The heartbeat writer: this datacenter's ``drc.heartbeat`` row, upserted in its own source.

Why and how the other side reads it: drc.core.heartbeat. Here::

    once per connection   SET SESSION skip_replication = 1      (the DDL is DRC-originated:
                          CREATE DATABASE IF NOT EXISTS drc      never applied elsewhere)
                          CREATE TABLE IF NOT EXISTS drc.heartbeat (...)
                          SET SESSION skip_replication = 0
    every interval_s      INSERT ... ON DUPLICATE KEY UPDATE beat_ms   (autocommit; a plain,
                                                                        captured transaction)

The row write must NOT carry skip_replication: it has to reach the other datacenters' channels,
which pull with skip_drc. A failing write (source down, read-only, no privilege) is logged and
counted, never fatal: capture goes on, and the other side's lag grows, which is the truth about
what it has seen. The session user is [target]'s (else [source]'s): it needs CREATE, INSERT and
UPDATE on ``drc.*``, which the apply user has. With several ``[source] servers`` and no
[target], the beat goes to the one that is writable (``read_only = 0``), checked before every
beat: after a switchover the old primary is read-only, and a privileged user could still write
there, into a binlog nobody reads any more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from drc.core.heartbeat import COLUMN_BEAT_MS, COLUMN_DATACENTER
from drc.core.markers import CHECKPOINT_SCHEMA, HEARTBEAT_TABLE
from drc.mysql import driver
from drc.mysql.sql import quote

log = logging.getLogger(__name__)

LOG_EVERY_S = 30.0
_TABLE = f"{quote(CHECKPOINT_SCHEMA)}.{quote(HEARTBEAT_TABLE)}"
_DC, _MS = quote(COLUMN_DATACENTER), quote(COLUMN_BEAT_MS)
SETUP = (
    "SET SESSION skip_replication = 1",
    f"CREATE DATABASE IF NOT EXISTS {quote(CHECKPOINT_SCHEMA)}",
    f"CREATE TABLE IF NOT EXISTS {_TABLE} ({_DC} VARCHAR(64) NOT NULL PRIMARY KEY, "
    f"{_MS} BIGINT NOT NULL) ENGINE=InnoDB",
    "SET SESSION skip_replication = 0",
)
BEAT = (
    f"INSERT INTO {_TABLE} ({_DC}, {_MS}) VALUES (%s, %s) "
    f"ON DUPLICATE KEY UPDATE {_MS} = VALUES({_MS})"
)


@dataclass
class HeartbeatStats:
    beats: int = 0
    failures: int = 0
    last_beat_ms: int | None = None
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


class HeartbeatWriter:
    def __init__(
        self,
        datacenter: str,
        connect: Callable[[], Any],
        interval_s: float,
        *,
        writable_only: bool = False,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.datacenter = datacenter
        self.interval_s = interval_s
        self.stats = HeartbeatStats()
        self._connect = connect
        self._writable_only = writable_only  # re-check read_only before each beat
        self._wall_clock, self._clock = wall_clock, clock
        self._conn: Any = None
        self._logged = -LOG_EVERY_S

    def run(self, stop: threading.Event) -> None:
        """Beat every ``interval_s`` until ``stop``; failures are counted and retried."""
        try:
            while not stop.is_set():
                started = self._clock()
                self.beat()
                stop.wait(max(0.0, self.interval_s - (self._clock() - started)))
        finally:
            self._close()

    def beat(self) -> None:
        """Write one heartbeat; never raises a driver error (it is kept in ``stats``)."""
        beat_ms = int(self._wall_clock() * 1000)
        try:
            conn = self._open()
            if self._writable_only and is_read_only(conn):
                self._close()
                conn = self._open()
            with conn.cursor() as cur:
                cur.execute(BEAT, (self.datacenter, beat_ms))
        except driver.DRIVER_ERRORS as exc:
            self._close()
            self.stats.failures += 1
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            now = self._clock()
            if now - self._logged >= LOG_EVERY_S:
                self._logged = now
                log.warning("heartbeat not written (the other datacenters' lag grows): %s", exc)
            return
        self.stats.beats += 1
        self.stats.last_beat_ms = beat_ms
        self.stats.last_error = None

    def _open(self) -> Any:
        if self._conn is None:
            conn = self._connect()
            try:
                with conn.cursor() as cur:
                    for statement in SETUP:
                        cur.execute(statement)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except driver.DRIVER_ERRORS:
                pass  # already gone


class NoWritableServer(driver.OperationalError):
    """None of the listed servers is reachable and writable."""


def writable_server(servers: list[Any], timeout_s: float = 5.0) -> Any:
    """The first of ``servers`` (TargetSettings) that answers with read_only = 0."""
    for settings in servers:
        try:
            conn = connector(settings, timeout_s)()
        except (driver.DriverError, OSError):
            continue
        try:
            if not is_read_only(conn):
                return settings
        except (driver.DriverError, OSError):
            pass
        finally:
            conn.close()
    names = ", ".join(f"{settings.host}:{settings.port}" for settings in servers)
    raise NoWritableServer(f"no writable server among {names}")


def writable_connector(servers: list[Any], timeout_s: float = 5.0) -> Callable[[], Any]:
    """Opens a session on the first of ``servers`` (TargetSettings) whose read_only is 0."""
    return lambda: connector(writable_server(servers, timeout_s), timeout_s)()


def is_read_only(conn: Any) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.read_only")
        row = cur.fetchone()
    return bool(row and int(row[0]))


def connector(settings: Any, timeout_s: float = 5.0) -> Callable[[], Any]:
    """Opens an autocommit session as ``settings`` (a drc.mysql.driver.TargetSettings)."""
    return lambda: driver.connect(settings, timeout_s=timeout_s)
