"""Rechecking differing rows under live replication (the rule: drc.core.settle).

"The channel has applied the source's changes up to binlog point P" is true when

- its checkpoint in the target's ``drc.checkpoint`` is at or past P, or
- the origin's stream holds no change to the verified tables between the checkpoint and P
  (asked through the pull API, skip_drc as the channel pulls) and the replicator has captured
  past P: a channel that only skipped transactions (its own echoes, other tables, heartbeats)
  saves its checkpoint only now and then.

The reverse direction (target changes reaching the source) is the same question asked about
the reverse channel: its checkpoint in the source's ``drc.checkpoint`` (origin = this
datacenter) and this datacenter's own pull API. Without a reverse channel there is nothing to
wait for. When a point and a checkpoint name different servers (a source failover between
them) they cannot be compared, and the round waits ``fallback_wait_s`` instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from drc.client import Subscriber
from drc.core.rowsum import DIFFERENT, EXTRA, MISSING, Difference
from drc.core.scn import SCN
from drc.core.settle import BinlogPoint, Images, judge, reached, within
from drc.mysql import sql
from drc.verify.compare import TableSpec
from drc.verify.sides import binlog_end, query

log = logging.getLogger(__name__)

KEYS_PER_QUERY = 200


@dataclass(frozen=True)
class Stream:
    """A replicator group's pull API, as a channel reads it."""

    urls: tuple[str, ...]
    token: str | None
    verify: Any = True

    def quiet(self, after: SCN, point: BinlogPoint, tables: Sequence[str]) -> bool | None:
        """Whether no change to ``tables`` lies in (after, point] and the stream reaches past
        ``point`` (None: not comparable, another server)."""
        with Subscriber(list(self.urls), after=after, tables=",".join(tables), token=self.token,
                        skip_drc=True, wait_ms=-1, prefetch=False, binary=True,
                        verify=self.verify) as sub:  # fmt: skip
            batch = sub.get(timeout=10)
        wanted = {tuple(t.split(".", 1)) for t in tables}
        for txn in batch.transactions:
            inside = within(txn.scn, point)
            if inside is None:
                return None
            if not inside:
                return True  # past the point, and nothing for these tables before it
            if txn.tables() & wanted:
                return False
        newest = batch.newest
        return newest is not None and bool(reached(newest, point))


@dataclass
class Follower:
    """Tells when one direction of replication has passed a binlog point."""

    checkpoints: Callable[[], list[SCN]]  # the channel(s) of this direction, [] = none
    stream: Stream | None
    tables: Sequence[str]  # verified tables by the names this direction's origin uses
    optional: bool  # no channel at all is fine (no reverse replication)

    def passed(self, point: BinlogPoint) -> bool | None:
        found = self.checkpoints()
        if not found:
            return True if self.optional else False
        verdicts = []
        for scn in found:
            verdict = reached(scn, point)
            if verdict is False and self.stream is not None:
                verdict = self.stream.quiet(scn, point, self.tables)
            verdicts.append(verdict)
        if None in verdicts:
            return None
        return all(verdicts)


@dataclass
class Outcome:
    confirmed: dict[tuple[str, tuple[Any, ...]], tuple[str, Images]]
    unsettled: dict[tuple[str, tuple[Any, ...]], tuple[str, Images]]
    rounds: int = 0
    stalled: str | None = None  # why the rechecks ended early (a channel did not move)


