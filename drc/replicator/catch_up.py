"""A newly elected leader's catch-up: copy from the other members what they hold beyond its
buffer, the most advanced first, so the source is read only after the newest SCN any member
holds (drc.replicator.member).

A member elected in a process that never saw the group running (no leader seen, never led:
it just started, perhaps with the whole group) waits up to ``[group] catch_up_wait_s`` for
every member known to the group (``known/`` in ZooKeeper: it joined once) to register and
answer. Otherwise, when the whole group restarts at once, the first member elected would
capture again, from its own older SCN, what another member already holds: correct while the
source keeps that binlog, a stop when it was purged although the records are in the group.
A member elected after seeing a leader does not wait: the members it does not reach then are
down, and waiting would only delay the failover.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from drc.api import pullquery
from drc.client import http
from drc.client.errors import ApiRequestError, ApiTlsError, ProtocolError
from drc.core.scn import SCN
from drc.replicator.fencing import GroupBuffer
from drc.replicator.follower import Copier
from drc.replicator.group import MemberInfo, ZkGroup

log = logging.getLogger(__name__)
RETRY_S = 0.3
_UNANSWERED = (http.Transient, ProtocolError, ApiRequestError, ApiTlsError)


def catch_up(
    group: ZkGroup,
    copier: Copier,
    buffer: GroupBuffer,
    clock: Callable[[], float],
    stop: threading.Event,
    wait_s: float,
) -> None:
    """Copy from the members that answer, the most advanced first, each until it has nothing
    more beyond this buffer; known members not answering are waited for up to ``wait_s``."""
    for member, newest in members_to_copy(group, copier, clock, stop, wait_s):
        if stop.is_set():
            return
        if newest is None or newest <= (buffer.last_scn or SCN.ZERO):
            continue  # nothing beyond this buffer (or beyond what a member before held)
        copied_any = False
        while not stop.is_set():
            try:
                copied = copier.copy_once(member.url, pullquery.WAIT_NONE)
            except (http.Transient, ProtocolError) as exc:
                log.info("catch-up: member %s not reachable (%s)", member.member_id, exc)
                break
            copied_any = copied_any or copied.records > 0
            if copied.records == 0:
                break
        if copied_any:
            log.info("caught up from member %s to %s", member.member_id, buffer.last_scn)
    if buffer.resume_scn is None:
        log.info("no member holds records yet: capture starts the group's buffer")


def members_to_copy(
    group: ZkGroup,
    copier: Copier,
    clock: Callable[[], float],
    stop: threading.Event,
    wait_s: float,
) -> list[tuple[MemberInfo, SCN | None]]:
    """The other members that answer, with the last SCN each holds, the most advanced first;
    after waiting up to ``wait_s`` for the known ones that are not there yet."""
    settings = group.settings
    deadline = clock() + wait_s
    while True:
        answered: dict[str, tuple[MemberInfo, SCN | None]] = {}
        for member in group.members():
            if member.member_id == settings.member_id:
                continue
            try:
                answered[member.member_id] = (member, copier.newest(member.url))
            except _UNANSWERED as exc:
                log.debug("catch-up: member %s does not answer yet (%s)", member.url, exc)
        missing = sorted(group.known_members() - answered.keys() - {settings.member_id})
        if not missing or stop.is_set() or wait_s <= 0:
            break
        if clock() >= deadline:
            log.warning(
                "catch-up: member(s) %s of the group did not answer within %.0fs; capture "
                "resumes after the newest SCN the others hold (a member removed for good: "
                "delete its node %s/known/<member_id> in ZooKeeper)",
                ", ".join(missing),
                wait_s,
                settings.path,
            )
            break
        log.info("catch-up: waiting for member(s) %s to answer", ", ".join(missing))
        stop.wait(RETRY_S)
    return sorted(answered.values(), key=lambda found: found[1] or SCN.ZERO, reverse=True)
