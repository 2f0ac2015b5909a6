"""Config text for tests: the smallest valid datacenter config, sections that reach a sandbox
server, [conflicts] rules, and a helper that writes config text to a file; the smallest config
object with channels."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from drc.config import DrcConfig
from drc.sandbox.sandbox import ServerInfo

BASE = """
[datacenter]
name = "dc1"
[source]
user = "drc"
password = "s3cret-value"
[replicator]
buffer_dir = "/tmp/x"
"""


def write_config(tmp_path: Path, text: str) -> Path:
    """``text`` written to ``tmp_path``/dc.toml; its path."""
    path = tmp_path / "dc.toml"
    path.write_text(text)
    return path


def server_toml(
    section: str,
    server: ServerInfo,
    *,
    password_file: Path | None = None,
    port: int | None = None,
    replica_server_id: int | None = None,
) -> str:
    """The ``[section]`` (e.g. source, channels.origin_db) that reaches ``server`` as the
    sandbox's DRC user: host, port (``port``: another one, e.g. a proxy's), user, and the password
    inline or in ``password_file``. No newline at the end."""
    password = f'password_file = "{password_file}"' if password_file else None
    lines = [
        f"[{section}]",
        f'host = "{server.host}"',
        f"port = {port or server.port}",
        f'user = "{server.user}"',
        password or f'password = "{server.password}"',
    ]
    if replica_server_id is not None:
        lines.append(f"replica_server_id = {replica_server_id}")
    return "\n".join(lines)


def conflict_rule(
    table: str,
    policy: str,
    column: str | None = None,
    resolver: str | None = None,
    delta_columns: Sequence[str] = (),
) -> str:
    """One [[conflicts.tables]] entry."""
    keys = {"table": table, "policy": policy, "resolver": resolver, "column": column}
    counters = f"delta_columns = {json.dumps(list(delta_columns))}\n" if delta_columns else ""
    return (
        "[[conflicts.tables]]\n"
        + "".join(f'{key} = "{value}"\n' for key, value in keys.items() if value is not None)
        + counters
    )


def conflicts_toml(*rules: str, priority: Sequence[str] = ("dc1", "dc2")) -> str:
    """A [conflicts] section: the datacenters' ``priority``, then ``rules`` (conflict_rule)."""
    return f"\n[conflicts]\npriority = {json.dumps(list(priority))}\n" + "".join(
        f"\n{rule}" for rule in rules
    )


def with_channels(*channels: dict[str, Any]) -> DrcConfig:
    """dc1's smallest config with one channel per entry of ``channels`` (its keys over the
    defaults: named c0, c1, ..., from dc2, dc3, ...)."""
    return DrcConfig.model_validate({
        "datacenter": {"name": "dc1"},
        "source": {"user": "drc", "password": "pw"},
        "replicator": {"buffer_dir": "/tmp/x"},
        "channels": [{"name": f"c{i}", "origin": f"dc{i + 2}", "remote": ["http://dc2:8641"],
                      **keys} for i, keys in enumerate(channels)],
    })  # fmt: skip
