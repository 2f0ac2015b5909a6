"""The operator actions as declared (drc.apply.actions), taken at the node's desk
(drc.apply.desk) and carried out by a stand-in channel's thread; the rewind window read back
from drc.channel_audit at start."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from drc.apply import actions
from drc.apply.actions import OperatorActions, Restart
from drc.apply.desk import ChannelsDesk, RemoteLookup
from drc.apply.group import Group
from drc.core.control import ControlError
from drc.core.scn import SCN
from drc.mysql.sql import Statement
from tests.support.apply_fakes import scn


class _Trail:
    """drc.channel_audit on the desk's sessions: rows inserted, read back newest first."""

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def __call__(self) -> _Trail:
        return self  # a session of its own each time; they share the table

    def execute(self, statement: Statement, what: str) -> None:
        assert "INSERT INTO `drc`.`channel_audit`" in statement.sql
        at = datetime(2026, 11, 23, 14, tzinfo=UTC)
        self.rows.append((len(self.rows) + 1, *statement.params, at))

    def query(self, statement: Statement, what: str) -> list[tuple[Any, ...]]:
        return list(reversed(self.rows))

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Channel:
    """A running channel as the desk (name, control, stats) and its actions (Steered) see it."""

    def __init__(self, applied: SCN) -> None:
        self.name = "from-dc2"
        self.actions = OperatorActions(self.name)
        self.control = self.actions.control
        self.stats = SimpleNamespace(last_scn=applied)
        self.applied = applied
        self.moved: list[tuple[SCN, Statement]] = []
        self._stop = threading.Event()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def commit_open(self, group: Group) -> None:
        pass

    def move_to(self, position: SCN, entry: Statement) -> None:
        self.moved.append((position, entry))
        self.applied = self.stats.last_scn = position

    def run(self) -> None:
        while not self.stopping():
            try:
                self.actions.obey(self, Group())  # type: ignore[arg-type]
            except Restart:
                continue
            self._stop.wait(0.01)


@pytest.fixture()
def channel() -> Iterator[_Channel]:
    channel = _Channel(scn(50))
    thread = threading.Thread(target=channel.run, daemon=True)
    thread.start()
    yield channel
    channel._stop.set()
    thread.join(5)


class _Remote:
    """The remote replicator: a time turns into SCN 30; it serves after ``oldest``."""

    def __init__(self, oldest: int = 10) -> None:
        self.oldest = scn(oldest)
        self.asked: list[int] = []

    def position(self, channel: _Channel, at_ms: int) -> SCN:
        self.asked.append(at_ms)
        return scn(30)


def _desk(channel: _Channel, trail: _Trail, remote: _Remote | None = None) -> ChannelsDesk:
    remote = remote or _Remote()
    lookup = RemoteLookup(remote.position, lambda _: remote.oldest)  # type: ignore[arg-type]
    report = lambda c: {"name": c.name}  # noqa: E731
    return ChannelsDesk([channel], trail, lookup, report)  # type: ignore[list-item, arg-type]


def test_an_operator_may_call_every_action_but_the_nodes_reload() -> None:
    assert actions.offered() == ("pause", "resume", "skip", "rewind")
    with pytest.raises(ControlError, match="'reload'; one of pause, resume, skip, rewind") as no:
        actions.asked("reload", "alice", "", scn=None, until=None, at=None)
    assert no.value.status == 404


@pytest.mark.parametrize(
    ("action", "body", "message"),
    [
        ("rewind", {}, "rewind needs exactly one of scn or time"),
        ("rewind", {"scn": scn(1), "at": 1.0}, "rewind needs exactly one of scn or time"),
        ("skip", {"until": scn(1)}, "skip needs the scn of the stopped transaction"),
    ],
)
def test_a_body_the_action_will_not_do_with_is_a_400(
    action: str, body: dict[str, Any], message: str
) -> None:
    given = {"scn": None, "until": None, "at": None, **body}
    with pytest.raises(ControlError, match=message) as refused:
        actions.asked(action, "alice", "", **given)
    assert refused.value.status == 400


