"""Every operator action on an apply channel, declared once (:data:`ACTIONS`), and the channel's
side of carrying them out (:class:`OperatorActions`).

An :class:`Action` is its name, the body fields it takes and their check (the API's 400), and
what it does, one of two ways:

- at once on the channel's control, in the API's thread (:class:`AtDesk`, drc.apply.desk),
  audited on the desk's own short session;
- queued: prepared at the desk (a rewind asks the remote replicator first), then carried out
  by the channel in its own thread between target transactions (:class:`InThread`), audited
  in the transaction that moves its checkpoint. The caller waits for the result or the refusal
  (ControlError), so it learns what happened and nothing races a commit. The channel then
  streams again from its checkpoint (Restart).

    pause    at once: stop applying after the open target transaction, or once ``until``
             (an SCN) is applied
    resume   at once: a paused channel continues; a stopped one tries its transaction again
    skip     queued: the transaction a stopped channel stopped at (``scn``, as shown by drc
             channel list): the checkpoint moves past it
    rewind   queued: to ``scn``, or the remote's SCN at ``time``, before the checkpoint: the
             checkpoint moves back; changes up to where it was are replays (no conflicts
             logged, :func:`replay_until` after a restart)
    reload   queued, the node's own (drc run got SIGHUP, :func:`reload_request`): a new table
             selection, from the checkpoint on

The API (drc.api.control) learns through the desk which actions an operator may call
(:func:`offered`) and hands it the body it parsed; :func:`asked` checks that body.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from drc.apply import audit
from drc.apply.control import PAUSED, RUNNING, STOPPED, ChannelControl, Request, Stoppage
from drc.apply.group import Group
from drc.apply.retry import Stopped
from drc.apply.stages import Stage
from drc.client.errors import ApiRequestError, PositionTooOldError
from drc.config_channels import ChannelConfig
from drc.core.control import ControlError
from drc.core.errors import DrcError, FatalError, shown
from drc.core.scn import SCN
from drc.mysql.sql import Statement

log = logging.getLogger(__name__)

WAIT_S = 1.0  # how long one wait for a request lasts before the stop flag is looked at again
BODY_FIELDS = ("scn", "until", "at")  # what drc.api.control parses; "at" is the body's time
REWINDS_READ = 20  # the latest rewinds read at start for the replay window


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


@dataclass(frozen=True)
class AtDesk:
    """What an action may use at the desk, in the API's thread (drc.apply.desk builds one)."""

    control: ChannelControl
    applied: Callable[[], SCN | None]  # how far the channel has applied, by its counters
    position: Callable[[int], SCN]  # the remote's SCN to replay after, for a time in ms
    oldest: Callable[[], SCN]  # the oldest SCN the remote can serve after
    audit: Callable[[Request, dict[str, Any]], None]  # a row now, on the desk's own session


@dataclass(frozen=True)
class InThread:
    """What a queued action may use in the channel's thread (:class:`OperatorActions`)."""

    name: str  # the channel's
    channel: Steered
    control: ChannelControl
    stoppage: Stoppage | None  # where a stopped channel stopped; None while it runs

    def entry(self, request: Request, detail: dict[str, Any]) -> Statement:
        """The audit row, for the target transaction that carries the action out."""
        return audit.record(self.name, request.action, request.actor, request.reason, detail)


def _anything(request: Request) -> str | None:
    return None


