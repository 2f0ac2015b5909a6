"""The catch-up lease's pure parts: statements, and when a Renewer declares its lease lost."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from drc.apply.lease import (
    Lease,
    LeaseLostError,
    Renewer,
    holder_statement,
    new_owner,
    release_statement,
)
from tests.support.fakes import FakeClock

LEASE = Lease("dc1`to%dc2", "host:1:abc", 3.0, dt.datetime(2030, 1, 1))


def test_statements_bind_values_and_lock_only_when_asked() -> None:
    plain, locked = holder_statement("x`y"), holder_statement("x`y", lock=True)
    assert plain.params == ("x`y",) and "x`y" not in plain.sql
    assert "LOCK IN SHARE MODE" in locked.sql and "LOCK IN SHARE MODE" not in plain.sql
    assert release_statement(LEASE).params == (LEASE.channel, LEASE.owner)


def test_owner_ids_differ_per_run() -> None:
    assert new_owner() != new_owner()


def test_a_lease_not_renewed_within_its_ttl_is_lost_without_asking_the_target() -> None:
    clock = FakeClock()
    lost: list[BaseException] = []
    renewer = Renewer(LEASE, lambda: None, on_lost=lost.append, clock=clock)
    renewer.check()  # fresh: held
    clock.now += LEASE.ttl_s - 0.01
    renewer.check()
    clock.now += 0.02
    with pytest.raises(LeaseLostError):
        renewer.check()
    assert renewer.lost.is_set() and len(lost) == 1


def test_an_unreachable_target_loses_the_lease_once_its_ttl_has_passed() -> None:
    clock = FakeClock()
    done = threading.Event()

    def unreachable() -> None:
        clock.now += 1.0  # each failed attempt takes a second of the TTL
        raise OSError("connection refused")

    lease = Lease("ch", "me", 0.03, dt.datetime(2030, 1, 1))
    renewer = Renewer(lease, unreachable, on_lost=lambda exc: done.set(), clock=clock).start()
    assert done.wait(10)
    renewer.stop()
    with pytest.raises(LeaseLostError):
        renewer.check()
