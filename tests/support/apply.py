"""Helpers for the apply integration tests: the apply user, capture served over the pull API, a
channel running in a thread, two servers' tables compared, `drc run` nodes in process.

The setup of every test: the replicator captures dc1 in this process, the pull API serves its
buffer on a free port, and an apply channel writes into dc2 as a user holding exactly the
privileges drc/apply/channel.py documents (no SUPER, so read_only applies to it).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer
from drc.apply.channel import ApplyChannel
from drc.config_channels import ChannelConfig
from drc.core.tablefilter import TableFilter
from drc.mysql.driver import TargetSettings
from drc.mysql.sql import quote
from drc.replicator.replicator import CaptureOptions
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import Capture, capturing
from tests.support.servers import connect, query

APPLY_USER = "drc_apply"
APPLY_PASSWORD = "apply-secret"
APPLY_GRANTS = (
    "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, INDEX, CREATE VIEW ON *.* TO {u}",
    "GRANT ALL PRIVILEGES ON `drc`.* TO {u}",
    "GRANT TRIGGER ON *.* TO {u}",  # for tables with a conflict timestamp column
)


def apply_user(server: ServerInfo) -> TargetSettings:
    """The documented apply user on ``server`` (created once; kept out of the binlog)."""
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(
            "CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (APPLY_USER, APPLY_PASSWORD)
        )
        for grant in APPLY_GRANTS:
            cur.execute(grant.format(u=f"'{APPLY_USER}'@'%'"))
    conn.close()
    return TargetSettings(server.host, server.port, APPLY_USER, APPLY_PASSWORD)


@contextmanager
def serving(
    server: ServerInfo,
    directory: Path,
    include: list[str],
    start: tuple[str, int],
    buffer: dict[str, Any] | None = None,
    **options: Any,
) -> Iterator[tuple[Capture, str]]:
    """Capture ``server`` from ``start`` and serve the buffer; yields (capture, API URL).
    ``buffer``: EventBuffer.open options (e.g. small segments)."""
    settings = CaptureOptions(
        capture=TableFilter.build(include), start_from=f"{start[0]}:{start[1]}",
        commit_max_ms=10, **options,
    )  # fmt: skip
    with capturing(server, directory, settings, **(buffer or {})) as capture:
        deps = ApiDeps(buffer=capture.buffer, metastore=capture.metastore)
        api = ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True).start()
        try:
            yield capture, api.url
        finally:
            api.stop()


def channel_config(name: str, url: str, tables: list[str], **kw: Any) -> ChannelConfig:
    return ChannelConfig(
        name=name, origin="dc1", remote=(url,), tables=tuple(tables), wait_ms=100,
        max_commit_delay_ms=50, **kw,
    )  # fmt: skip


class Running:
    """An ApplyChannel running in a thread; ``error`` holds what stopped it, if anything."""

    def __init__(self, channel: ApplyChannel) -> None:
        self.channel = channel
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.channel.run(self.stop_event)
        except BaseException as exc:
            self.error = exc

    def __enter__(self) -> Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the channel did not stop"

    @property
    def stats(self) -> Any:
        return self.channel.stats


def tables_of(server: ServerInfo, schema: str) -> list[str]:
    rows = query(server, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                 "ORDER BY TABLE_NAME", (schema,))  # fmt: skip
    return [r[0] for r in rows]


def assert_same(source: ServerInfo, target: ServerInfo, schema: str) -> None:
    """Same tables, same rows (compared one by one), same CHECKSUM TABLE on both sides."""
    names = tables_of(source, schema)
    assert names == tables_of(target, schema), "same tables"
    for name in names:
        table = f"{quote(schema)}.{quote(name)}"
        width = len(query(source, f"SELECT * FROM {table} LIMIT 0", cursor_description=True))
        ordered = f"SELECT * FROM {table} ORDER BY " + ", ".join(str(i + 1) for i in range(width))
        src, dst = query(source, ordered), query(target, ordered)
        assert len(src) == len(dst), f"{table}: {len(src)} rows on the source, {len(dst)} here"
        for a, b in zip(src, dst, strict=True):
            assert a == b, f"{table}: row {a!r} differs from {b!r}"
        assert query(source, f"CHECKSUM TABLE {table}") == query(target, f"CHECKSUM TABLE {table}")


def apply_process_config(
    tmp: Path,
    target: ServerInfo,
    url: str,
    channel: str,
    tables: list[str],
    *,
    local: str = "dc2",
    origin: str = "dc1",
    **options: Any,
) -> Path:
    """A config for ``python -m drc.apply``: one channel from ``origin`` into ``target`` (of
    datacenter ``local``) as the apply user (``options``: more channel keys, e.g.
    ``max_txns_per_commit=50``)."""
    secret = tmp / "apply.password"
    secret.write_text(APPLY_PASSWORD)
    secret.chmod(0o600)
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in options.items())
    config = tmp / f"{local}.toml"
    config.write_text(
        f"""
