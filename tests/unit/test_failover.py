"""Choosing the source server and the change_id rule (drc.replicator.failover)."""

from __future__ import annotations

import pytest

from drc.core import gtid as gtids
from drc.core.errors import SourceConfigError, SourceDivergedError
from drc.core.scn import SCN
from drc.replicator.failover import Candidate, choose, plan

LAST = SCN(3, 1, 7, 4000)  # change_id 3, read from server_id 1
STORED = {1: gtids.Gtid(1, 1, 100)}


def _server(name: str, server_id: int, state: str, read_only: bool = False) -> Candidate:
    return Candidate(name, server_id, read_only, gtids.parse_gtids(state), state)


PRIMARY = _server("p:3306", 1, "1-1-100")
REPLICA = _server("r:3306", 11, "1-1-100", read_only=True)
PROMOTED = _server("r:3306", 11, "1-1-100,1-11-104")


def test_an_empty_buffer_starts_at_change_id_one() -> None:
    started = plan(PRIMARY, None, None)
    assert (started.change_id, started.gtid) == (1, None)


def test_the_same_server_resumes_by_position_with_the_same_change_id() -> None:
    same = plan(PRIMARY, LAST, STORED)
    assert (same.change_id, same.gtid, same.position) == (3, None, STORED)


def test_another_server_resumes_by_gtid_with_change_id_plus_one() -> None:
    moved = plan(PROMOTED, LAST, STORED)
    assert (moved.change_id, moved.gtid) == (4, "1-1-100")
    # every SCN on the new server sorts after the last one, whatever its coordinates
    assert SCN(moved.change_id, 11, 1, 4) > LAST


def test_a_server_lacking_the_buffers_last_transaction_is_refused_naming_both_positions() -> None:
    behind = _server("r:3306", 11, "1-1-97,1-11-98")
    with pytest.raises(SourceDivergedError) as err:
        plan(behind, LAST, STORED)
    assert "1-1-100" in str(err.value) and "1-1-97,1-11-98" in str(err.value)


def test_another_datacenters_source_is_refused() -> None:
    other = _server("dc2:3306", 2, "2-2-5000")
    with pytest.raises(SourceDivergedError, match="another datacenter"):
        plan(other, LAST, STORED)


def test_the_same_server_id_without_the_transactions_is_refused_too() -> None:
    rebuilt = _server("p:3306", 1, "1-1-3")
    with pytest.raises(SourceDivergedError):
        plan(rebuilt, LAST, STORED)


def test_another_server_without_a_stored_position_is_a_config_error() -> None:
    with pytest.raises(SourceConfigError, match="carries no GTID"):
        plan(PROMOTED, LAST, None)


def test_choose_prefers_a_writable_server_then_the_current_one() -> None:
    assert choose([REPLICA, PRIMARY], LAST, STORED).candidate is PRIMARY
    assert choose([PRIMARY, PROMOTED], LAST, STORED).candidate is PRIMARY  # both writable
    demoted = _server("p:3306", 1, "1-1-100", read_only=True)
    chosen = choose([demoted, PROMOTED], LAST, STORED)
    assert (chosen.candidate, chosen.change_id) == (PROMOTED, 4)


def test_choose_skips_a_diverged_server_when_another_has_the_transactions() -> None:
    diverged = _server("x:3306", 12, "1-12-500")
    assert choose([diverged, REPLICA], LAST, STORED).candidate is REPLICA


def test_choose_raises_when_no_server_is_usable() -> None:
    diverged = _server("x:3306", 12, "1-12-500")
    with pytest.raises(SourceDivergedError, match="lacks transactions"):
        choose([diverged], LAST, STORED)
