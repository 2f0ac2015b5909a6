"""Process plumbing for the sandbox: free ports, detached starts, and stopping exactly our PIDs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from drc.core.errors import SandboxError


def free_port() -> int:
    """A loopback port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_detached(
    argv: Sequence[str],
    log_path: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start ``argv`` in its own session so it outlives the CLI and ignores the terminal's ^C."""
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
                env=None if env is None else dict(env),
            )
        except OSError as exc:
            raise SandboxError(
                f"cannot start {argv[0]}: {exc}; run `make setup` to install the servers"
            ) from exc
    return proc.pid


def _reap(pid: int) -> None:
    # A child of this very process stays a zombie (and "alive" to kill(0)) until waited for.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def pid_alive(pid: int, marker: str | None = None) -> bool:
    """True if ``pid`` runs and, when ``marker`` is given, its command line contains it.

    The marker (the server's data dir or config path) guards against a recycled PID: we only ever
    signal processes that are provably the ones we started.
    """
    if pid <= 0:
        return False
    _reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    if state in ("Z", "X"):
        return False
    return marker is None or marker in cmdline


def stop_pid(pid: int, marker: str, timeout: float = 30.0) -> None:
    """SIGTERM ``pid`` (only if it is ours), wait for it, SIGKILL after ``timeout``."""
    if not pid_alive(pid, marker):
        return
    os.kill(pid, signal.SIGTERM)
    if wait_for(lambda: not pid_alive(pid, marker), timeout):
        return
    os.kill(pid, signal.SIGKILL)
    if not wait_for(lambda: not pid_alive(pid, marker), 10.0):
        raise SandboxError(f"process {pid} did not exit after SIGKILL; check it with `ps {pid}`")


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout`` seconds (monotonic) have passed."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file, or a note that it is missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} not found)"
    return "\n".join(text.splitlines()[-lines:])
