"""The snapshot tests' set-up: drc tables cleared, a writer thread, marks that show a side caught
up, and `drc run` configs of a two-way pair that a snapshot joins tables to."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Self

from drc.sandbox.demo import write_configs
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import apply_user
from tests.support.config import server_toml
from tests.support.servers import drop_everywhere, execute, query


def prepare(dc1: ServerInfo, dc2: ServerInfo, *schemas: str) -> None:
    for schema in schemas:
        drop_everywhere(schema, dc1, dc2)
    apply_user(dc2)
    for server in (dc1, dc2):
        execute(server, "CREATE DATABASE IF NOT EXISTS drc")
        for table in ("checkpoint", "catchup_lease", "snapshot_run", "snapshot_chunk",
                      "snapshot_tables", "conflicts"):  # fmt: skip
            execute(server, f"DROP TABLE IF EXISTS drc.{table}")


class Background:
    """A writer thread (``_write``, until ``stop`` is set) as a context manager; what stopped
    it is raised on exit."""

    def __init__(self, server: ServerInfo) -> None:
        self.server = server
        self.stop = threading.Event()
        self.done = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # reported by __exit__
            self.error = exc

    def _write(self) -> None:
        raise NotImplementedError


def mark(server: ServerInfo, schema: str) -> str:
    token = f"z{uuid.uuid4().hex[:12]}"
    execute(server, f"INSERT INTO {schema}.skey VALUES ('{token}', 0)")
    return token


def seen(server: ServerInfo, schema: str, token: str) -> bool:
    try:
        return bool(query(server, f"SELECT 1 FROM {schema}.skey WHERE code = %s", (token,)))
    except Exception:  # not there yet
        return False


def two_way_configs(
    sandbox: SandboxDescription,
    directory: Path,
    kept: list[str],
    joined: list[str],
    extra: str = "",
) -> dict[str, Path]:
    """`drc run` configs of both datacenters, each capturing ``kept`` and ``joined`` and
    applying them from the other; only dc2's channel from dc1 starts without ``joined`` (a
    snapshot joins them) and reads dc1's database ([channels.origin_db]). ``extra``: more TOML
    for both (a [conflicts] section)."""
    both = [*kept, *joined]
    configs = write_configs(sandbox, directory, tables=both, no_primary_key="match_whole_row",
                            extra=extra)  # fmt: skip
    dc1 = sandbox.server("dc1")
    text = configs["dc2"].read_text()
    channel = text.index('name = "from-dc1"')
    listed = f"tables = {json.dumps(both)}"
    at = text.index(listed, channel)
    text = text[:at] + f"tables = {json.dumps(kept)}" + text[at + len(listed) :]
    configs["dc2"].write_text(
        text
        + f"""
{server_toml("channels.origin_db", dc1, password_file=directory / "dc1.password")}
"""
    )
    return configs
