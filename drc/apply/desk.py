"""The node's side of channel control (drc.api.control): the channels of this process, their
states, their audit trail, and the actions an operator takes on them.

Pause and resume take effect through the channel's ChannelControl at once and are audited here
on a short session of their own; skip and rewind are carried out by the channel's thread
between target transactions (drc.apply.channel), which writes their audit row in the same
transaction as the checkpoint it moves. A rewind is checked against the remote replicator first:
a point it no longer holds is refused with its 410 message, and a time is turned into an SCN by
the remote (``/v1/position``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from drc.apply import audit
from drc.apply.channel import ApplyChannel
from drc.apply.control import Request
from drc.apply.target import Target
from drc.client.errors import ApiRequestError, PositionTooOldError
from drc.core.control import ControlError
from drc.core.errors import DrcError
from drc.core.scn import SCN

log = logging.getLogger(__name__)


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
            out.append(entry)
        return out

    def history(self, name: str, limit: int) -> list[dict[str, Any]]:
        session = self._session()
        try:
            rows = session.query(audit.history(name, limit), "reading the channel audit trail")
            session.commit()
        finally:
            session.close()
        return [audit.parse(row).as_dict() for row in rows]

    def act(
        self, name: str, action: str, actor: str, reason: str, *, scn: Any, until: Any, at: Any
    ) -> dict[str, Any]:
        channel = self._channels[name]
        control = channel.control
        if action == "pause":
            control.pause(until)
            detail = {
                "until": None if until is None else str(until),
                "at": str(channel.stats.last_scn),
            }
            self._audit(name, action, actor, reason, detail)
            return {"action": "pause", "until": detail["until"], "applied": detail["at"]}
        if action == "resume":
            retry = control.stoppage is not None
            control.resume()
            self._audit(name, action, actor, reason, {"retry": retry})
            return {"action": "resume", "retry_stopped_transaction": retry}
        if action == "skip":
            return control.submit(Request("skip", actor, reason, scn)).wait()
        return self._rewind(channel, actor, reason, scn, at)

    def _rewind(
        self, channel: ApplyChannel, actor: str, reason: str, scn: SCN | None, at: float | None
    ) -> dict[str, Any]:
        try:
            if scn is None:
                assert at is not None
                scn = self._remote.position(channel, int(at * 1000))
            oldest = self._remote.oldest(channel)
        except PositionTooOldError as exc:
            raise ControlError(f"rewind refused: {exc}", 410) from exc
        except ApiRequestError as exc:
            if exc.status == 410:
                raise ControlError(f"rewind refused: {exc.server_message}", 410) from exc
            raise ControlError(f"rewind refused: the remote said {exc}", 502) from exc
        except DrcError as exc:
            raise ControlError(f"rewind refused: the remote replicator: {exc}", 503) from exc
        if scn < oldest:
            raise ControlError(
                f"rewind refused: {scn} is older than the remote buffer holds (it serves after "
                f"{oldest}); replaying from there needs a snapshot",
                410,
            )
        return channel.control.submit(Request("rewind", actor, reason, scn)).wait()

    def _audit(
        self, name: str, action: str, actor: str, reason: str, detail: dict[str, Any]
    ) -> None:
        session = self._session()
        try:
            session.execute(audit.record(name, action, actor, reason, detail), "auditing")
            session.commit()
        finally:
            session.close()
