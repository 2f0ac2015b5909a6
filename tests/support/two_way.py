"""The two-way workload of the group acceptance tests (issue #13): both datacenters insert into
one table while each applies the other's changes, dc1's three-member group read through
``zk://`` by dc2's channel and dc2's replicator group read by the channel into dc1's primary;
and the checks a user makes afterwards (rows equal, each transaction applied once, none echoed).

dc1's clients insert odd ids, dc2's even ids (drc.apply is a subprocess per direction).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from drc.client import Subscriber
from drc.core.codec import decode_transaction
from drc.core.events import Op
from drc.core.scn import SCN
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import apply_process_config, apply_user
from tests.support.failover import Writer
from tests.support.group import Group, Member, assert_identical_on_common_range, records
from tests.support.servers import fresh_database, master_position, sql

# The table of the group fault tests (grp_db.t on both datacenters).
GROUP_TABLE = "CREATE TABLE grp_db.t (id INT PRIMARY KEY, v VARCHAR(20))"


def stored(directory: Path, db: str, table: str = "t") -> list[tuple[SCN, bool, list[int]]]:
    """Each record of a buffer: its SCN, whether DRC applied it, and the ids it inserted
    into ``db``.``table``."""
    out = []
    for scn, payload, _ts, _more in records(directory):
        txn, _ = decode_transaction(payload)
        ids = [
            int(c.after["id"])
            for c in txn.changes
            if (c.schema, c.table) == (db, table) and c.op == Op.INSERT and c.after is not None
        ]
        out.append((scn, txn.drc_originated, ids))
    return out


def inserted(directory: Path, db: str, applied: bool, table: str = "t") -> list[int]:
    """Ids inserted by this datacenter's own clients (``applied`` False) or by DRC."""
    return [i for _scn, drc, ids in stored(directory, db, table) if drc == applied for i in ids]


def zk_url(box: SandboxDescription, group: Group) -> str:
    return f"zk://{box.zookeeper.connect}/drc-sandbox/{group.datacenter}"


def rows(server: ServerInfo, db: str, table: str = "t") -> list[tuple[object, ...]]:
    return sql(server, f"SELECT id, v FROM {db}.{table} ORDER BY id")


@dataclass
class TwoWay:
    """The workload between dc1's ``group`` and dc2's ``other`` on ``db``.``table`` (id INT
    PRIMARY KEY, v VARCHAR), which must exist, empty, on both sides (and on dc1's replicas);
    the channels replicate that table only."""

    box: SandboxDescription
    group: Group
    other: Group
    db: str
    tmp: Path
    table: str = "t"
    dc1_writes: Writer = field(init=False)
    dc2_writes: Writer = field(init=False)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        name = f"{self.db}.{self.table}"
        self.dc1_writes = Writer(self.group.server, name, first=1, step=2)
        self.dc2_writes = Writer(self.other.server, name, first=2, step=2)
        for server in (self.group.server, self.other.server):
            apply_user(server)

    @property
    def writers(self) -> tuple[Writer, Writer]:
        return self.dc1_writes, self.dc2_writes

    def start_channels(self) -> None:
        """Both channels (a process takes seconds to start on a loaded host: start them while
        the groups elect their leaders)."""
        if not self._procs:
            self._apply("to_dc2", self.other.server, zk_url(self.box, self.group), "dc2", "dc1")
            self.apply_into_dc1(self.group.server)

    def start(self) -> None:
        """Both channels (unless started), then both writers."""
        self.start_channels()
        for writer in self.writers:
            writer.thread.start()

    def wait_flowing(self, timeout: float = 60.0) -> None:
        """Until each side holds a row the other's clients wrote (both channels apply)."""

        def flowing() -> bool:
            odd = any(r[0] % 2 for r in self.rows(self.other.server))
            return odd and any(r[0] % 2 == 0 for r in self.rows(self.group.server))

        assert wait_for(flowing, timeout, interval=0.2), self.group.logs()

    def apply_into_dc1(self, server: ServerInfo) -> None:
        """(Re)start dc2's channel into ``server`` (dc1's primary, a promoted replica after a
        switchover)."""
        self._stop("to_dc1")
        self._apply("to_dc1", server, zk_url(self.box, self.other), "dc1", "dc2")

    def _apply(self, name: str, target: ServerInfo, url: str, local: str, origin: str) -> None:
        directory = self.tmp / f"{name}-{len(self._procs)}-{time.monotonic_ns()}"
        directory.mkdir(parents=True)
        # A channel of its own: its checkpoint on the shared sandbox's dc2 is another test's.
        channel = f"from_{origin}_{self.group.datacenter}"
        config = apply_process_config(
            directory, target, url, channel, [f"{self.db}.{self.table}"], local=local,
            origin=origin, max_commit_delay_ms=20,
        )  # fmt: skip
        argv = [sys.executable, "-m", "drc.apply", "--config", str(config), "--stats-every", "1"]
        with open(self.log(name), "ab") as out:
            self._procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def stop_apply_into_dc1(self) -> None:
        self._stop("to_dc1")

    def _stop(self, name: str) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)

    def stop_writes(self) -> None:
        for writer in self.writers:
            writer.stop.set()
            writer.thread.join(30)

    def wait_converged(self, dc1: ServerInfo, timeout: float = 120.0) -> None:
        """Until ``dc1`` (its primary now) and dc2 both hold exactly every row written."""
        expected = sorted(self.dc1_writes.written + self.dc2_writes.written)

        def converged() -> bool:
            for name, proc in self._procs.items():
                assert proc.poll() is None, self.log(name).read_text()[-3000:]
            ids = [[r[0] for r in self.rows(server)] for server in (dc1, self.other.server)]
            return ids[0] == ids[1] == expected

        if not wait_for(converged, timeout, interval=0.5):
            tails = "\n".join(
                f"--- {n} ---\n{self.log(n).read_text()[-2000:]}" for n in self._procs
            )
            counts = [len(self.rows(server)) for server in (dc1, self.other.server)]
            raise AssertionError(
                f"rows {counts}, written {len(expected)}\n{tails}\n{self.group.logs()}"
            )

    def rows(self, server: ServerInfo) -> list[tuple[object, ...]]:
        return rows(server, self.db, self.table)

    def inserted(self, directory: Path, applied: bool) -> list[int]:
        return inserted(directory, self.db, applied, self.table)

    def close(self) -> None:
        for writer in self.writers:
            writer.running.set()
            writer.stop.set()
        for name in list(self._procs):
            self._stop(name)

    def assert_applied_once_none_echoed(self, dc1: ServerInfo, members: list[Member]) -> None:
        """``dc1`` and dc2 equal row for row; each of ``members`` (of dc1's group) and dc2's
        buffer hold their own clients' transactions once, in commit order, and the other
        side's once as DRC-applied (none came back as their own)."""
        mine, theirs = self.dc1_writes.written, self.dc2_writes.written
        assert self.rows(self.other.server) == self.rows(dc1), "row for row equal"
        assert [r[0] for r in self.rows(dc1)] == sorted(mine + theirs)
        for member in members:
            buffer = member.buffer_dir
            assert self.inserted(buffer, applied=False) == mine, member.member_id
            assert sorted(self.inserted(buffer, applied=True)) == theirs, member.member_id
        dc2_buffer = self.other.members[0].buffer_dir
        assert sorted(self.inserted(dc2_buffer, applied=True)) == mine, "applied once on dc2"
        assert self.inserted(dc2_buffer, applied=False) == theirs, "none of dc1's came back"


