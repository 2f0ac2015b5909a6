"""One sandbox RabbitMQ broker (Debian's ``rabbitmq-server``), started without the system service.

Everything the broker and Erlang would read from or write to ``/etc``, ``/var`` or ``$HOME`` is
pointed into ``base`` by environment variables, and every port is a free loopback port, so any
number of sandboxes (parallel test sessions) run side by side::

    base/rabbitmq.conf     the AMQP listener (127.0.0.1:amqp_port), guest allowed (loopback only)
    base/mnesia/           the node's data (queues, persistent messages); kept across restarts
    base/log/              node.log; base/rabbitmq.log holds stdout/stderr of the start script
    base/.erlang.cookie    written by Erlang at first start (HOME is base)
    base/rabbitmq.json     the running broker's RabbitInfo (``drc sandbox rabbitmq``)

Traps this avoids: the node registers with epmd, which listens on 4369 and outlives the node
when Erlang starts it; here epmd is started first, by us, on a free port (``ERL_EPMD_PORT``
tells the node and any ``rabbitmqctl`` where it is) and stopped with the broker. The start
script (``/usr/lib/rabbitmq/bin/rabbitmq-server``) runs beam.smp as a child and forwards
SIGTERM to it, so a clean stop signals the script; ``kill`` (the kill -9 of fault tests) sends
SIGKILL to the whole process group (script, beam.smp, erl_child_setup, inet_gethost), which
``start_detached`` made ours alone. Readiness is the AMQP handshake answering (the listener
opens last in the boot), not ``rabbitmqctl await_startup``, which starts another Erlang VM.
Start takes ~5 s on an idle 2-core machine and 10-20 s on a loaded one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from drc.core.errors import SandboxError
from drc.sandbox.procs import free_port, pid_alive, start_detached, stop_pid, tail, wait_for

SERVER_SCRIPT = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
EPMD = "epmd"
START_TIMEOUT_S = 120.0
DESCRIPTION = "rabbitmq.json"
_AMQP_HEADER = b"AMQP\x00\x00\x09\x01"
_FRAME_METHOD = 1  # the broker's first answer is a METHOD frame (connection.start)


@dataclass(frozen=True)
class RabbitInfo:
    """A running sandbox broker: its ports, node name, processes and files."""

    base: str
    amqp_port: int
    dist_port: int
    epmd_port: int
    nodename: str
    pid: int  # the start script's, leader of the broker's process group
    epmd_pid: int

    @property
    def amqp_url(self) -> str:
        # guest/guest is RabbitMQ's default user, allowed here because the broker is loopback-only.
        return f"amqp://guest:guest@127.0.0.1:{self.amqp_port}/%2F"

    @property
    def marker(self) -> str:
        return self.base

    @property
    def log(self) -> Path:
        return Path(self.base) / "rabbitmq.log"


def start(base: Path, known: RabbitInfo | None = None) -> RabbitInfo:
    """Start a broker with its data in ``base``; ``known`` restarts a stopped one on its ports
    with its data (the node name is part of the data's identity, so it is kept too)."""
    if not SERVER_SCRIPT.exists():
        raise SandboxError(f"{SERVER_SCRIPT} missing; run `make setup` to install rabbitmq-server")
    base.mkdir(parents=True, exist_ok=True)
    if known is None:
        ports = (free_port(), free_port(), free_port())
        nodename = f"drc-{uuid.uuid4().hex[:10]}@localhost"
    else:
        ports = (known.amqp_port, known.dist_port, known.epmd_port)
        nodename = known.nodename
    amqp_port, dist_port, epmd_port = ports
    (base / "rabbitmq.conf").write_text(
        f"listeners.tcp.1 = 127.0.0.1:{amqp_port}\n"
        "loopback_users = none\n"
        # The default alarm (50 MB free) would block publishers on a nearly full test disk.
        "disk_free_limit.absolute = 1MB\n"
    )
    (base / "enabled_plugins").write_text("[].\n")
    env = _environment(base, amqp_port, dist_port, epmd_port, nodename)
    if known is not None and pid_alive(known.epmd_pid, str(epmd_port)):
        epmd_pid = known.epmd_pid  # a killed node's epmd forgot it when its connection closed
    else:
        epmd_pid = start_detached(
            [EPMD, "-port", str(epmd_port), "-address", "127.0.0.1"], base / "epmd.log", env=env
        )
    # The script passes its arguments to erl: a user flag naming base marks both processes as
    # ours (pid_alive's marker) and erl ignores it.
    argv = [str(SERVER_SCRIPT), "-drc_sandbox", str(base)]
    pid = start_detached(argv, base / "rabbitmq.log", cwd=base, env=env)
    info = RabbitInfo(str(base), amqp_port, dist_port, epmd_port, nodename, pid, epmd_pid)

    def ready() -> bool:
        if not pid_alive(pid):
            raise SandboxError(
                f"RabbitMQ in {base} exited during startup; its log ends:\n{tail(info.log)}"
            )
        return answers(amqp_port)

    try:
        if not wait_for(ready, START_TIMEOUT_S, interval=0.2):
            raise SandboxError(
                f"RabbitMQ in {base} did not answer within {START_TIMEOUT_S:.0f}s; its log "
                f"ends:\n{tail(info.log)}"
            )
    except BaseException:
        kill(info)  # nothing of a failed start is left running, its epmd included
        stop_pid(epmd_pid, str(epmd_port), 10.0)
        raise
    return info


def _environment(
    base: Path, amqp_port: int, dist_port: int, epmd_port: int, nodename: str
) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env.update(
        HOME=str(base),  # the Erlang cookie
        ERL_EPMD_PORT=str(epmd_port),
        RABBITMQ_NODENAME=nodename,
        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
        RABBITMQ_NODE_PORT=str(amqp_port),
        RABBITMQ_DIST_PORT=str(dist_port),
        RABBITMQ_CONF_ENV_FILE=str(base / "rabbitmq-env.conf"),  # absent: not /etc's
        RABBITMQ_CONFIG_FILE=str(base / "rabbitmq.conf"),
        RABBITMQ_ADVANCED_CONFIG_FILE=str(base / "advanced.config"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(base / "enabled_plugins"),
        RABBITMQ_FEATURE_FLAGS_FILE=str(base / "feature_flags"),
        RABBITMQ_PLUGINS_EXPAND_DIR=str(base / "plugins-expand"),
        RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
        RABBITMQ_LOG_BASE=str(base / "log"),
        RABBITMQ_LOGS=str(base / "log" / "node.log"),
        RABBITMQ_PID_FILE=str(base / "rabbitmq.pid"),
        # The distribution port on loopback too (it listens on 0.0.0.0 otherwise).
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
    )
    return env


def answers(port: int, timeout: float = 2.0) -> bool:
    """True once the broker answers the AMQP 0-9-1 protocol header with connection.start."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(_AMQP_HEADER)
            first = sock.recv(1)
    except OSError:
        return False
    return first == bytes([_FRAME_METHOD])


def stop(info: RabbitInfo, timeout: float = 60.0) -> None:
    """Stop the broker cleanly (SIGTERM to its start script), then its epmd."""
    if pid_alive(info.pid, info.marker):
        stop_pid(info.pid, info.marker, timeout)
        _kill_group(info.pid)  # helpers the node leaves behind (inet_gethost) go with it
    stop_pid(info.epmd_pid, str(info.epmd_port), 10.0)


def kill(info: RabbitInfo) -> None:
    """SIGKILL the broker's whole process group, as a crash would. Its epmd keeps running:
    ``start(Path(info.base), info)`` brings the broker back with its data and ports."""
    if pid_alive(info.pid, info.marker):
        _kill_group(info.pid)
    if not wait_for(lambda: not pid_alive(info.pid, info.marker), 10.0):
        raise SandboxError(f"RabbitMQ process {info.pid} did not exit after SIGKILL")


def save(info: RabbitInfo) -> None:
    (Path(info.base) / DESCRIPTION).write_text(json.dumps(dataclasses.asdict(info)) + "\n")


def load(base: Path) -> RabbitInfo | None:
    """The broker last started in ``base`` by ``drc sandbox rabbitmq start``, if any."""
    try:
        return RabbitInfo(**json.loads((base / DESCRIPTION).read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise SandboxError(f"{base / DESCRIPTION} is not a broker description: {exc}") from exc


def running(info: RabbitInfo) -> bool:
    return pid_alive(info.pid, info.marker)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)  # start_detached made pid its session's (and group's) leader
    except (ProcessLookupError, PermissionError):
        pass
