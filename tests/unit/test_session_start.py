"""Where capture starts on an empty buffer: the binlog coordinate ``start_from`` names."""

from __future__ import annotations

import pytest

from drc.core.errors import SourceConfigError
from drc.replicator.session_start import initial_position
from drc.replicator.source import SourceInfo

INFO = SourceInfo(7, "mysql-bin", ("mysql-bin.000002", "mysql-bin.000003"), "mysql-bin.000003", 812)


def test_current_is_the_server_binlog_end_and_earliest_its_oldest_file() -> None:
    assert initial_position(INFO, "current") == ("mysql-bin.000003", 812)
    assert initial_position(INFO, "earliest") == ("mysql-bin.000002", 4)


def test_a_file_and_position_are_taken_as_given() -> None:
    assert initial_position(INFO, "mysql-bin.000002:1234") == ("mysql-bin.000002", 1234)


@pytest.mark.parametrize("start_from", ["latest", "mysql-bin.000002", ":4", "mysql-bin.000002:x"])
def test_anything_else_is_a_config_error_naming_the_forms(start_from: str) -> None:
    with pytest.raises(SourceConfigError, match="'current', 'earliest' or 'FILE:POS'"):
        initial_position(INFO, start_from)