@dataclass(frozen=True)
class Action:
    """One operator action: exactly one of ``at_once`` and ``queued`` says what it does; each
    answers the operator with a dict, or refuses with ControlError."""

    name: str
    takes: tuple[str, ...] = ()  # body fields it reads besides the reason (BODY_FIELDS)
    check: Callable[[Request], str | None] = _anything  # why the body will not do (a 400)
    at_once: Callable[[AtDesk, Request], dict[str, Any]] | None = None
    prepare: Callable[[AtDesk, Request], Request] | None = None  # at the desk, before queueing
    queued: Callable[[InThread, Request], dict[str, Any]] | None = None
    offered: bool = True  # to an operator, over the API; False: the node's own

    def __post_init__(self) -> None:
        # Declaration mistakes surface at import, not on an operator's request.
        assert (self.at_once is None) != (self.queued is None), self.name
        assert self.prepare is None or self.queued is not None, self.name
        assert set(self.takes) <= set(BODY_FIELDS), self.name
        assert len(self.name) <= audit.ACTION_MAX, self.name

    def take(self, desk: AtDesk, request: Request) -> dict[str, Any]:
        """At the desk: done now, or queued for the channel's thread and waited for."""
        if self.at_once is not None:
            return self.at_once(desk, request)
        if self.prepare is not None:
            request = self.prepare(desk, request)
        return desk.control.submit(request).wait()


# ---------------------------------------------------------------------- pause, resume


def _pause(desk: AtDesk, request: Request) -> dict[str, Any]:
    desk.control.pause(request.until)
    until = None if request.until is None else str(request.until)
    applied = str(desk.applied())
    desk.audit(request, {"until": until, "at": applied})
    return {"action": "pause", "until": until, "applied": applied}


def _resume(desk: AtDesk, request: Request) -> dict[str, Any]:
    retry = desk.control.stoppage is not None
    desk.control.resume()
    desk.audit(request, {"retry": retry})
    return {"action": "resume", "retry_stopped_transaction": retry}


# ---------------------------------------------------------------------- skip


def _skip_check(request: Request) -> str | None:
    if request.scn is None:
        return "skip needs the scn of the stopped transaction (drc channel list)"
    return None


def _skip(turn: InThread, request: Request) -> dict[str, Any]:
    stoppage, name, channel = turn.stoppage, turn.name, turn.channel
    if stoppage is None:
        raise ControlError(f"channel {name} is running; only a stopped channel skips")
    if stoppage.scn is None:
        raise ControlError(
            f"channel {name} stopped on an error that is not one transaction's "
            f"({stoppage.error}); fix it and resume, or rewind"
        )
    if request.scn != stoppage.scn:
        raise ControlError(
            f"channel {name} is stopped at {stoppage.scn}, not {request.scn}: "
            "look again (drc channel list) before skipping"
        )
    channel.move_to(stoppage.scn, turn.entry(request, {"skipped": stoppage.as_dict()}))
    log.warning("channel %s skipped %s by %s: %s", name, stoppage.scn, request.actor,
                stoppage.error)  # fmt: skip
    return {"action": "skip", "skipped": str(stoppage.scn), "applied": str(channel.applied)}


# ---------------------------------------------------------------------- rewind


def _rewind_check(request: Request) -> str | None:
    if (request.scn is None) == (request.at is None):
        return "rewind needs exactly one of scn or time"
    return None


def _rewind_point(desk: AtDesk, request: Request) -> Request:
    """The SCN to replay after, held by the remote replicator: a time is turned into an SCN by
    the remote (``/v1/position``), and a point it no longer holds is refused (410) before the
    channel is asked."""
    scn = request.scn
    try:
        if scn is None:
            assert request.at is not None
            scn = desk.position(int(request.at * 1000))
        oldest = desk.oldest()
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
    return replace(request, scn=scn)


def _rewind(turn: InThread, request: Request) -> dict[str, Any]:
    to, before = request.scn, turn.channel.applied
    assert to is not None
    if to >= before:
        raise ControlError(
            f"rewind to {to}: the channel has applied only up to {before}; a rewind goes back"
        )
    detail = {"from": str(before), "to": str(to)}
    turn.channel.move_to(to, turn.entry(request, detail))
    turn.control.replay_until = max(before, turn.control.replay_until or before)
    log.warning("channel %s rewound from %s to %s by %s", turn.name, before, to, request.actor)
    return {"action": "rewind", "from": str(before), "to": str(to)}


