"""Replicator groups in the sandbox: N ``drc replicator run`` members per datacenter.

Each member gets ``DIR/dcN/rK/`` with its config (``drc.toml``), password file, buffer and log,
a free API port, and ``[group]`` pointing at the sandbox ZooKeeper with a short session timeout,
so the failover tests run fast. Members are started detached; their PIDs are recorded in
sandbox.json and ``drc sandbox down`` stops them with the servers.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from drc.sandbox.procs import free_port, start_detached

# The sandbox ZooKeeper's tick is 500 ms: 2 s is four ticks, well inside its 1-10 s window.
SESSION_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class MemberInfo:
    datacenter: str
    member_id: str
    url: str
    port: int
    pid: int
    base_dir: str
    config: str
    log: str

    @property
    def marker(self) -> str:
        return self.config

    @property
    def buffer_dir(self) -> str:
        return f"{self.base_dir}/buffer"


def member_config(
    base: Path,
    *,
    datacenter: str,
    member_id: str,
    source_host: str,
    source_port: int,
    user: str,
    password: str,
    zookeeper: str,
    port: int,
    session_timeout_s: float = SESSION_TIMEOUT_S,
    start_from: str = "current",
    extra: str = "",
    servers: tuple[str, ...] = (),
) -> Path:
    """Write a member's config (and its password file) under ``base``; returns its path.
    ``servers``: the source's servers ("host:port", a primary and its replicas) instead of
    ``source_host``/``source_port``; ``extra``: more TOML appended (its own tables)."""
    base.mkdir(parents=True, exist_ok=True)
    secret = base / "password"
    secret.write_text(password)
    secret.chmod(0o600)
    config = base / "drc.toml"
    q = json.dumps  # a JSON string is a valid TOML basic string, escapes included
    where = (
        f"servers = {q(list(servers))}"
        if servers
        else f"host = {q(source_host)}\nport = {source_port}"
    )
    config.write_text(
        f"""[datacenter]
name = {q(datacenter)}

[source]
{where}
user = {q(user)}
password_file = {q(str(secret))}
replica_server_id = {_replica_server_id(datacenter, member_id)}

[replicator]
buffer_dir = {q(str(base / "buffer"))}
start_from = {q(start_from)}
commit_max_ms = 20

[api]
port = {port}

[group]
zookeeper = {q(zookeeper)}
path = "/drc-sandbox"
member_id = {q(member_id)}
session_timeout_s = {session_timeout_s}
advertise_url = {q(f"http://127.0.0.1:{port}")}
connect_retry_s = 0.5
{extra}"""
    )
    return config


def _replica_server_id(datacenter: str, member_id: str) -> int:
    # Unique per member: two binlog readers with one server_id would disconnect each other.
    digits = "".join(ch for ch in datacenter + member_id if ch.isdigit()) or "0"
    return 3_000_000 + int(digits[-6:])


def start_member(config: Path, log: Path) -> int:
    """Start ``drc replicator run`` for ``config`` detached; its PID."""
    argv = [sys.executable, "-m", "drc.cli", "replicator", "run", "--config", str(config)]
    return start_detached([*argv, "--progress-every", "0"], log)


def start_members(
    dir_: Path,
    *,
    datacenter: str,
    count: int,
    source_host: str,
    source_port: int,
    user: str,
    password: str,
    zookeeper: str,
) -> list[MemberInfo]:
    members = []
    for number in range(1, count + 1):
        member_id = f"r{number}"
        base = dir_ / datacenter / member_id
        port = free_port()
        config = member_config(
            base, datacenter=datacenter, member_id=member_id, source_host=source_host,
            source_port=source_port, user=user, password=password, zookeeper=zookeeper,
            port=port,
        )  # fmt: skip
        log = base / "replicator.log"
        pid = start_member(config, log)
        members.append(
            MemberInfo(
                datacenter,
                member_id,
                f"http://127.0.0.1:{port}",
                port,
                pid,
                str(base),
                str(config),
                str(log),
            )  # fmt: skip
        )
    return members
