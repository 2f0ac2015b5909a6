"""True lag and channel state: heartbeats, the progress state machine, the channel's use of
them, and the heartbeat writer against a scripted connection. No servers."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pymysql
import pytest

from drc.apply.progress import ChannelProgress
from drc.apply.service import build_channels
from drc.config import load_config
from drc.config_channels import ChannelConfig
from drc.core.events import Op, RowChange, SchemaChange
from drc.core.heartbeat import lag_seconds, source_time_ms
from drc.core.tablefilter import TableFilter
from drc.core.target_errors import ApplyError
from drc.replicator.heartbeat import BEAT, SETUP, HeartbeatWriter
from drc.replicator.source_events import Begin, Commit, Rows
from drc.runtime import build_heartbeat
from tests.support.apply_fakes import Harness, batch, ins, target, txn
from tests.support.assembler import assembler, rows_event, table_schema
from tests.support.config import BASE, write_config

WALL = 1_700_000_100.0  # the Harness's wall clock


def beat(pos: int, beat_ms: int) -> Any:
    change = RowChange("drc", "heartbeat", Op.UPDATE, {"datacenter": "dc1", "beat_ms": 1},
                       {"datacenter": "dc1", "beat_ms": beat_ms})  # fmt: skip
    return txn(pos, change)


# ------------------------------------------------------------------ pure parts


def test_a_heartbeat_gives_its_millisecond_time_other_transactions_their_commit_second() -> None:
    assert source_time_ms(beat(10, 1_700_000_009_250)) == 1_700_000_009_250
    assert source_time_ms(txn(10, ins("t", id=1))) == (1_700_000_000 + 10) * 1000


def test_lag_is_never_negative_and_unknown_without_a_time() -> None:
    assert lag_seconds(100.0, 98_500) == pytest.approx(1.5)
    assert lag_seconds(100.0, 101_000) == 0.0  # another host's clock a little ahead
    assert lag_seconds(100.0, None) is None


def test_lag_counts_only_what_was_applied_and_grows_with_the_clock() -> None:
    progress = ChannelProgress()
    assert progress.snapshot(100.0).lag_seconds is None
    progress.taken(99_000)
    assert progress.snapshot(100.0).lag_seconds is None, "taken is not applied yet"
    progress.applied()
    assert progress.snapshot(100.0).lag_seconds == pytest.approx(1.0)
    assert progress.snapshot(130.0).lag_seconds == pytest.approx(31.0), "nothing new: it grows"
    progress.taken(98_000)  # a whole-second commit time after a finer heartbeat
    progress.applied()
    assert progress.snapshot(100.0).applied_ms == 99_000, "never moves back"


def test_states_follow_the_remote_and_the_target_and_stopped_is_final() -> None:
    progress = ChannelProgress(stale_after_s=10)
    state = lambda: progress.snapshot(0).state  # noqa: E731
    assert state() == "starting"
    progress.started(now=0)
    assert state() == "connecting"
    progress.answered(now=1)
    assert state() == "running"
    progress.unanswered(now=5, error=None)
    assert state() == "running", "a slow answer is not yet a lost remote"
    progress.unanswered(now=12, error=None)
    assert state() == "disconnected"
    progress.answered(now=13)
    progress.unanswered(now=14, error="http://dc1: ConnectError")
    assert (state(), progress.snapshot(0).error) == ("disconnected", "http://dc1: ConnectError")
    progress.answered(now=15)
    progress.target_waiting("target unavailable")
    progress.answered(now=16)
    progress.unanswered(now=40, error="down")
    assert state() == "waiting", "waiting for the target is what holds it up"
    progress.target_ok()
    assert state() == "running"
    progress.stopped("ApplyError: (1050) table exists")
    for move in (lambda: progress.answered(50), progress.target_ok, lambda: progress.started(51)):
        move()
        assert (state(), progress.snapshot(0).error) == (
            "stopped",
            "ApplyError: (1050) table exists",
        )


# ------------------------------------------------------------------ the channel


def test_a_heartbeat_moves_the_lag_without_writing_anything() -> None:
    fake = target()
    harness = Harness(fake, [batch(1, beat(10, int(WALL * 1000) - 700), newest=None)])
    channel = harness.run()
    assert fake.writes() == [], "never applied as user data"
    report = channel.report()
    assert report["lag_seconds"] == pytest.approx(0.7) and report["rows"] == 0


def test_the_lag_counts_a_group_once_it_is_committed() -> None:
    fake = target()
    channel = Harness(fake, [batch(1, txn(40, ins("t", id=1, v="a")), newest=None)]).run()
    assert len(fake.committed) == 1
    assert channel.report()["lag_seconds"] == pytest.approx(WALL - (1_700_000_000 + 40))


def test_a_table_list_subscribes_to_the_heartbeat_rows_too() -> None:
    from drc.apply.service import _subscription

    channel = ChannelConfig(name="c", origin="dc1", remote=("http://x",), tables=("db.*",))
    assert _subscription(channel, tombstones=False).tables == ("db.*", "drc.heartbeat")
    assert _subscription(channel, tombstones=True).tables == (
        "db.*", "drc.heartbeat", "drc.tomb_*",
    )  # fmt: skip
    everything = channel.model_copy(update={"tables": ()})
    assert _subscription(everything, tombstones=True).tables == ()


def test_a_channel_whose_remote_fails_is_disconnected() -> None:
    harness = Harness(target(), [])
    harness.run()  # the fake subscriber answers "no answer" with no error, then stops
    assert harness.channel.report()["state"] in ("connecting", "disconnected")
    harness.channel.progress.unanswered(harness.now, "http://x: refused")
    assert harness.channel.report()["state"] == "disconnected"


def test_a_fatal_error_stops_the_channel_with_that_error() -> None:
    fake = target()
    exists = pymysql.err.OperationalError(1050, "Table 'x' already exists")
    fake.fail_once(lambda sql: sql.startswith("CREATE TABLE x"), exists)
    ddl = (SchemaChange("db", "CREATE TABLE x (id INT PRIMARY KEY)"),)
    harness = Harness(fake, [batch(1, txn(10, ddl=ddl))])
    with pytest.raises(ApplyError):
        harness.run()
    report = harness.channel.report()
    assert report["state"] == "stopped" and not report["up"] and "1050" in report["error"]


# ------------------------------------------------------------------ capture side


def test_heartbeat_rows_are_captured_whatever_the_table_filter() -> None:
    asm = assembler(TableFilter.build(["shop.*"]))
    asm.feed(Begin(None, 7, standalone=False))
    images = ((None, {"datacenter": "dc1", "beat_ms": 5}),)
    asm.feed(Rows(table_schema("drc", "heartbeat"), Op.INSERT, images, size_bytes=20))
    asm.feed(rows_event("drc", "other", 1))
    committed = asm.feed(Commit(7, 5, 3, 20))
    assert committed is not None and not committed.empty and not committed.drc_originated
    [captured] = list(committed.fragments())
    assert [(c.schema, c.table) for c in captured.changes] == [("drc", "heartbeat")]


class FakeConnection:
    def __init__(self, log: list[tuple[str, Any]], fail_on: str | None = None) -> None:
        self.log, self.fail_on, self.closed = log, fail_on, False

    def cursor(self) -> FakeConnection:
        return self

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, params: Any = None) -> None:
        if self.fail_on is not None and sql.startswith(self.fail_on):
            raise pymysql.err.OperationalError(1290, "read-only")
        self.log.append((sql, params))

    def close(self) -> None:
        self.closed = True


def test_the_writer_creates_its_table_unreplicated_and_upserts_its_row_replicated() -> None:
    log: list[tuple[str, Any]] = []
    writer = HeartbeatWriter("dc1", lambda: FakeConnection(log), 1.0, wall_clock=lambda: 12.5)
    writer.beat()
    writer.beat()
    statements = [sql for sql, _ in log]
    assert statements == [*SETUP, BEAT, BEAT], "the table once per connection"
    assert statements[0] == "SET SESSION skip_replication = 1"
    assert statements[len(SETUP) - 1] == "SET SESSION skip_replication = 0", "the row is seen"
    assert log[-1][1] == ("dc1", 12_500)
    assert (writer.stats.beats, writer.stats.last_beat_ms) == (2, 12_500)


def test_a_failing_heartbeat_is_counted_and_the_next_one_reconnects() -> None:
    log: list[tuple[str, Any]] = []
    connections: list[FakeConnection] = []

    def connect() -> FakeConnection:
        fail = "INSERT" if not connections else None
        connections.append(FakeConnection(log, fail))
        return connections[-1]

    writer = HeartbeatWriter("dc1", connect, 1.0)
    writer.beat()
    assert (writer.stats.failures, writer.stats.beats) == (1, 0)
    assert "read-only" in (writer.stats.last_error or "") and connections[0].closed
    writer.beat()
    assert (writer.stats.beats, writer.stats.last_error, len(connections)) == (1, None, 2)


def test_the_writer_stops_when_asked() -> None:
    stop = threading.Event()
    writer = HeartbeatWriter("dc1", lambda: FakeConnection([]), 0.01)
    thread = threading.Thread(target=writer.run, args=(stop,))
    thread.start()
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


CHANNEL = """
[[channels]]
name = "from_dc2"
origin = "dc2"
remote = ["http://127.0.0.1:1"]
"""


def test_a_hosts_clock_given_to_the_composition_root_stamps_beats_and_dates_lag(
    tmp_path: Path,
) -> None:
    """A datacenter whose clock runs off (drc.node.Node ``wall_clock``): its heartbeats carry
    that clock, and its channels measure lag against it."""
    config = load_config(write_config(tmp_path, BASE + CHANNEL))
    writer = build_heartbeat(config, lambda: 12.5)
    assert writer is not None
    log: list[tuple[str, Any]] = []
    writer._connect = lambda: FakeConnection(log)  # no server: the statements are the point
    writer.beat()
    assert log[-1][1] == ("dc1", 12_500)
    [channel] = build_channels(config, wall_clock=lambda: 1000.0)
    channel.progress.taken(990_000)
    channel.progress.applied()
    assert channel.report()["lag_seconds"] == 10.0
