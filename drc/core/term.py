"""Leadership terms and the leader's lease: the pure rules of replicator-group fencing.

A **term** numbers one leadership of a datacenter's replicator group. ZooKeeper holds the
group's term counter; a member that wins the election raises it by one with a versioned
(compare-and-set) write, so terms strictly increase and no two leaders share one. (The
buffer's *epoch*, a UUID in buffer.json, is something else: the identity of one buffer
directory, which readers use to notice a rebuilt buffer.)

Every member keeps in its buffer directory the highest term it has written records under
(:class:`drc.replicator.fencing.TermFile`). An append under an older term than that is refused
(:func:`check_append`), and so are records a deposed leader still serves (:func:`check_records`).

The **lease** is how a leader knows it still leads without asking ZooKeeper before every
append. Each time ZooKeeper confirms the leader's session (an answer to a request sent at
monotonic time ``t``), the leader may append until ``t + fraction * session_timeout``. ZooKeeper
cannot expire the session, and so cannot let another member win, before ``t + session_timeout``:
the server heard from the session after ``t``. With ``fraction`` < 1 the leader stops appending
before anyone else can start, whether ZooKeeper is unreachable, the leader was paused (a
SIGSTOP or a long GC pause moves the monotonic clock on, so the lease has run out when it
wakes), or the session was lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from drc.core.errors import FencedError

LEASE_FRACTION = 0.5  # of the session timeout: margin for clock rate and scheduling delays


@dataclass
class Lease:
    """The leader's right to append, renewed by each confirmation of its ZooKeeper session."""

    session_timeout_s: float
    fraction: float = LEASE_FRACTION
    until: float = float("-inf")  # monotonic seconds
    revoked: str | None = None  # why the lease can never be renewed again (session lost)

    def __post_init__(self) -> None:
        if not 0 < self.fraction < 1:
            raise ValueError(f"lease fraction must be in (0, 1), got {self.fraction}")
        if self.session_timeout_s <= 0:
            raise ValueError(f"session timeout must be > 0, got {self.session_timeout_s}")

    def confirmed(self, sent_at: float) -> None:
        """ZooKeeper answered a request of this session sent at monotonic ``sent_at``."""
        if self.revoked is None:
            self.until = max(self.until, sent_at + self.fraction * self.session_timeout_s)

    def revoke(self, why: str) -> None:
        """For good: the session is lost or another member leads."""
        if self.revoked is None:
            self.revoked = why
        self.until = float("-inf")

    def valid(self, now: float) -> bool:
        return self.revoked is None and now < self.until

    def why_not(self, now: float) -> str | None:
        """None while the lease holds, else why it does not."""
        if self.revoked is not None:
            return self.revoked
        if now >= self.until:
            late = now - self.until
            return (
                f"ZooKeeper has not confirmed this leader's session for "
                f"{late + self.fraction * self.session_timeout_s:.1f}s (lease ran out "
                f"{late:.1f}s ago; session timeout {self.session_timeout_s:.1f}s)"
            )
        return None


def next_term(current: int) -> int:
    """The term a newly elected leader takes over ``current`` (the counter's value)."""
    if current < 0:
        raise ValueError(f"a term is never negative, got {current}")
    return current + 1


def check_append(buffer_term: int, append_term: int) -> None:
    """FencedError unless records written under ``append_term`` may go into a buffer that
    has already taken records under ``buffer_term``: never an older term."""
    if append_term < buffer_term:
        raise FencedError(
            f"append under term {append_term} refused: this buffer already holds records of "
            f"term {buffer_term}; the writer was deposed"
        )


def check_records(served_term: int | None, leader_term: int, buffer_term: int) -> None:
    """FencedError unless records a member serves under ``served_term`` may be copied by a
    follower that knows ``leader_term`` as the current leader's and whose buffer holds
    ``buffer_term``. A server that names no term (no group) is refused too."""
    if served_term is None:
        raise FencedError("the member served records without a term: it is not in a group")
    if served_term < leader_term:
        raise FencedError(
            f"records served under term {served_term} refused: term {leader_term} leads now "
            "(the server was deposed)"
        )
    check_append(buffer_term, served_term)
