"""A datacenter of its own with a GTID replica, for source failover, and a writer that follows
whichever server is the primary."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from drc.core.errors import SandboxError
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo, log_tails
from tests.support.servers import sql


@contextmanager
def one_datacenter_with_replica() -> Iterator[SandboxDescription]:
    """A sandbox of its own: dc1's server and its GTID replica, and a ZooKeeper."""
    directory = Path(tempfile.mkdtemp(prefix="drc-fo-"))
    box = Sandbox(directory)
    try:
        description = box.up(datacenters=1, replica=True)
    except SandboxError as exc:
        box.down()
        pytest.fail(f"sandbox with a replica did not start: {exc}", pytrace=False)
    try:
        yield description
    except BaseException:
        print(log_tails(description))
        raise
    finally:
        box.down()
        shutil.rmtree(directory, ignore_errors=True)


def caught_up(replica: ServerInfo, primary: ServerInfo) -> None:
    [(pos,)] = sql(primary, "SELECT @@gtid_binlog_pos")
    [(waited,)] = sql(replica, f"SELECT MASTER_GTID_WAIT('{pos}', 60)")
    assert waited == 0, f"replica did not reach {pos}"


class Writer:
    """Single-row insert transactions into whichever server is the primary, until stopped;
    ``pause``/``resume`` bracket a planned switchover. Ids ``first``, ``first + step``, ..."""

    def __init__(
        self, primary: ServerInfo, table: str = "fo_db.t", first: int = 1, step: int = 1
    ) -> None:
        self.primary = primary
        self.table = table
        self.first = first
        self.step = step
        self.written: list[int] = []
        self.running = threading.Event()
        self.running.set()
        self.idle = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_id = self.first
        while not self.stop.is_set():
            if not self.running.is_set():
                self.idle.set()
                self.running.wait(0.1)
                continue
            self.idle.clear()
            sql(self.primary, f"INSERT INTO {self.table} VALUES ({next_id}, 'v{next_id}')")
            self.written.append(next_id)
            next_id += self.step
            time.sleep(0.002)

    def pause(self) -> None:
        self.running.clear()
        self.idle.wait(30)

    def resume_on(self, primary: ServerInfo) -> None:
        self.primary = primary
        self.running.set()
