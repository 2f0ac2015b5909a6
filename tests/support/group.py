"""A replicator group of one sandbox datacenter for tests: members as subprocesses the test can
kill -9, SIGSTOP and restart, and the checks a user would make on their buffers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from drc.core.errors import BufferStateError
from drc.core.scn import SCN
from drc.eventbuffer import EventBuffer
from drc.sandbox.group import member_config
from drc.sandbox.procs import free_port
from drc.sandbox.sandbox import SandboxDescription, ServerInfo


@dataclass
class Member:
    member_id: str
    base: Path
    config: Path
    url: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def buffer_dir(self) -> Path:
        return self.base / "buffer"

    def start(self) -> None:
        argv = [sys.executable, "-m", "drc.cli", "replicator", "run", "--config", str(self.config)]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [*argv, "--progress-every", "0"], stdout=out, stderr=subprocess.STDOUT
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def pause(self) -> float:
        """SIGSTOP, returning once every thread of the process is stopped (the signal is
        delivered asynchronously): the monotonic time it was sent."""
        assert self.proc is not None
        sent = time.monotonic()
        self.signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.proc.pid}/task")
        deadline = sent + 10
        while time.monotonic() < deadline:
            states = [_state(task) for task in tasks.iterdir()]
            if all(state in ("T", "t", None) for state in states):
                return sent
            time.sleep(0.001)
        raise AssertionError(f"{self.member_id} did not stop: {states}")

    def kill(self) -> None:
        if self.alive():
            self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                assert self.proc is not None
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def status(self, timeout: float = 2.0) -> dict[str, Any] | None:
        try:
            response = httpx.get(self.url + "/v1/status", timeout=timeout)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None


@dataclass
class Group:
    datacenter: str
    server: ServerInfo
    zookeeper: str
    dir: Path
    session_timeout_s: float
    members: list[Member] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        sandbox: SandboxDescription,
        server: ServerInfo,
        directory: Path,
        count: int = 3,
        session_timeout_s: float = 2.0,
        name: str = "grp",
        servers: tuple[str, ...] = (),
        extra: str = "",
        first: int = 1,
    ) -> Group:
        """``count`` members r{first}.. reading ``server`` (or the source ``servers``,
        "host:port" each), ``extra`` TOML added to each config."""
        group = cls(name, server, sandbox.zookeeper.connect, directory, session_timeout_s)
        for number in range(first, first + count):
            member_id = f"r{number}"
            base = directory / member_id
            port = free_port()
            config = member_config(
                base, datacenter=name, member_id=member_id, source_host=server.host,
                source_port=server.port, user=server.user, password=server.password,
                zookeeper=sandbox.zookeeper.connect, port=port,
                session_timeout_s=session_timeout_s, servers=servers, extra=extra,
            )  # fmt: skip
            url = f"http://127.0.0.1:{port}"
            group.members.append(Member(member_id, base, config, url, base / "replicator.log"))
        return group

    def start(self) -> None:
        for member in self.members:
            member.start()

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def restart_dead(self) -> None:
        for member in self.members:
            if not member.alive():
                member.start()

    def roles(self) -> dict[str, str | None]:
        out = {}
        for member in self.members:
            status = member.status() if member.alive() else None
            out[member.member_id] = None if status is None else status["role"]
        return out

    def wait_leader(self, timeout: float, exclude: Member | None = None) -> Member:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leaders = [
                m
                for m in self.members
                if m is not exclude and m.alive() and (m.status() or {}).get("role") == "leader"
            ]
            if len(leaders) == 1:
                return leaders[0]
            time.sleep(0.1)
        raise AssertionError(f"no single leader after {timeout}s: {self.roles()}\n{self.logs()}")

    def wait_roles(self, expected: list[str], timeout: float = 30.0) -> None:
        """Until the live members' roles, sorted, are ``expected``."""
        deadline = time.monotonic() + timeout
        roles = self.roles()
        while sorted(r or "" for r in roles.values()) != expected:
            if time.monotonic() > deadline:
                raise AssertionError(f"roles {roles}, expected {expected}\n{self.logs()}")
            time.sleep(0.2)
            roles = self.roles()

    def wait_started(self, leader: Member, timeout: float = 30.0) -> None:
        """Until the leader has fixed its start position (capture is under way)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if last_scn(leader.buffer_dir) is not None:
                return
            time.sleep(0.1)
        raise AssertionError(f"the leader did not start capture\n{self.logs()}")

    def wait_caught_up(self, target: SCN | None, timeout: float = 90.0) -> None:
        """Until every live member's buffer reaches ``target`` (the source position)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lasts = [last_scn(m.buffer_dir) for m in self.members if m.alive()]
            if target is None or all(
                last is not None
                and (last.log_index, last.log_pos) >= (target.log_index, target.log_pos)
                for last in lasts
            ):
                return
            time.sleep(0.2)
        raise AssertionError(f"members did not reach {target}: {self.roles()}\n{self.logs()}")

    def logs(self, lines: int = 30) -> str:
        parts = []
        for member in self.members:
            text = member.log.read_text(errors="replace") if member.log.exists() else ""
            parts.append(f"--- {member.member_id} ---\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)


def _state(task: Path) -> str | None:
    """A thread's state letter from /proc (None: it has exited)."""
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def last_scn(directory: Path) -> SCN | None:
    try:
        reader = EventBuffer.open_read_only(directory)
    except BufferStateError:
        return None
    try:
        return reader.last_scn
    finally:
        reader.close()


def records(directory: Path) -> list[tuple[SCN, bytes, int, bool]]:
    """Every record of a buffer as (scn, payload, timestamp, more)."""
    reader = EventBuffer.open_read_only(directory)
    try:
        out = []
        after = SCN.ZERO
        while True:
            batch = reader.read_after(after, max_records=5000, max_bytes=64 << 20)
            if not batch:
                return out
            out.extend((r.scn, r.payload, r.timestamp_ms, r.more) for r in batch)
            after = batch[-1].scn
    finally:
        reader.close()


def assert_identical_on_common_range(dirs: list[Path]) -> int:
    """Every pair of buffers holds the same records, SCN for SCN and byte for byte, on the
    range both hold; returns the length of the shortest."""
    stored = [records(d) for d in dirs]
    shortest = min(len(s) for s in stored)
    for found in stored:
        scns = [r[0] for r in found]
        assert scns == sorted(scns), "SCNs in order"
        assert len({(r[0], r[1]) for r in found}) == len(found), "no record twice"
    first = stored[0]
    for other in stored[1:]:
        start = next((i for i, r in enumerate(first) if r[0] == other[0][0]), None) if other else 0
        assert start is not None, "buffers share no SCN"
        common = min(len(first) - start, len(other))
        assert first[start : start + common] == other[:common]
    return shortest