[datacenter]
name = "{local}"
[source]
host = "{target.host}"
port = {target.port}
user = "unused"
[replicator]
buffer_dir = "{tmp / "unused"}"
[target]
host = "{target.host}"
port = {target.port}
user = "{APPLY_USER}"
password_file = "{secret}"
[[channels]]
name = "{channel}"
origin = "{origin}"
remote = ["{url}"]
tables = {json.dumps(tables)}
wait_ms = 100
{extra}"""
    )
    return config


@contextmanager
def running_nodes(
    configs: dict[str, Path],
    clocks: dict[str, Callable[[], float]] | None = None,
    roles: dict[str, str] | None = None,
) -> Iterator[dict[str, Any]]:
    """Each datacenter's ``drc run`` (drc.node.Node) in this process, stopped and closed on
    exit; yields the nodes by datacenter. ``clocks``: a datacenter's wall clock, when not the
    real one (clock skew); ``roles``: a datacenter's role, when not "all"."""
    from drc.config import load_config
    from drc.node import Node

    stop = threading.Event()
    clocks, roles = clocks or {}, roles or {}
    nodes = {
        dc: Node(load_config(path), roles.get(dc, "all"), wall_clock=clocks.get(dc, time.time))
        for dc, path in configs.items()
    }
    try:
        for node in nodes.values():
            node.start(stop)
        yield nodes
    finally:
        stop.set()
        for node in nodes.values():
            node.close()


class ApplyProcess:
    """``python -m drc.apply --config CONFIG ARGS`` in a child process, its output appended to
    ``log``: started on entry, :meth:`kill` -ed (-9) and :meth:`start` -ed again by a test,
    stopped (SIGTERM) on exit."""

    def __init__(self, config: Path, log: Path, *args: str) -> None:
        self.argv = [sys.executable, "-m", "drc.apply", "--config", str(config), *args]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        """The end of the log, for an assertion's message."""
        return self.log.read_text()[-3000:]

    def __enter__(self) -> ApplyProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def journal_done(target: ServerInfo, channel: str, like: str) -> tuple[str, int]:
    """(scn, seq) of the one DDL ``channel`` journalled done whose statement is LIKE ``like``."""
    rows = query(target, "SELECT scn, seq FROM drc.ddl_journal WHERE channel = %s AND "
                 "statement LIKE %s AND state = 'done'", (channel, like))  # fmt: skip
    assert len(rows) == 1, rows
    return str(rows[0][0]), int(rows[0][1])


def just_before(scn: str) -> str:
    """The position just before ``scn``: where a crash during its DDL leaves the checkpoint."""
    change_id, server_id, index, pos = scn.split(":")
    return f"{change_id}:{server_id}:{index}:{int(pos) - 1}"


def set_checkpoint(cur: Any, channel: str, scn: str, pending: str | None) -> None:
    """Put ``channel``'s checkpoint row at ``scn``, ``pending`` its DDL in progress (as a crash
    leaves it), on the open cursor ``cur``."""
    cur.execute("UPDATE drc.checkpoint SET scn = %s, pending_ddl_scn = %s WHERE channel = %s",
                (scn, pending, channel))  # fmt: skip
