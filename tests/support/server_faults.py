"""Faults of a sandbox MariaDB server itself: kill -9 and a restart on the same data dir (crash
recovery included), as a host's supervisor would restart it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from drc.sandbox.procs import pid_alive, wait_for
from drc.sandbox.sandbox import Sandbox, ServerInfo
from tests.support.servers import execute, master_position, query


def _sandbox(server: ServerInfo) -> Sandbox:
    return Sandbox(Path(server.base_dir).parent)


def current_pid(server: ServerInfo) -> int:
    """The server's PID now (a restart records a new one in sandbox.json)."""
    description = _sandbox(server).describe()
    assert description is not None
    return description.server(server.datacenter).pid


def kill_9(server: ServerInfo) -> None:
    """SIGKILL the server (no shutdown, no flush beyond what it already wrote) and wait until
    it is gone."""
    pid = current_pid(server)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(pid, server.marker), 30, interval=0.05)


def restart(server: ServerInfo) -> None:
    """Start the killed (or stopped) server again on its data dir and port; returns once it
    accepts connections (after InnoDB's crash recovery). Every other sandbox process is kept."""
    box = _sandbox(server)
    description = box.describe()
    assert description is not None
    box.up(datacenters=len(description.servers))


def purge_all_but_the_newest(server: ServerInfo) -> str:
    """PURGE BINARY LOGS up to the current file, again until it took (a file a replica's dump
    thread still reads is kept: the server-side thread of a replicator just stopped may
    linger); returns the one binlog left."""

    def purged() -> bool:
        newest = master_position(server)[0]
        execute(server, f"PURGE BINARY LOGS TO '{newest}'")
        return [row[0] for row in query(server, "SHOW BINARY LOGS")] == [newest]

    assert wait_for(purged, 60, interval=0.5), query(server, "SHOW BINARY LOGS")
    return str(master_position(server)[0])
