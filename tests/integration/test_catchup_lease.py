"""The catch-up lease on a real MariaDB: take, renew, refuse while held, expire, steal after
expiry, release; the streaming channel's check sees exactly the live holder."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from drc.apply.lease import (
    LeaseHeldError,
    LeaseLostError,
    Renewer,
    ensure_table,
    holder_statement,
    lease_holder,
    release,
    release_statement,
    renew,
    take,
)
from drc.sandbox.sandbox import ServerInfo
from tests.support.servers import connect

pytestmark = pytest.mark.integration

SHORT_TTL_S = 1.0


def session(server: ServerInfo) -> Any:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION skip_replication = 1")  # as an apply session: never captured
    return conn


@pytest.fixture
def conn(dc2: ServerInfo) -> Iterator[Any]:
    c = session(dc2)
    ensure_table(c)
    with c.cursor() as cur:
        cur.execute("DELETE FROM drc.catchup_lease")
    yield c
    c.close()


def expired(conn: Any, channel: str, timeout: float = 30) -> None:
    """Wait until nobody holds ``channel``'s lease (by the server's clock)."""
    deadline = time.monotonic() + timeout
    while lease_holder(conn, channel) is not None:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.1)


def test_take_then_the_channel_shows_its_holder(conn: Any) -> None:
    assert lease_holder(conn, "dc1-to-dc2") is None
    lease = take(conn, "dc1-to-dc2", "catchup-a")
    holder = lease_holder(conn, "dc1-to-dc2")
    assert holder is not None and holder.owner == "catchup-a"
    assert holder.expires_at == lease.expires_at
    assert lease_holder(conn, "another-channel") is None


def test_a_held_lease_is_refused_to_another_owner_naming_the_holder(conn: Any) -> None:
    take(conn, "ch", "catchup-a")
    with pytest.raises(LeaseHeldError, match="catchup-a") as caught:
        take(conn, "ch", "catchup-b")
    assert caught.value.holder.owner == "catchup-a"
    assert lease_holder(conn, "ch").owner == "catchup-a"  # type: ignore[union-attr]
    assert take(conn, "ch", "catchup-a").owner == "catchup-a", "its owner may take it again"


def test_renew_moves_the_expiry_forward(conn: Any) -> None:
    lease = take(conn, "ch", "catchup-a", ttl_s=60)
    time.sleep(0.01)
    renewed = renew(conn, lease)
    assert renewed.expires_at > lease.expires_at


def test_a_lost_lease_expires_and_can_then_be_taken_by_another(conn: Any) -> None:
    lease = take(conn, "ch", "catchup-killed", ttl_s=SHORT_TTL_S)
    expired(conn, "ch")
    stolen = take(conn, "ch", "catchup-b", ttl_s=60)
    assert lease_holder(conn, "ch").owner == "catchup-b"  # type: ignore[union-attr]
    with pytest.raises(LeaseLostError, match="catchup-killed"):
        renew(conn, lease)
    release(conn, lease)  # the old owner's release changes nothing
    assert lease_holder(conn, "ch").owner == stolen.owner  # type: ignore[union-attr]


def test_an_expired_lease_cannot_be_renewed_even_if_nobody_took_it(conn: Any) -> None:
    lease = take(conn, "ch", "catchup-paused", ttl_s=SHORT_TTL_S)
    expired(conn, "ch")
    with pytest.raises(LeaseLostError):
        renew(conn, lease)


def test_release_frees_the_channel_at_once(conn: Any) -> None:
    lease = take(conn, "ch", "catchup-a", ttl_s=600)
    release(conn, lease)
    assert lease_holder(conn, "ch") is None
    assert take(conn, "ch", "catchup-b").owner == "catchup-b"


def test_release_rides_in_the_final_checkpoint_transaction(dc2: ServerInfo, conn: Any) -> None:
    lease = take(conn, "ch", "catchup-a", ttl_s=600)
    conn.begin()
    statement = release_statement(lease)
    with conn.cursor() as cur:
        cur.execute(statement.sql, statement.params)
    other = session(dc2)
    assert lease_holder(other, "ch") is not None, "not visible before commit"
    other.close()
    conn.commit()
    assert lease_holder(conn, "ch") is None


def test_the_renewer_keeps_a_live_catchup_holding_past_its_ttl(dc2: ServerInfo, conn: Any) -> None:
    lease = take(conn, "ch", "catchup-alive", ttl_s=SHORT_TTL_S)
    renewer = Renewer(lease, lambda: session(dc2)).start()
    try:
        time.sleep(SHORT_TTL_S * 3)
        renewer.check()
        assert lease_holder(conn, "ch").owner == "catchup-alive"  # type: ignore[union-attr]
        with pytest.raises(LeaseHeldError):
            take(conn, "ch", "catchup-b")
    finally:
        renewer.stop()
    expired(conn, "ch")
    with pytest.raises(LeaseLostError):
        renew(conn, renewer.lease)


def test_a_take_waits_for_a_streaming_transaction_that_checked_the_lease(
    dc2: ServerInfo, conn: Any
) -> None:
    streaming = session(dc2)
    streaming.begin()
    check = holder_statement("ch", lock=True)
    with streaming.cursor() as cur:
        cur.execute(check.sql, check.params)
        assert cur.fetchone() is None  # free: streaming applies in this transaction
    with conn.cursor() as cur:
        cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
    with pytest.raises(pymysql.err.OperationalError, match="Lock wait timeout"):
        take(conn, "ch", "catchup-a")  # blocked until streaming's transaction ends
    streaming.commit()
    streaming.close()
    assert take(conn, "ch", "catchup-a").owner == "catchup-a"
