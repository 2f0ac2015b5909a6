"""The heartbeat of a replicator reading a list of source servers (and no [target]) goes to the
writable one, and follows a switchover: it must land in the binlog capture reads."""

from __future__ import annotations

from pathlib import Path

from drc.config import load_config
from drc.runtime import build_heartbeat
from drc.sandbox.sandbox import ServerInfo
from tests.support.servers import connect

DATACENTER = "hb_servers_test"


def _config(tmp_path: Path, first: ServerInfo, second: ServerInfo) -> Path:
    path = tmp_path / "dc.toml"
    path.write_text(
        f'[datacenter]\nname = "{DATACENTER}"\n'
        f'[source]\nuser = "{first.user}"\npassword = "{first.password}"\n'
        f'servers = ["{first.host}:{first.port}", "{second.host}:{second.port}"]\n'
        f'[replicator]\nbuffer_dir = "{tmp_path / "buf"}"\nheartbeat_interval_s = 1.0\n'
    )
    return path


def _beat_on(server: ServerInfo) -> int | None:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables"
            " WHERE table_schema = 'drc' AND table_name = 'heartbeat'"
        )
        if not cur.fetchone()[0]:
            return None
        cur.execute("SELECT beat_ms FROM drc.heartbeat WHERE datacenter = %s", (DATACENTER,))
        row = cur.fetchone()
    return None if row is None else int(row[0])


def _set_read_only(server: ServerInfo, on: bool) -> None:
    with connect(server) as conn, conn.cursor() as cur:
        cur.execute(f"SET GLOBAL read_only = {int(on)}")


def _forget(*servers: ServerInfo) -> None:
    for server in servers:
        with connect(server) as conn, conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("DELETE FROM drc.heartbeat WHERE datacenter = %s", (DATACENTER,))


def test_the_heartbeat_follows_the_writable_server(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    writer = build_heartbeat(load_config(_config(tmp_path, dc1, dc2)))
    assert writer is not None
    _set_read_only(dc1, True)  # dc1 is the old primary: listed first, but read-only
    try:
        writer.beat()
        assert writer.stats.last_error is None
        assert _beat_on(dc2) is not None
        assert _beat_on(dc1) is None

        _set_read_only(dc2, True)  # the switchover back: dc1 writable again, dc2 read-only
        _set_read_only(dc1, False)
        writer.beat()
        assert writer.stats.last_error is None
        assert _beat_on(dc1) is not None

        _set_read_only(dc1, True)  # nobody writable: counted, not raised, nothing written
        before = (_beat_on(dc1), _beat_on(dc2))
        writer.beat()
        assert writer.stats.failures == 1 and "no writable server" in str(writer.stats.last_error)
        assert dc1.password not in str(writer.stats.last_error)
        assert (_beat_on(dc1), _beat_on(dc2)) == before
    finally:
        writer._close()
        _set_read_only(dc1, False)
        _set_read_only(dc2, False)
        _forget(dc1, dc2)
