"""The rewind window read back from drc.channel_audit at start."""

from __future__ import annotations

import json

from drc.apply import audit
from drc.core.scn import SCN


def _rewind(source: str, to: str = "0:0:0:0") -> str:
    return json.dumps({"from": source, "to": to})


def test_the_furthest_rewind_beyond_the_checkpoint_is_the_window() -> None:
    details = [_rewind("1:11:1:50"), _rewind("1:11:1:90"), _rewind("1:11:1:10")]
    assert audit.replay_until(details, SCN.parse("1:11:1:20")) == SCN.parse("1:11:1:90")


def test_no_window_once_the_checkpoint_passed_every_rewind() -> None:
    assert audit.replay_until([_rewind("1:11:1:50")], SCN.parse("1:11:1:50")) is None
    assert audit.replay_until([], SCN.parse("1:11:1:50")) is None


def test_detail_of_another_shape_is_ignored_not_an_error() -> None:
    details = ["{}", "not json", json.dumps({"from": "garbage"}), _rewind("1:11:1:30")]
    assert audit.replay_until(details, SCN.zero()) == SCN.parse("1:11:1:30")