def strictly_increasing(directory: Path) -> list[SCN]:
    """The SCNs of a buffer's transactions (a fragmented one counts once), checked to
    strictly increase."""
    scns = []
    for scn, _payload, _ts, more in records(directory):
        if not more:
            scns.append(scn)
    assert all(a < b for a, b in zip(scns, scns[1:], strict=False)), f"{directory}: SCN order"
    return scns


def source_position(server: ServerInfo) -> SCN:
    log_file, pos = master_position(server)
    return SCN(0, 0, int(log_file.rsplit(".", 1)[1]), pos)


@contextmanager
def two_way(
    sandbox: SandboxDescription,
    group: Group,
    dc2: ServerInfo,
    tmp: Path,
    session_s: float = 2.0,
) -> Iterator[TwoWay]:
    """Once the group's leader captures, the two-way workload (tests/support/two_way.py,
    with a one-member group of dc2) until the block ends; then both sides converge and every
    live member and dc2's buffer reach their source's position."""
    fresh_database(dc2, "grp_db", GROUP_TABLE)
    other = Group.create(sandbox, dc2, tmp / "dc2", 1, session_s, f"{group.datacenter}x")
    load = TwoWay(sandbox, group, other, "grp_db", tmp / "load")
    other.start()
    load.start_channels()
    try:
        group.wait_started(group.wait_leader(30))
        other.wait_started(other.wait_leader(30))
        load.start()
        load.wait_flowing()
        yield load
        load.stop_writes()
        load.wait_converged(group.server)
        group.wait_leader(60)
        group.wait_caught_up(source_position(group.server))
        other.wait_caught_up(source_position(dc2))
    finally:
        load.close()
        other.stop()


def check_after_fault(load: TwoWay, complete: list[Member]) -> None:
    """What a user checks after a fault: every member's buffer identical to the others on
    their common range with SCNs strictly increasing, each transaction applied once on either
    side and none echoed (``complete``: the members that hold everything)."""
    group = load.group
    assert_identical_on_common_range([m.buffer_dir for m in group.members])
    for member in group.members:
        strictly_increasing(member.buffer_dir)
    load.assert_applied_once_none_echoed(group.server, complete)


class Reader:
    """A subscriber of the group through its ZooKeeper, collecting inserted ids."""

    def __init__(self, url: str) -> None:
        self.ids: list[int] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._sub = Subscriber([url], tables="grp_db.t", wait_ms=300, skip_drc=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self._sub.get()
                for txn in batch.transactions:
                    self.ids.extend(int(c.after["id"]) for c in txn.changes if c.op == Op.INSERT)
                self._sub.ack(batch)
        except BaseException as exc:  # the caller must see none
            self.error = exc

    def wait_for(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.ids) < count and time.monotonic() < deadline and self.error is None:
            time.sleep(0.1)
        self.stop.set()
        self._thread.join(timeout=30)
        self._sub.close()


@contextmanager
def started_group(
    sandbox: SandboxDescription, dc1: ServerInfo, tmp: Path, prefix: str, session_s: float = 2.0
) -> Iterator[Group]:
    """Three members of a new group (its name ``prefix`` + a number) reading ``dc1``, started
    on a fresh grp_db.t; stopped when the block ends."""
    fresh_database(dc1, "grp_db", GROUP_TABLE)
    made = Group.create(sandbox, dc1, tmp, 3, session_s, name=f"{prefix}{time.time_ns() % 10**9}")
    made.start()
    try:
        yield made
    finally:
        made.stop()
