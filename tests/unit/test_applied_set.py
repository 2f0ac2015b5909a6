"""Reading drc.applied_parts back: what a parallel group committed beyond the checkpoint."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from drc.apply import applied_set
from drc.core.scn import SCN
from drc.mysql.sql import Statement


def at(pos: int) -> SCN:
    return SCN(1, 1, 1, pos)


class Session:
    """Answers the channel's SELECT with ``rows``; records what it was asked."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows
        self.asked: list[Statement] = []

    def query(self, statement: Statement, what: str) -> list[tuple[Any, ...]]:
        self.asked.append(statement)
        return self.rows


HALF_WRITTEN = [
    (str(at(100)), f"{at(90)} {at(95)}"),  # covered by the checkpoint
    (str(at(200)), f"{at(110)} {at(150)}"),
]


def test_read_selects_the_channel_rows_and_keeps_what_is_beyond() -> None:
    session = Session(HALF_WRITTEN)
    assert applied_set.read(session, "ch", at(100)) == {at(110), at(150)}
    assert [s.params for s in session.asked] == [("ch",)]
    assert applied_set.read(Session(HALF_WRITTEN), "ch", SCN.zero()) == {
        at(90), at(95), at(110), at(150),
    }  # fmt: skip


def test_recover_logs_the_skipped_transactions_only_when_there_are_some(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="drc.apply.applied_set")
    assert applied_set.recover(Session(HALF_WRITTEN), "ch", at(100)) == {at(110), at(150)}
    assert "channel ch: 2 transactions beyond the checkpoint" in caplog.text
    caplog.clear()
    assert applied_set.recover(Session(HALF_WRITTEN), "ch", at(200)) == set()
    assert caplog.text == ""
