"""Where a capture session starts: which configured server, and where in its binlog.

On an empty buffer the start is ``start_from`` on the chosen server, stored at once as an empty
marker so a restart before the first transaction resumes there. Otherwise it is the buffer's
``resume_scn``: on the server that SCN came from, at its binlog coordinates; on another server
of the source's replication group (drc.replicator.failover), by the GTID position stored with
that SCN, with change_id + 1.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drc.core import gtid as gtids
from drc.core.codec import decode_transaction, encode_transaction
from drc.core.errors import ScnTooOldError, SourceConfigError, SourceUnavailableError
from drc.core.events import Transaction
from drc.core.gtid import Gtid
from drc.core.scn import SCN
from drc.replicator.failover import Candidate, choose
from drc.replicator.room import RoomWait
from drc.replicator.source import (
    SourceInfo,
    SourceSettings,
    binlog_gtid_pos,
    check_not_purged,
    inspect_source,
    split_binlog_name,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionStart:
    """Where a capture session reads: the server, its change_id, and the start (a binlog
    coordinate, or ``gtid`` the @slave_connect_state), with the GTID position before it."""

    settings: SourceSettings
    info: SourceInfo
    change_id: int
    log_file: str | None
    log_pos: int | None
    gtid: str | None
    position: dict[int, Gtid]


def session_start(
    sources: Sequence[SourceSettings], buffer: Any, start_from: str, room: RoomWait
) -> SessionStart:
    """Inspect ``sources``, choose one (drc.replicator.failover) and fix where reading starts on
    it; an empty ``buffer`` gets its start stored first (its writes wait for room in ``room``)."""
    last: SCN | None = buffer.resume_scn
    reachable = _reachable(sources)
    plan = choose(list(reachable), last, stored_position(buffer, last))
    settings, info = reachable[plan.candidate]
    if last is None:
        log_file, log_pos = initial_position(info, start_from)
        check_not_purged(info, log_file, log_pos, "the configured start")
        position = _parse_position(binlog_gtid_pos(settings, log_file, log_pos))
        _persist_start(buffer, room, info, log_file, log_pos, position)
        return SessionStart(settings, info, 1, log_file, log_pos, None, position)
    if plan.gtid is not None:
        log.warning(
            "source failover: buffer ends at %s (server_id %d); continuing on %r "
            "(server_id %d) from GTID position %s with change_id %d",
            last,
            last.server_id,
            settings,
            info.server_id,
            plan.gtid,
            plan.change_id,
        )
        assert plan.position is not None
        return SessionStart(settings, info, plan.change_id, None, None, plan.gtid, plan.position)
    log_file = info.file_name(last.log_index)
    check_not_purged(info, log_file, last.log_pos, f"SCN {last}")
    known = plan.position
    if known is None:  # a buffer from before positions were kept: its server knows
        known = _parse_position(binlog_gtid_pos(settings, log_file, last.log_pos))
    return SessionStart(settings, info, plan.change_id, log_file, last.log_pos, None, known)


def _reachable(
    sources: Sequence[SourceSettings],
) -> dict[Candidate, tuple[SourceSettings, SourceInfo]]:
    """The servers that answer, as failover candidates; SourceUnavailableError if none does."""
    reachable: dict[Candidate, tuple[SourceSettings, SourceInfo]] = {}
    failures: list[SourceUnavailableError] = []
    for settings in sources:
        try:
            info = inspect_source(settings)
        except SourceUnavailableError as exc:
            failures.append(exc)
            continue
        reachable[_candidate(settings, info)] = (settings, info)
    if not reachable:
        raise (
            failures[0]
            if len(failures) == 1
            else SourceUnavailableError(
                "no source server reachable: " + "; ".join(map(str, failures))
            )
        )
    return reachable


def _persist_start(
    buffer: Any,
    room: RoomWait,
    info: SourceInfo,
    log_file: str,
    log_pos: int,
    position: dict[int, Gtid],
) -> None:
    """Store the chosen start as an empty marker, so a restart before the first transaction
    resumes there instead of at a newer "current" position (which would skip changes)."""
    scn = SCN(1, info.server_id, split_binlog_name(log_file)[1], log_pos)
    gtid, gtid_position = gtids.record_fields(position, None)
    start = Transaction(scn, info.server_id, gtid, 0, (), gtid_position=gtid_position)
    room.call(lambda: buffer.append(scn, encode_transaction(start), 0))
    room.call(buffer.commit)


def initial_position(info: SourceInfo, start_from: str) -> tuple[str, int]:
    """The binlog coordinate ``start_from`` ("current", "earliest" or "FILE:POS") names."""
    if start_from == "current":
        return info.current_file, info.current_pos
    if start_from == "earliest":
        return info.binlogs[0], 4
    name, sep, pos = start_from.rpartition(":")
    if not sep or not name or not pos.isdigit():
        raise SourceConfigError(
            f"start_from {start_from!r} must be 'current', 'earliest' or 'FILE:POS' "
            "(e.g. mysql-bin.000003:4)"
        )
    return name, int(pos)


def _candidate(settings: SourceSettings, info: SourceInfo) -> Candidate:
    return Candidate(
        f"{settings.host}:{settings.port}",
        info.server_id,
        info.read_only,
        gtids.parse_gtids(info.gtid_binlog_state),
        info.gtid_binlog_pos,
    )


def _parse_position(text: str) -> dict[int, Gtid]:
    return gtids.position(gtids.parse_gtids(text))


def stored_position(buffer: Any, last: SCN | None) -> dict[int, Gtid] | None:
    """The GTID position stored with the buffer's record at ``last`` (None: no such record,
    or one written before DRC kept positions)."""
    if last is None or last.log_pos == 0:
        return None
    before = SCN(last.change_id, last.server_id, last.log_index, last.log_pos - 1)
    try:
        records = buffer.read_after(before, max_records=1, max_bytes=1)
    except ScnTooOldError:
        return None
    if not records or records[-1].scn != last:
        return None
    txn, _ = decode_transaction(records[-1].payload)
    return gtids.stored_position(txn.gtid, txn.gtid_position)
