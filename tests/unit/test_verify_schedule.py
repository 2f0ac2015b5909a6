"""The periodic verify's schedule (drc.verify.schedule): when a run starts, waits, what it keeps."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from drc.config import DrcConfig
from drc.core.rowsum import Difference, TableReport
from drc.verify import schedule
from drc.verify.driver import Options, Report
from drc.verify.schedule import PeriodicVerify
from tests.support.fakes import FakeClock


def _config(every_s: float = 60, max_lag_s: float = 30) -> DrcConfig:
    return DrcConfig.model_validate({
        "datacenter": {"name": "dc2"},
        "source": {"user": "drc", "password": "pw"},
        "replicator": {"buffer_dir": "/tmp/x"},
        "channels": [
            {"name": "from-dc1", "origin": "dc1", "remote": ["http://dc1:8641"],
             "origin_db": {"user": "v", "password": "pw"},
             "verify": {"every_s": every_s, "max_lag_s": max_lag_s, "tables": ["db.*"]}},
            {"name": "plain", "origin": "dc3", "remote": ["http://dc3:8641"]},
        ],
    })  # fmt: skip


def test_verify_without_origin_db_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="needs \\[channels.origin_db\\]"):
        DrcConfig.model_validate({
            "datacenter": {"name": "dc2"}, "source": {"user": "drc"},
            "replicator": {"buffer_dir": "/tmp/x"},
            "channels": [{"name": "c", "origin": "dc1", "remote": ["http://dc1:1"],
                          "verify": {}}],
        })  # fmt: skip


def waiting_for(verifier: PeriodicVerify, text: str = "") -> str:
    """What the run waits for, once the schedule's thread has looked (a loaded host may take
    a while to run it)."""
    for _ in range(500):
        status = verifier.status("from-dc1")
        assert status is not None
        if status["state"] == "waiting" and text in (status["waiting_for"] or ""):
            return str(status["waiting_for"])
        time.sleep(0.01)
    raise AssertionError(f"the run does not wait: {status}")


def test_runs_start_when_due_and_the_channel_is_running_and_keep_the_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule, "RECHECK_EVERY_S", 0.01)
    clock = FakeClock(1000.0)
    channel = {"state": "running", "lag_seconds": 0.5}
    calls: list[Options] = []
    done = threading.Event()

    def runner(config: Any, name: str, options: Options, **kw: Any) -> Report:
        calls.append(options)
        table = TableReport("db.t", "db.t", rows=500, chunks=1)
        table.differences.append(Difference("different", (7,)))
        done.set()
        return Report(name, [table, TableReport("db.u", "db.u", skipped="missing")])

    verifier = PeriodicVerify(_config(), lambda name: channel, runner=runner,
                              spark=lambda master: "session", wall_clock=clock)  # fmt: skip
    assert set(verifier.channels) == {"from-dc1"}
    stop = threading.Event()
    verifier.start(stop)
    try:
        assert not done.wait(0.2)  # not due yet
        channel["state"] = "paused"
        clock.now += 61
        assert not done.wait(0.2)  # due, but the channel is paused
        assert waiting_for(verifier) == "the channel is paused"
        channel.update(state="running", lag_seconds=45.0)
        assert not done.wait(0.2)  # lags more than max_lag_s
        assert "lags 45s" in waiting_for(verifier, "lags")
        channel["lag_seconds"] = 1.0
        assert done.wait(5)
    finally:
        stop.set()
        verifier.close()
    assert len(calls) == 1 and calls[0].tables == "db.*" and calls[0].repair is False
    status = verifier.status("from-dc1")
    assert status is not None
    assert status["runs"] == {"equal": 0, "differ": 1, "failed": 0}
    assert status["last"]["differences"] == 2  # one row, one table not compared
    assert status["last"]["tables"][0]["differences"] == {"missing": 0, "extra": 0,
                                                         "different": 1}  # fmt: skip
    assert status["next_run"] == clock.now + 60
    assert verifier.status("plain") is None


def test_a_failed_run_is_counted_and_the_schedule_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedule, "RECHECK_EVERY_S", 0.01)
    clock = FakeClock(1000.0)
    clock.now += 1  # the first run is due at start + every_s
    ran = threading.Event()

    def runner(*args: Any, **kw: Any) -> Report:
        ran.set()
        raise OSError("origin unreachable")

    verifier = PeriodicVerify(_config(every_s=1), lambda name: None, runner=runner,
                              spark=lambda master: None, wall_clock=clock)  # fmt: skip
    stop = threading.Event()
    verifier.start(stop)
    try:
        clock.now += 5
        assert ran.wait(5)
    finally:
        stop.set()
        verifier.close()
    status = verifier.status("from-dc1")
    assert status is not None and status["runs"]["failed"] >= 1
    assert status["last_error"] == "OSError: origin unreachable" and status["last"] is None


class FakeServer:
    """Answers the recheck's queries: one row image, the binlog end, the server id."""

    def __init__(self, row: tuple[Any, ...] | None) -> None:
        self.row = row
        self.result: list[tuple[Any, ...]] = []

    def cursor(self) -> FakeServer:
        return self

    def __enter__(self) -> FakeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, text: str, params: tuple[Any, ...] = ()) -> None:
        if text.startswith("SHOW MASTER STATUS"):
            self.result = [("mysql-bin.000001", 400)]
        elif "@@server_id" in text:
            self.result = [(1,)]
        else:
            self.result = [self.row] if self.row is not None else []

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.result


def test_a_channel_that_does_not_pass_the_point_leaves_rows_unsettled() -> None:
    from drc.verify.compare import TableSpec
    from drc.verify.recheck import Follower, Recheck

    spec = TableSpec(("d", "t"), ("d", "t"), ("id", "v"), ("int", "int"), ("id",))
    stalled = Follower(lambda: [], None, ["d.t"], optional=False)  # no checkpoint: never passes
    clock = FakeClock(1000.0)

    def sleep(seconds: float) -> None:
        clock.now += seconds

    outcome = Recheck(FakeServer((1, 5)), FakeServer((1, 6)), stalled, stalled,
                      wait_timeout_s=10, sleep=sleep, clock=clock).run(
        {"d.t": spec}, {"d.t": [Difference("different", (1,))]})  # fmt: skip
    assert outcome.confirmed == {}  # never confirmed without the channel passing
    assert list(outcome.unsettled) == [("d.t", (1,))]
    assert outcome.stalled is not None and "the channel did not apply" in outcome.stalled


def test_a_paused_channel_does_not_hold_up_another_channels_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule, "RECHECK_EVERY_S", 0.01)
    config = _config()
    second = config.channels[0].model_copy(update={"name": "from-dc3", "origin": "dc3"})
    config = config.model_copy(update={"channels": (config.channels[0], second)})
    clock = FakeClock(1000.0)
    states = {"from-dc1": {"state": "paused"}, "from-dc3": {"state": "running"}}
    ran: list[str] = []
    done = threading.Event()

    def runner(config: Any, name: str, options: Options, **kw: Any) -> Report:
        ran.append(name)
        done.set()
        return Report(name)

    verifier = PeriodicVerify(config, states.get, runner=runner, spark=lambda master: None,
                              wall_clock=clock)  # fmt: skip
    verifier.channels["from-dc1"].next_run -= 10  # the most overdue, but paused
    clock.now += 61
    stop = threading.Event()
    verifier.start(stop)
    try:
        assert done.wait(5)
    finally:
        stop.set()
        verifier.close()
    assert ran == ["from-dc3"]
    assert verifier.status("from-dc1")["state"] == "waiting"  # type: ignore[index]
