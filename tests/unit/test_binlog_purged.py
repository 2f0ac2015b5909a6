"""A purged binlog: the replicator refuses to resume, naming the position and the way out."""

from __future__ import annotations

import pytest

from drc.core.errors import BinlogPurgedError, FatalError
from drc.replicator.source import SourceInfo, check_not_purged

INFO = SourceInfo(
    server_id=1,
    basename="mysql-bin",
    binlogs=("mysql-bin.000007", "mysql-bin.000008"),
    current_file="mysql-bin.000008",
    current_pos=342,
)


def test_a_binlog_still_on_the_source_is_accepted() -> None:
    check_not_purged(INFO, "mysql-bin.000007", 4, "SCN 1:1:7:4")


def test_a_purged_binlog_names_the_position_the_oldest_binlog_and_the_way_out() -> None:
    with pytest.raises(BinlogPurgedError) as info:
        check_not_purged(INFO, "mysql-bin.000005", 1234, "SCN 1:1:5:1234")
    message = str(info.value)
    assert "mysql-bin.000005:1234" in message
    assert "SCN 1:1:5:1234" in message
    assert "oldest binlog is mysql-bin.000007" in message
    assert "will not skip ahead" in message
    assert 'start_from = "current"' in message and "drc snapshot" in message
    assert isinstance(info.value, FatalError)  # never retried: retrying cannot bring it back