def test_only_the_fields_an_action_takes_reach_it() -> None:
    _, request = actions.asked("pause", "alice", "", scn=scn(1), until=scn(2), at=3.0)
    assert (request.scn, request.until, request.at) == (None, scn(2), None)


def test_pause_and_resume_act_at_once_and_are_audited_on_the_desks_session() -> None:
    channel, trail = _Channel(scn(50)), _Trail()
    desk = _desk(channel, trail)
    kw: dict[str, Any] = {"scn": None, "at": None}
    paused = desk.act("from-dc2", "pause", "alice", "maint", until=scn(60), **kw)
    assert paused == {"action": "pause", "until": "1:11:1:60", "applied": "1:11:1:50"}
    assert channel.control.pause_at == scn(60)
    resumed = desk.act("from-dc2", "resume", "bob", "", until=None, **kw)
    assert resumed == {"action": "resume", "retry_stopped_transaction": False}
    assert channel.control.pause_at is None
    history = desk.history("from-dc2", 10)
    assert [(e["action"], e["actor"], e["detail"]) for e in history] == [
        ("resume", "bob", {"retry": False}),
        ("pause", "alice", {"until": "1:11:1:60", "at": "1:11:1:50"}),
    ]


def test_a_rewind_to_a_time_asks_the_remote_then_the_channels_thread_moves_back(
    channel: _Channel,
) -> None:
    remote = _Remote()
    desk = _desk(channel, _Trail(), remote)
    done = desk.act("from-dc2", "rewind", "alice", "replay", scn=None, until=None, at=1.5)
    assert done == {"action": "rewind", "from": "1:11:1:50", "to": "1:11:1:30"}
    assert remote.asked == [1500]
    [(position, entry)] = channel.moved
    assert position == scn(30) and entry.params[:4] == ("from-dc2", "rewind", "alice", "replay")
    assert channel.control.replay_until == scn(50)


def test_a_rewind_older_than_the_remote_holds_is_refused_before_the_channel_is_asked(
    channel: _Channel,
) -> None:
    desk = _desk(channel, _Trail(), _Remote(oldest=40))
    with pytest.raises(ControlError, match="older than the remote buffer holds") as refused:
        desk.act("from-dc2", "rewind", "alice", "", scn=scn(20), until=None, at=None)
    assert refused.value.status == 410 and channel.moved == []


def test_a_skip_of_a_running_channel_is_refused_by_its_thread(channel: _Channel) -> None:
    desk = _desk(channel, _Trail())
    with pytest.raises(ControlError, match="only a stopped channel skips") as refused:
        desk.act("from-dc2", "skip", "alice", "", scn=scn(50), until=None, at=None)
    assert refused.value.status == 409 and channel.moved == []


# ---------------------------------------------------------------------- the replay window


def _rewind(source: str, to: str = "0:0:0:0") -> str:
    return json.dumps({"from": source, "to": to})


def test_the_furthest_rewind_beyond_the_checkpoint_is_the_window() -> None:
    details = [_rewind("1:11:1:50"), _rewind("1:11:1:90"), _rewind("1:11:1:10")]
    assert actions.replay_until(details, SCN.parse("1:11:1:20")) == SCN.parse("1:11:1:90")


def test_no_window_once_the_checkpoint_passed_every_rewind() -> None:
    assert actions.replay_until([_rewind("1:11:1:50")], SCN.parse("1:11:1:50")) is None
    assert actions.replay_until([], SCN.parse("1:11:1:50")) is None


def test_detail_of_another_shape_is_ignored_not_an_error() -> None:
    details = ["{}", "not json", json.dumps({"from": "garbage"}), _rewind("1:11:1:30")]
    assert actions.replay_until(details, SCN.zero()) == SCN.parse("1:11:1:30")
