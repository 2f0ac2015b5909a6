"""A follower's copy (drc.replicator.follower.Copier) once its group's leader changed: a page
that arrived from the old leader's stream is dropped rather than completed with more requests
to a leader that may be silent now (paused, hung, cut off): the race behind a 10 s failover."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from drc.client import http
from drc.client.records import RawPage, RawRecord
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.replicator.fencing import GroupBuffer
from drc.replicator.follower import Copier


class OnePage:
    """RawStreams as the follower sees it: one page of one record, then the leader moves."""

    def __init__(self, on_page: Any) -> None:
        self.on_page = on_page

    def page(self, url: str, after: SCN, wait_ms: int, cancelled: Any) -> RawPage:
        self.on_page()
        record = RawRecord(SCN(1, 1, 1, 200), b"payload", 1_000, False)
        return RawPage((record,), 1, record.scn)


class NoRequests:
    """An HTTP client that must not be used: the old leader may never answer."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a request was sent to the old leader ({name})")


def test_a_page_from_a_leader_that_changed_meanwhile_is_dropped_without_asking_it_more(
    tmp_path: Path,
) -> None:
    buffer = GroupBuffer(lambda: EventBuffer.open(tmp_path / "buf", fsync="never"))
    copier = Copier(buffer, metastore=None, client=NoRequests(), token=None)
    moved = []
    copier._pages = OnePage(lambda: moved.append(1))  # type: ignore[assignment]  # noqa: SLF001
    with pytest.raises(http.Transient, match="leader changed"):
        copier.copy_once("http://old-leader", 500, 1, cancelled=lambda: bool(moved))
    assert buffer.last_scn is None, "nothing copied from the page"
    buffer.close()


def test_records_a_full_disk_kept_from_their_commit_are_committed_before_copying_more(
    tmp_path: Path,
) -> None:
    """A commit refused for a full disk leaves its records appended: the next copy commits
    them first, so it asks for what follows them (asking again from the committed end would
    append them twice, out of order)."""
    buffer = GroupBuffer(lambda: EventBuffer.open(tmp_path / "buf", fsync="never"))
    buffer.append(SCN(1, 1, 1, 100), b"kept", 1_000)  # appended; its commit found no room
    asked: list[SCN] = []

    class Pages:
        def page(self, url: str, after: SCN, wait_ms: int, cancelled: Any) -> RawPage:
            asked.append(after)
            return RawPage((), 1, after)

    copier = Copier(buffer, metastore=None, client=NoRequests(), token=None)
    copier._pages = Pages()  # type: ignore[assignment]  # noqa: SLF001
    copier.copy_once("http://leader", 500)
    assert asked == [SCN(1, 1, 1, 100)] and buffer.last_scn == SCN(1, 1, 1, 100)
    buffer.close()
