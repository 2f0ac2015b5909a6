"""Automatic catch-up: started once a channel's backlog passes its threshold (never while the
channel finishes an interrupted run itself), one at a time, its state reported; channels with
the threshold at 0 are never watched."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

from drc.apply.catchup_journal import Run
from drc.catchup.auto import AutoCatchup
from drc.config_channels import ChannelConfig
from drc.core.scn import SCN


class FakeProcess:
    def __init__(self) -> None:
        self.code: int | None = None

    def poll(self) -> int | None:
        return self.code


APPLIED = SCN(1, 1, 1, 4)


def channel(name: str, threshold: float, at: SCN | None = APPLIED) -> Any:
    config = ChannelConfig(name=name, origin="dc1", remote=("http://127.0.0.1:1",),
                           catchup_backlog_mb=threshold, catchup_master="local[2]")  # fmt: skip
    return SimpleNamespace(name=name, channel=config, stats=SimpleNamespace(last_scn=at))


def test_a_catchup_starts_past_the_threshold_once_and_is_reported() -> None:
    backlog = {"a": 10.0, "b": 5000.0}
    started: list[list[str]] = []
    processes: list[FakeProcess] = []

    def spawn(argv: list[str]) -> FakeProcess:
        started.append(argv)
        processes.append(FakeProcess())
        return processes[-1]

    auto = AutoCatchup("dc2.toml", [channel("a", 100), channel("b", 100), channel("off", 0)],
                       backlog=lambda c, _after: backlog[c.name], spawn=spawn)  # fmt: skip
    assert [c.name for c in auto.channels] == ["a", "b"]
    auto.check()
    auto.check()  # still running: not started again
    assert len(started) == 1 and started[0][-6:] == [
        "--config", "dc2.toml", "--channel", "b", "--master", "local[2]",
    ]  # fmt: skip
    assert auto.status("b") == {"state": "running", "backlog_mb": 5000.0, "runs": 1}
    assert auto.status("a") == {"state": "idle", "backlog_mb": 10.0, "runs": 0}
    assert auto.status("off") is None
    processes[0].code, backlog["b"] = 3, 0.0
    auto.check()  # measured again only once the channel moved (from the catch-up's checkpoint)
    assert auto.status("b") == {"state": "failed (exit 3)", "backlog_mb": 5000.0, "runs": 1}
    auto.channels[1].stats.last_scn = SCN(1, 1, 1, 9)
    auto.check()
    assert auto.status("b") == {"state": "failed (exit 3)", "backlog_mb": 0.0, "runs": 1}


def test_a_channel_not_started_yet_is_not_measured() -> None:
    asked: list[str] = []

    def backlog(config: ChannelConfig, _after: SCN) -> float:
        asked.append(config.name)
        return 0.0

    auto = AutoCatchup("x.toml", [channel("a", 1, at=None)], backlog=backlog, spawn=print)
    auto.check()
    assert asked == []


def test_a_channel_finishing_an_interrupted_run_gets_no_second_catchup() -> None:
    started: list[list[str]] = []
    finishing = channel("a", 1)  # any backlog passes the threshold
    finishing.catchup_unfinished = Run(
        "a", SCN(1, 1, 1, 90), 3, 5, "h:1:x", dt.datetime(2026, 1, 1)
    )
    auto = AutoCatchup("dc2.toml", [finishing], backlog=lambda _c, _a: 5.0, spawn=started.append)
    auto.check()
    assert started == [], "the channel finishes the run itself (drc.apply.channel)"
    finishing.catchup_unfinished = None
    auto.check()
    assert len(started) == 1
