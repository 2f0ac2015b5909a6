"""Which source server a capture session reads, and from where (pure: no I/O).

``[source]`` may list several servers of one replication group (a primary and its replicas,
MariaDB GTID replication with ``log_slave_updates``). At each session start the replicator
inspects them all and :func:`choose` picks one:

- a reachable, writable (``read_only = 0``) server before a read-only one, and among equals the
  server the buffer's last SCN came from, then the configured order;
- a server that does not contain the buffer's GTID position is skipped; if no reachable server
  contains it, capture stops with SourceDivergedError naming both positions.

:func:`plan` is the change_id rule: on the server the last SCN came from, reading resumes at
that SCN's binlog coordinates with the same change_id; on any other server it resumes by GTID
(``@slave_connect_state`` = the position stored with the last SCN) with change_id + 1, so every
SCN taken there sorts after every SCN taken before (drc.core.scn).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from drc.core import gtid as gtids
from drc.core.errors import SourceConfigError, SourceDivergedError
from drc.core.gtid import Gtid, GtidPosition
from drc.core.scn import SCN


@dataclass(frozen=True, slots=True)
class Candidate:
    """What a session start learned of one configured server."""

    name: str  # host:port, never credentials
    server_id: int
    read_only: bool
    binlog_state: tuple[Gtid, ...]  # @@gtid_binlog_state
    binlog_pos: str  # @@gtid_binlog_pos, for messages


@dataclass(frozen=True, slots=True)
class Plan:
    """How a session starts on ``candidate``: by binlog position (``gtid`` None) or by GTID."""

    candidate: Candidate
    change_id: int
    gtid: str | None  # the @slave_connect_state to send, None: resume at the last SCN's position
    position: dict[int, Gtid] | None  # the GTID position capture starts from, if known


def plan(candidate: Candidate, last: SCN | None, stored: GtidPosition | None) -> Plan:
    """The start on ``candidate`` after ``last`` (None: an empty buffer) whose stored GTID
    position is ``stored`` (None: unknown, a buffer written before positions were kept).

    Raises SourceDivergedError when the server does not contain that position, and
    SourceConfigError for a different server when the position is unknown.
    """
    if last is None:
        return Plan(candidate, 1, None, None)
    if stored is not None:
        check_contains(candidate, stored)
    if candidate.server_id == last.server_id:
        return Plan(candidate, last.change_id, None, None if stored is None else dict(stored))
    if stored is None:
        raise SourceConfigError(
            f"the buffer was captured from server_id {last.server_id} but source "
            f"{candidate.name} has server_id {candidate.server_id}, and the buffer's last "
            f"transaction ({last}) carries no GTID to resume from on another server. Point the "
            "replicator at the original source until it has captured a transaction, or start "
            "a new buffer for the new one"
        )
    return Plan(candidate, last.change_id + 1, gtids.format_position(stored), dict(stored))


def check_contains(candidate: Candidate, stored: GtidPosition) -> None:
    """SourceDivergedError unless ``candidate`` contains every GTID of ``stored``."""
    missing = gtids.missing(stored, candidate.binlog_state)
    if not missing:
        return
    buffer_pos = gtids.format_position(stored)
    if not gtids.shares_domain(stored, candidate.binlog_state):
        raise SourceDivergedError(
            f"source {candidate.name} (server_id {candidate.server_id}) has never written "
            f"GTID domain(s) {sorted(stored)} of the buffer (buffer position {buffer_pos}, "
            f"server gtid_binlog_pos {candidate.binlog_pos or '(empty)'}): it is another "
            "datacenter's or an unrelated server. Point [source] at this datacenter's primary "
            "or its replicas"
        )
    raise SourceDivergedError(
        f"source {candidate.name} (server_id {candidate.server_id}) lacks transactions the "
        f"buffer already holds: buffer position {buffer_pos}, server gtid_binlog_pos "
        f"{candidate.binlog_pos or '(empty)'} (missing {', '.join(map(str, missing))}). It "
        "diverged or lags behind; DRC will not continue from it. Let it catch up, or point "
        "[source] at a server that has these transactions"
    )


def choose(candidates: Sequence[Candidate], last: SCN | None, stored: GtidPosition | None) -> Plan:
    """The plan for the best usable candidate (module docstring); raises the first refusal
    when none is usable. ``candidates`` are the reachable servers in configured order."""
    if not candidates:
        raise ValueError("choose needs at least one reachable candidate")
    current = None if last is None else last.server_id
    ranked = sorted(
        enumerate(candidates),
        key=lambda item: (item[1].read_only, item[1].server_id != current, item[0]),
    )
    refusals: list[Exception] = []
    for _index, candidate in ranked:
        try:
            return plan(candidate, last, stored)
        except (SourceDivergedError, SourceConfigError) as exc:
            refusals.append(exc)
    raise refusals[0]


__all__ = ["Candidate", "Plan", "check_contains", "choose", "plan"]
