"""One sandbox MariaDB server: bootstrap a data dir, start it with DRC's binlog settings, and
create the DRC user. Flags and traps are those measured in shared/ENVIRONMENT.md."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql

from drc.core.errors import SandboxError
from drc.sandbox.certs import CertFiles
from drc.sandbox.procs import pid_alive, start_detached, tail, wait_for

START_TIMEOUT_S = 60.0
_ER_BAD_SLAVE = 1200  # "The server is not configured as slave"


def _binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if path is None:
        raise SandboxError(f"{name} not found; run `make setup` to install mariadb-server")
    return path


def bootstrap(base: Path) -> None:
    """Create an empty data dir under ``base/data`` unless one is already there."""
    datadir = base / "data"
    if (datadir / "mysql").is_dir():
        return
    base.mkdir(parents=True, exist_ok=True)
    (base / "tmp").mkdir(exist_ok=True)
    argv = [
        _binary("mariadb-install-db"),
        "--no-defaults",
        f"--datadir={datadir}",
        # Each server's own temp dir: servers sharing /tmp collide on temp table file names.
        f"--tmpdir={base / 'tmp'}",
        "--user=root",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
    ]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SandboxError(
            f"mariadb-install-db failed for {datadir} (exit {result.returncode}):\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )


def server_argv(
    base: Path,
    port: int,
    server_id: int,
    tls: CertFiles | None = None,
    domain_id: int | None = None,
    read_only: bool = False,
) -> list[str]:
    """``--no-defaults`` keeps Debian's my.cnf (socket in /run, latin1) out of the sandbox.
    With ``tls`` the server offers TLS with that certificate (clients may still use plaintext).
    ``domain_id`` defaults to the server id; a replica shares its primary's domain."""
    return [
        _binary("mariadbd"),
        "--no-defaults",
        "--user=root",
        f"--datadir={base / 'data'}",
        f"--tmpdir={base / 'tmp'}",
        f"--socket={base / 'mysqld.sock'}",
        f"--pid-file={base / 'mysqld.pid'}",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        "--skip-name-resolve",
        f"--log-error={base / 'error.log'}",
        f"--server-id={server_id}",
        f"--gtid-domain-id={server_id if domain_id is None else domain_id}",
        *(["--read-only"] if read_only else []),
        "--log-bin=mysql-bin",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--binlog-row-metadata=FULL",
        # Apply users have no SUPER (it bypasses read_only), yet create DRC's conflict triggers.
        "--log-bin-trust-function-creators=1",
        "--log-slave-updates",
        "--skip-slave-start",
        "--character-set-server=utf8mb4",
        "--collation-server=utf8mb4_general_ci",
        "--max-allowed-packet=64M",
        "--innodb-log-file-size=16M",
        "--innodb-buffer-pool-size=128M",
        *_tls_argv(tls),
    ]


def _tls_argv(tls: CertFiles | None) -> list[str]:
    if tls is None:
        return []
    return [f"--ssl-ca={tls.ca}", f"--ssl-cert={tls.cert}", f"--ssl-key={tls.key}"]


def start(base: Path, argv: list[str]) -> int:
    """Start the server of ``base`` (``argv``: :func:`server_argv`'s) and return its PID once it
    accepts connections on its socket."""
    (base / "tmp").mkdir(exist_ok=True)
    pid = start_detached(argv, base / "stdout.log")
    socket_path = base / "mysqld.sock"

    def ready() -> bool:
        if not pid_alive(pid):
            raise SandboxError(
                f"mariadbd for {base} exited during startup; its error log ends:\n"
                f"{tail(base / 'error.log')}"
            )
        return _can_connect(socket_path)

    if not wait_for(ready, START_TIMEOUT_S, interval=0.1):
        raise SandboxError(
            f"mariadbd for {base} did not answer within {START_TIMEOUT_S:.0f}s; "
            f"its error log ends:\n{tail(base / 'error.log')}"
        )
    return pid


def _can_connect(socket_path: Path) -> bool:
    try:
        pymysql.connect(unix_socket=str(socket_path), user="root", connect_timeout=2).close()
    except pymysql.MySQLError:
        return False
    return True


def ensure_user(socket_path: Path, user: str, password: str) -> None:
    """Create (or reset) the sandbox's DRC user with every privilege, on loopback only."""
    conn = pymysql.connect(unix_socket=str(socket_path), user="root", autocommit=True)
    try:
        with conn.cursor() as cur:
            # Keep user management out of the binlog: it is not data DRC should replicate.
            cur.execute("SET SESSION sql_log_bin = 0")
            for host in ("127.0.0.1", "localhost"):
                cur.execute(
                    "CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (user, host, password)
                )
                cur.execute("ALTER USER %s@%s IDENTIFIED BY %s", (user, host, password))
                cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@%s WITH GRANT OPTION", (user, host))
    finally:
        conn.close()


def identify(host: str, port: int, user: str, password: str) -> str:
    """One line naming the server and its replication settings, or why it did not answer."""
    query = (
        "SELECT @@version, @@server_id, @@gtid_domain_id, @@binlog_format, "
        "@@binlog_row_image, @@binlog_row_metadata, @@character_set_server"
    )
    try:
        conn = pymysql.connect(
            host=host, port=port, user=user, password=password, connect_timeout=3
        )
        try:
            with conn.cursor() as cur:
                cur.execute(query)
                row = cur.fetchone()
        finally:
            conn.close()
    except pymysql.MySQLError as exc:
        return f"no answer ({exc.args[-1] if exc.args else exc})"
    assert row is not None
    version, server_id, domain, fmt, image, metadata, charset = row
    return (
        f"MariaDB {version} server_id={server_id} gtid_domain_id={domain} "
        f"binlog={fmt}/{image}/{metadata} charset={charset}"
    )


def replicate_from(socket_path: Path, primary_port: int, user: str, password: str) -> None:
    """Make the server at ``socket_path`` a GTID replica of the loopback server on
    ``primary_port`` (from its first binlog on, so it holds the same GTIDs) and start it."""
    with _as_root(socket_path) as cur:
        cur.execute("STOP SLAVE")
        cur.execute(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %s, "
            "MASTER_USER = %s, MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos",
            (primary_port, user, password),
        )
        cur.execute("START SLAVE")


def start_replication(socket_path: Path) -> None:
    """START SLAVE on a restarted replica (the sandbox runs servers with --skip-slave-start)."""
    with _as_root(socket_path) as cur:
        try:
            cur.execute("START SLAVE")
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != _ER_BAD_SLAVE:  # promoted since: nothing to start
                raise


def promote(socket_path: Path) -> None:
    """Planned promotion of a replica: stop replicating, forget the primary, accept writes."""
    with _as_root(socket_path) as cur:
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")
        cur.execute("SET GLOBAL read_only = 0")


@contextmanager
def _as_root(socket_path: Path) -> Iterator[Any]:
    conn = pymysql.connect(unix_socket=str(socket_path), user="root", autocommit=True)
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()
