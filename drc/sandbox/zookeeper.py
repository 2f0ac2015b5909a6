"""One sandbox ZooKeeper server, started without zkServer.sh (which hard-codes /etc and /var
paths and writes no log). Readiness is the ``srvr`` four-letter command answering."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

from drc.core.errors import SandboxError
from drc.sandbox.procs import pid_alive, start_detached, tail, wait_for

ZK_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
START_TIMEOUT_S = 60.0
# A small tick keeps the minimum session timeout (2 ticks) low, so failover tests run fast.
TICK_MS = 500


def write_config(base: Path, port: int) -> Path:
    (base / "data").mkdir(parents=True, exist_ok=True)
    cfg = base / "zoo.cfg"
    cfg.write_text(
        f"tickTime={TICK_MS}\n"
        "initLimit=10\n"
        "syncLimit=5\n"
        f"dataDir={base / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        # The admin server would otherwise take port 8080.
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
    )
    return cfg


def start(base: Path, port: int) -> int:
    """Start ZooKeeper on ``port`` and return its PID once ``srvr`` answers."""
    java = shutil.which("java")
    if java is None or not Path(ZK_CLASSPATH.split(":")[0]).exists():
        raise SandboxError("java or ZooKeeper jars missing; run `make setup` to install zookeeper")
    cfg = write_config(base, port)
    argv = [
        java,
        "-Xmx256m",
        f"-Dzookeeper.log.dir={base}",
        "-cp",
        ZK_CLASSPATH,
        "org.apache.zookeeper.server.ZooKeeperServerMain",
        str(cfg),
    ]
    pid = start_detached(argv, base / "zookeeper.log")

    def ready() -> bool:
        if not pid_alive(pid):
            raise SandboxError(
                f"ZooKeeper in {base} exited during startup; its log ends:\n"
                f"{tail(base / 'zookeeper.log')}"
            )
        return four_letter(port, "srvr").startswith("Zookeeper version")

    if not wait_for(ready, START_TIMEOUT_S, interval=0.1):
        raise SandboxError(
            f"ZooKeeper in {base} did not answer within {START_TIMEOUT_S:.0f}s; its log ends:\n"
            f"{tail(base / 'zookeeper.log')}"
        )
    return pid


def four_letter(port: int, command: str, timeout: float = 2.0) -> str:
    """Send a four-letter command; empty text if the server does not answer."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(command.encode())
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode(errors="replace")
