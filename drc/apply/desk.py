"""The node's side of channel control (drc.api.control): the channels of this process, their
states, their audit trail, and the desk an operator's actions are taken at.

Which actions there are, what each checks and does, is declared in drc.apply.actions; the desk
hands an action what it may use here (AtDesk): the channel's control, the remote replicator
(RemoteLookup: where a rewind goes is checked against it) and a short session of its own for
the audit rows of actions done at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from drc.apply import audit
from drc.apply.actions import AtDesk, asked, offered
from drc.apply.channel import ApplyChannel
from drc.apply.control import Request
from drc.apply.gtid_wait import GtidWait
from drc.apply.target import Target
from drc.core.errors import DrcError
from drc.core.gtid import Gtid
from drc.core.scn import SCN

log = logging.getLogger(__name__)

LAST_ACTION_TTL_S = 5.0  # how long the channels' last audited actions are shown as read


class RemoteLookup:
    """What the desk asks a channel's remote replicator (drc.client.status)."""

    def __init__(self, position: Callable[[ApplyChannel, int], SCN],
                 oldest: Callable[[ApplyChannel], SCN]) -> None:  # fmt: skip
        self.position = position  # (channel, at_ms) -> SCN to replay after
        self.oldest = oldest  # channel -> oldest SCN its remote can serve after


class ChannelsDesk:
    def __init__(
        self,
        channels: Sequence[ApplyChannel],
        session: Callable[[], Target],
        remote: RemoteLookup,
        report: Callable[[ApplyChannel], dict[str, Any]],
    ) -> None:
        self._channels = {c.name: c for c in channels}
        self._session = session
        self._remote = remote
        self._report = report
        self._last: tuple[float, dict[str, Any]] = (-LAST_ACTION_TTL_S, {})  # read at, by name
        self._gtid_wait: GtidWait | None = None  # built when first asked

    def channels(self) -> list[dict[str, Any]]:
        out = []
        for channel in self._channels.values():
            control = channel.control
            entry = self._report(channel)
            entry["pause_at"] = None if control.pause_at is None else str(control.pause_at)
            entry["stopped_at"] = None if control.stoppage is None else control.stoppage.as_dict()
            entry["replay_until"] = (
                None if control.replay_until is None else str(control.replay_until)
            )
            entry["last_action"] = self._last_actions().get(channel.name)
            out.append(entry)
        return out

    def _last_actions(self) -> dict[str, Any]:
        """Each channel's newest audited action (who paused, skipped, rewound...), read again
        at most every LAST_ACTION_TTL_S: status pages ask every few seconds. A target that
        cannot answer leaves it out, not the status."""
        read_at, found = self._last
        now = time.monotonic()
        if now - read_at < LAST_ACTION_TTL_S:
            return found
        found = {}
        try:
            for name in self._channels:
                entries = self.history(name, 1)
                if entries:
                    last = entries[0]
                    found[name] = {k: last[k] for k in ("action", "actor", "reason", "at")}
        except DrcError as exc:
            log.debug("the channels' last actions are not shown: %s", exc)
        self._last = (now, found)
        return found

    def history(self, name: str, limit: int) -> list[dict[str, Any]]:
        session = self._session()
        try:
            rows = session.query(audit.history(name, limit), "reading the channel audit trail")
            session.commit()
        finally:
            session.close()
        return [audit.parse(row).as_dict() for row in rows]

    def actions(self) -> tuple[str, ...]:
        return offered()

    def act(
        self, name: str, action: str, actor: str, reason: str, *, scn: Any, until: Any, at: Any
    ) -> dict[str, Any]:
        declared, request = asked(action, actor, reason, scn=scn, until=until, at=at)
        channel = self._channels[name]
        desk = AtDesk(
            channel.control,
            lambda: channel.stats.last_scn,
            partial(self._remote.position, channel),
            partial(self._remote.oldest, channel),
            partial(self._audit, name),
        )
        return declared.take(desk, request)

    def gtids_applied(self, gtids: Sequence[Gtid], channel: str | None) -> dict[str, Any]:
        """Whether the channels passed ``gtids`` (drc.apply.gtid_wait); in memory, no I/O."""
        if self._gtid_wait is None:
            applied = {c.name: c.progress.gtids for c in self._channels.values()}
            self._gtid_wait = GtidWait(applied, self._describe)
        return self._gtid_wait.check(gtids, channel)

    def on_applied(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (quick, in a channel's thread) after a commit moved a channel."""
        for channel in self._channels.values():
            channel.progress.gtids.listen(listener)

    def _describe(self, name: str) -> str:
        report = self._channels[name].report()
        lag = report.get("lag_seconds")
        return f"{report['state']}, lag {'-' if lag is None else f'{lag:.1f}s'}"

    def _audit(self, name: str, request: Request, detail: dict[str, Any]) -> None:
        entry = audit.record(name, request.action, request.actor, request.reason, detail)
        session = self._session()
        try:
            session.execute(entry, "auditing")
            session.commit()
        finally:
            session.close()
        self._last = (-LAST_ACTION_TTL_S, {})  # shown on the next status
