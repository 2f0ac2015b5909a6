"""An operator's actions carried out in the channel's own thread: pause, skip, rewind, reload.

The API thread asks through the channel's :class:`drc.apply.control.ChannelControl`; the
channel calls :meth:`OperatorActions.obey` between target transactions and
:meth:`OperatorActions.hold` when a change the target rejected stopped it (with
``hold_on_error``: drc run). Each action completes its request with a result or refuses it
(ControlError), so the caller learns what happened and nothing races a commit::

    rewind   to an SCN before the checkpoint: the checkpoint moves back, with an audit row, in
             one transaction; changes up to where it was are replays (no conflicts logged)
    skip     the transaction a stopped channel stopped at: the checkpoint moves past it
    reload   a new table selection (drc run got SIGHUP), audited, from the checkpoint on
    resume   (no request) a stopped channel tries the stopped transaction again

After a rewind, skip or reload the channel streams again from its checkpoint (Restart).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from drc.apply import audit
from drc.apply.control import PAUSED, RUNNING, STOPPED, ChannelControl, Request, Stoppage
from drc.apply.group import Group
from drc.apply.retry import Stopped
from drc.apply.stages import Stage
from drc.config_channels import ChannelConfig
from drc.core.control import ControlError
from drc.core.errors import FatalError
from drc.core.scn import SCN
from drc.mysql.sql import Statement

log = logging.getLogger(__name__)

WAIT_S = 1.0  # how long one wait for a request lasts before the stop flag is looked at again


class Restart(Exception):
    """Subscribe again after the checkpoint (a rewind, a skip, a retry moved or kept it)."""


class Steered(Protocol):
    """What the actions need of the channel they act on (drc.apply.channel.ApplyChannel)."""

    @property
    def channel(self) -> ChannelConfig: ...

    @property
    def applied(self) -> SCN: ...

    def stopping(self) -> bool: ...

    def commit_open(self, group: Group) -> None: ...

    def move_to(self, position: SCN, entry: Statement) -> None: ...

    def reselect(
        self,
        config: ChannelConfig,
        filters: Sequence[Stage],
        subscribe: Callable[[SCN], Any],
        entry: Statement,
    ) -> None: ...


class OperatorActions:
    """The channel's control (shared with the API) and what the channel does with it. With
    ``hold_on_error`` a change the target rejects leaves the channel stopped but alive,
    waiting for a skip, resume or rewind; without, the error ends the channel."""

    def __init__(self, name: str, *, hold_on_error: bool = False) -> None:
        self.name = name
        self.control = ChannelControl()
        self.hold_on_error = hold_on_error

    def obey(self, channel: Steered, group: Group) -> None:
        """Between target transactions: carry out queued requests (Restart once one is done),
        then hold while paused. ``group`` is committed before either."""
        control = self.control
        while not channel.stopping():
            request = control.take()
            if request is not None:
                channel.commit_open(group)
                self._carry_out(channel, request, stoppage=None)
                continue
            if not control.paused(channel.applied):
                control.state = RUNNING
                return
            channel.commit_open(group)
            control.state = PAUSED
            control.wait(channel.stopping, WAIT_S)

    def hold(self, channel: Steered, exc: FatalError) -> None:
        """Stopped by ``exc``: wait for skip (of the stopped transaction), resume (retry it,
        after a fix) or rewind; then return, for the channel to stream again from its
        checkpoint. Stopped when the channel is stopped meanwhile."""
        control = self.control
        control.stoppage = Stoppage.of(exc)
        control.failure = exc
        control.state = STOPPED
        try:
            while not channel.stopping():
                request = control.take()
                if request is None:
                    if not control.paused(channel.applied) and control.retry:
                        control.retry = False
                        return
                    control.wait(channel.stopping, WAIT_S)
                    continue
                if self._carry_out(channel, request, stoppage=control.stoppage):
                    return
            raise Stopped()
        finally:
            control.stoppage = control.failure = None
            control.state = RUNNING

    def _carry_out(self, channel: Steered, request: Request, stoppage: Stoppage | None) -> bool:
        """Do ``request``; True when the channel must stream again from its checkpoint (a
        running channel: Restart)."""
        try:
            if request.action == "rewind":
                result = self._rewind(channel, request)
            elif request.action == "skip":
                result = self._skip(channel, request, stoppage)
            elif request.action == "reload":
                result = self._reload(channel, request)
            else:
                raise ControlError(f"unknown request {request.action!r}", 400)
        except ControlError as error:
            request.refuse(error)
            return False
        request.finish(result)
        if stoppage is None:
            raise Restart()
        return True

    def _rewind(self, channel: Steered, request: Request) -> dict[str, Any]:
        to, before = request.scn, channel.applied
        assert to is not None
        if to >= before:
            raise ControlError(
                f"rewind to {to}: the channel has applied only up to {before}; a rewind goes back"
            )
        detail = {"from": str(before), "to": str(to)}
        channel.move_to(to, self._audit(request, detail))
        self.control.replay_until = max(before, self.control.replay_until or before)
        log.warning("channel %s rewound from %s to %s by %s", self.name, before, to, request.actor)
        return {"action": "rewind", "from": str(before), "to": str(to)}

    def _skip(
        self, channel: Steered, request: Request, stoppage: Stoppage | None
    ) -> dict[str, Any]:
        if stoppage is None:
            raise ControlError(f"channel {self.name} is running; only a stopped channel skips")
        if stoppage.scn is None:
            raise ControlError(
                f"channel {self.name} stopped on an error that is not one transaction's "
                f"({stoppage.error}); fix it and resume, or rewind"
            )
        if request.scn != stoppage.scn:
            raise ControlError(
                f"channel {self.name} is stopped at {stoppage.scn}, not {request.scn}: "
                "look again (drc channel list) before skipping"
            )
        channel.move_to(stoppage.scn, self._audit(request, {"skipped": stoppage.as_dict()}))
        log.warning("channel %s skipped %s by %s: %s", self.name, stoppage.scn, request.actor,
                    stoppage.error)  # fmt: skip
        return {"action": "skip", "skipped": str(stoppage.scn), "applied": str(channel.applied)}

    def _reload(self, channel: Steered, request: Request) -> dict[str, Any]:
        """A new config for this channel (drc run got SIGHUP): its table selection, mapping and
        object kinds. The stream restarts after the checkpoint with the new filters."""
        config, filters, subscribe = request.payload
        was = channel.channel
        before = {"tables": list(was.tables), "exclude": list(was.exclude)}
        after = {"tables": list(config.tables), "exclude": list(config.exclude)}
        detail = {"before": before, "after": after, "at": str(channel.applied)}
        channel.reselect(config, filters, subscribe, self._audit(request, detail))
        log.warning("channel %s reloaded: tables %s exclude %s (was %s)", self.name,
                    after["tables"], after["exclude"], before)  # fmt: skip
        return {"action": "reload", **after}

    def _audit(self, request: Request, detail: dict[str, Any]) -> Statement:
        return audit.record(self.name, request.action, request.actor, request.reason, detail)