class Recheck:
    """Rounds of reads and waits until every candidate is equal, confirmed or out of rounds."""

    def __init__(
        self,
        source: Any,
        target: Any,
        forward: Follower,
        reverse: Follower,
        *,
        max_rounds: int = 6,
        wait_timeout_s: float = 60.0,
        fallback_wait_s: float = 3.0,
        poll_s: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source, self.target = source, target
        self.forward, self.reverse = forward, reverse
        self.max_rounds = max_rounds
        self.wait_timeout_s, self.fallback_wait_s, self.poll_s = (
            wait_timeout_s, fallback_wait_s, poll_s)  # fmt: skip
        self._sleep, self._clock = sleep, clock

    def run(self, specs: Mapping[str, TableSpec], candidates: Mapping[str, Iterable[Difference]]
            ) -> Outcome:  # fmt: skip
        pending = {(t, d.key): d.kind for t, ds in candidates.items() for d in ds}
        previous: dict[Any, Images] = {}
        outcome = Outcome({}, {})
        while pending and outcome.rounds < self.max_rounds:
            outcome.rounds += 1
            mine = self._images(self.source, specs, pending, target=False)
            if not self._wait(self.forward, binlog_end(self.source), "the channel"):
                outcome.stalled = self._stalled("the channel")
                break  # not confirmable: what is pending stays unsettled
            theirs = self._images(self.target, specs, pending, target=True)
            reverse_point = binlog_end(self.target)
            current = {k: (mine.get(k), theirs.get(k)) for k in pending}
            verdict = judge(previous, current)
            for key, images in verdict.confirmed.items():
                outcome.confirmed[key] = (_kind(images), images)
            pending = {k: _kind(v) for k, v in verdict.moving.items()}
            previous = dict(verdict.moving)
            log.info("recheck round %d: %d equal, %d confirmed, %d still changing",
                     outcome.rounds, len(verdict.equal), len(verdict.confirmed),
                     len(pending))  # fmt: skip
            if pending and not self._wait(self.reverse, reverse_point, "the reverse channel"):
                outcome.stalled = self._stalled("the reverse channel")
                break
        unknown = (None, None)
        outcome.unsettled = {k: (kind, previous.get(k, unknown)) for k, kind in pending.items()}
        return outcome

    def _stalled(self, what: str) -> str:
        return (f"{what} did not apply the changes up to the compared point within "
                f"{self.wait_timeout_s:.0f}s (is it running?), so the rows still differing "
                "could not be confirmed")  # fmt: skip

    def _wait(self, follower: Follower, point: BinlogPoint | None, what: str) -> bool:
        """Until ``follower`` passed ``point``; False when it did not within the timeout
        (a stopped or paused channel): nothing read after it could be confirmed."""
        if point is None:  # binary logging off: nothing replicates from there
            return True
        deadline = self._clock() + self.wait_timeout_s
        while True:
            verdict = follower.passed(point)
            if verdict:
                return True
            if verdict is None:
                log.info("%s: positions of another server; waiting %.1fs instead", what,
                         self.fallback_wait_s)  # fmt: skip
                self._sleep(self.fallback_wait_s)
                return True
            if self._clock() >= deadline:
                log.warning("%s has not passed %s after %.0fs; the rows still differing are "
                            "left unsettled", what, point, self.wait_timeout_s)  # fmt: skip
                return False
            self._sleep(self.poll_s)

    def _images(
        self, conn: Any, specs: Mapping[str, TableSpec], pending: Mapping[Any, str], target: bool
    ) -> dict[Any, Any]:
        """Each pending key's row on one side (a keyless table: how many rows have the hash)."""
        by_table: dict[str, list[tuple[Any, ...]]] = {}
        for table, key in pending:
            by_table.setdefault(table, []).append(key)
        found: dict[Any, Any] = {}
        for table, keys in by_table.items():
            spec = specs[table]
            name = sql.table_name(*(spec.target if target else spec.source))
            for start in range(0, len(keys), KEYS_PER_QUERY):
                part = keys[start : start + KEYS_PER_QUERY]
                found.update({(table, k): v for k, v in _rows(conn, spec, name, part).items()})
        return found


def _rows(conn: Any, spec: TableSpec, name: str, keys: list[tuple[Any, ...]]) -> dict[Any, Any]:
    if not spec.key:
        hashes = [k[0] for k in keys]
        marks = ", ".join(["%s"] * len(hashes))
        text = (f"SELECT h, COUNT(*) FROM (SELECT {spec.hash_expr()} AS h FROM {name}) x "
                f"WHERE h IN ({marks}) GROUP BY h")  # fmt: skip
        return {(int(h),): int(n) for h, n in query(conn, text, hashes)}
    where = sql.by_keys(spec.key, keys, spec.floats)
    columns = sql.read_columns(spec.columns, spec.floats)
    rows = query(conn, f"SELECT {columns} FROM {name} WHERE {where.sql}", where.params)
    at = [spec.columns.index(k) for k in spec.key]
    return {tuple(r[i] for i in at): r for r in rows}


def _kind(images: Images) -> str:
    if not images[1]:
        return MISSING
    if not images[0]:
        return EXTRA
    if isinstance(images[0], int):  # keyless: counts of one row hash
        return MISSING if images[0] > images[1] else EXTRA
    return DIFFERENT
