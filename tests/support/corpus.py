"""The shared corpus (shared/corpus: Debezium's MySQL/MariaDB test scripts) and how it is loaded
into a server, as Debezium loads it (tests/integration/test_corpus, test_native_equivalence)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.sandbox.sandbox import ServerInfo
from tests.support.servers import connect

# The corpus is not shipped with DRC: shared/ beside the checkout, or DRC_CORPUS_DIR, or the
# workplace's copy (CI clones the repository elsewhere on the same machine).
CORPUS = next(
    (
        path
        for path in (
            Path(os.environ.get("DRC_CORPUS_DIR", "/nonexistent")),
            Path(__file__).resolve().parents[3] / "shared" / "corpus" / "debezium",
            Path("/work/shared/corpus/debezium"),
        )
        if path.is_dir()
    ),
    Path(__file__).resolve().parents[3] / "shared" / "corpus" / "debezium",
)
# Databases the scripts name themselves, besides the one each is loaded into.
FIXED_DATABASES = ("connector_test", "emptydb", "transactionpayload_test")
PREFIX = "dbz_"


def corpus_files() -> list[Path]:
    files = sorted(CORPUS.glob("*.sql"))
    if not files:
        pytest.fail(f"no corpus scripts in {CORPUS}: check out shared/ beside the repository")
    return files


def statements(script: str) -> Iterator[str]:
    """Debezium's loader: drop `--` lines, cut trailing `-- ` comments, split on `;`, `$$`->`;`."""
    kept = []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        kept.append(re.sub(r"\s--\s.*$", "", line))
    for piece in "\n".join(kept).split(";"):
        if piece.strip():
            yield piece.replace("$$", ";").strip()


def database_of(path: Path, prefix: str = PREFIX) -> str:
    return prefix + re.sub(r"\W", "_", path.stem)


def load(server: ServerInfo, path: Path, prefix: str = PREFIX) -> None:
    database = database_of(path, prefix)
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}`")
            cur.execute(f"USE `{database}`")
            for statement in statements(path.read_text()):
                cur.execute(statement)
                while cur.nextset():
                    pass
    finally:
        conn.close()


def ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def drop_databases(servers: list[ServerInfo], databases: list[str]) -> None:
    for server in servers:
        conn = connect(server)
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")  # a clean slate, not a replicated change
            for database in databases:
                cur.execute(f"DROP DATABASE IF EXISTS {ident(database)}")
        conn.close()
