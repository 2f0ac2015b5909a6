"""One-shot requests to a channel's remote (snapshot, catch-up, the apply desk) resolve its
``zk://`` groups to their members (drc.client.discovery.members) before asking them."""

from __future__ import annotations

from typing import Any

import pytest

from drc.catchup import auto
from drc.catchup import driver as catchup_driver
from drc.catchup.driver import CatchupError
from drc.client import discovery
from drc.config_channels import ChannelConfig
from drc.core.scn import SCN
from drc.snapshot import driver as snapshot_driver
from drc.snapshot.origin import SnapshotError

GROUP = "zk://zk1:2181/drc/dc1"
LEADER = "http://leader:8640"
CHANNEL = ChannelConfig(name="from_dc1", origin="dc1", remote=(GROUP,))


def _group(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolve(spec: str, timeout_s: float = 0) -> list[str]:
        assert spec == GROUP
        return [LEADER]

    monkeypatch.setattr(discovery, "resolve", resolve)


def _zookeeper_down(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolve(spec: str, timeout_s: float = 0) -> list[str]:
        raise discovery.DiscoveryError(f"ZooKeeper zk1:2181 did not answer for {spec}")

    monkeypatch.setattr(discovery, "resolve", resolve)


def test_a_snapshot_asks_the_groups_leader_for_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    _group(monkeypatch)
    asked = []

    def status(url: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        asked.append(url)
        return {"buffer": {"last_scn": str(SCN(7, 42, 1, 4))}}

    monkeypatch.setattr(snapshot_driver, "fetch_status", status)
    stream = snapshot_driver._stream(CHANNEL)
    assert asked == [LEADER]
    assert (stream.change_id, stream.server_id) == (7, 42)


def test_a_snapshot_says_when_the_groups_zookeeper_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _zookeeper_down(monkeypatch)
    with pytest.raises(SnapshotError, match=r"from_dc1: .*zk1:2181 did not answer.*reachable"):
        snapshot_driver._stream(CHANNEL)


def test_a_catch_up_lists_the_segments_of_the_groups_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _group(monkeypatch)
    asked = []

    def source(channel: ChannelConfig, url: str, token: str | None) -> Any:
        asked.append(url)
        raise OSError("refused")

    monkeypatch.setattr(catchup_driver.executor, "segment_source", source)
    with pytest.raises(CatchupError, match="no remote replicator answered: http://leader"):
        catchup_driver._listing(CHANNEL, None, SCN(1, 1, 1, 4), None)
    assert asked == [LEADER]
    _zookeeper_down(monkeypatch)
    with pytest.raises(CatchupError, match=r"from_dc1: .*zk1:2181 did not answer"):
        catchup_driver._listing(CHANNEL, None, SCN(1, 1, 1, 4), None)


def test_the_backlog_check_asks_the_groups_leader(monkeypatch: pytest.MonkeyPatch) -> None:
    _group(monkeypatch)
    asked = []

    class Source:
        def __init__(self, url: str, **kwargs: Any) -> None:
            asked.append(url)
            raise OSError("refused")

    monkeypatch.setattr(auto, "SegmentSource", Source)
    assert auto.segment_backlog_mb(CHANNEL, SCN(1, 1, 1, 4)) == 0.0
    assert asked == [LEADER]
    _zookeeper_down(monkeypatch)
    assert auto.segment_backlog_mb(CHANNEL, SCN(1, 1, 1, 4)) == 0.0