def replay_until(details: list[str], applied: SCN) -> SCN | None:
    """How far a rewind's replay still runs past the checkpoint ``applied``: the furthest SCN any
    recent rewind (``details``, read with :func:`rewinds`) went back from, when that is beyond
    the checkpoint. Read at start, so a restart in the middle of a replay still counts the rest
    as replays rather than logging conflicts."""
    furthest: SCN | None = None
    for text in details:
        try:
            source = SCN.parse(str(json.loads(text)["from"]))
        except (ValueError, KeyError, TypeError):
            continue  # an audit row of another shape is no replay window
        furthest = source if furthest is None else max(furthest, source)
    return furthest if furthest is not None and furthest > applied else None


# ---------------------------------------------------------------------- reload


def _reload(turn: InThread, request: Request) -> dict[str, Any]:
    """A new config for this channel: its table selection, mapping and object kinds. The
    stream restarts after the checkpoint with the new filters."""
    config, filters, subscribe = request.payload
    was = turn.channel.channel
    before = {"tables": list(was.tables), "exclude": list(was.exclude)}
    after = {"tables": list(config.tables), "exclude": list(config.exclude)}
    detail = {"before": before, "after": after, "at": str(turn.channel.applied)}
    turn.channel.reselect(config, filters, subscribe, turn.entry(request, detail))
    log.warning("channel %s reloaded: tables %s exclude %s (was %s)", turn.name,
                after["tables"], after["exclude"], before)  # fmt: skip
    return {"action": "reload", **after}


# ---------------------------------------------------------------------- the declaration

REWIND = Action(
    "rewind", takes=("scn", "at"), check=_rewind_check, prepare=_rewind_point, queued=_rewind
)
RELOAD = Action("reload", queued=_reload, offered=False)
ACTIONS = (
    Action("pause", takes=("until",), at_once=_pause),
    Action("resume", at_once=_resume),
    Action("skip", takes=("scn",), check=_skip_check, queued=_skip),
    REWIND,
    RELOAD,
)
_BY_NAME = {action.name: action for action in ACTIONS}
assert len(_BY_NAME) == len(ACTIONS), "an action declared twice"


def offered() -> tuple[str, ...]:
    """The actions an operator may call, in the order the API lists them."""
    return tuple(action.name for action in ACTIONS if action.offered)


def asked(
    action: str, actor: str, reason: str, *, scn: SCN | None, until: SCN | None, at: float | None
) -> tuple[Action, Request]:
    """An operator's request of ``action``, with the body fields it takes; ControlError 404 for
    an action not offered, 400 for a body it will not do with."""
    declared = _BY_NAME.get(action)
    if declared is None or not declared.offered:
        raise ControlError(f"unknown action {shown(action)}; one of {', '.join(offered())}", 404)
    # Only what the action takes reaches it; the API parsed (and checked) every field given.
    takes = declared.takes
    request = Request(
        action, actor, reason, scn=scn if "scn" in takes else None,
        until=until if "until" in takes else None, at=at if "at" in takes else None,
    )  # fmt: skip
    problem = declared.check(request)
    if problem is not None:
        raise ControlError(problem, 400)
    return declared, request


def reload_request(
    config: ChannelConfig, filters: Sequence[Stage], subscribe: Callable[[SCN], Any]
) -> Request:
    """The node's reload of a channel with a re-read config (drc run got SIGHUP)."""
    reason = "config reloaded (SIGHUP)"
    return Request(RELOAD.name, "SIGHUP", reason, payload=(config, filters, subscribe))


def rewinds(channel: str) -> Statement:
    """The details of the channel's latest rewinds, for :func:`replay_until`."""
    return audit.details(channel, REWIND.name, REWINDS_READ)


def _queued(name: str) -> Callable[[InThread, Request], dict[str, Any]]:
    declared = _BY_NAME.get(name)
    if declared is None or declared.queued is None:
        raise ControlError(f"unknown request {name!r}", 400)
    return declared.queued


# ---------------------------------------------------------------------- the channel's side


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
            carry_out = _queued(request.action)
            result = carry_out(InThread(self.name, channel, self.control, stoppage), request)
        except ControlError as error:
            request.refuse(error)
            return False
        request.finish(result)
        if stoppage is None:
            raise Restart()
        return True
