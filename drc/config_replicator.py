"""The replicator's sections: what it captures ([replicator]), its buffer ([replicator.buffer]),
the pull API it serves ([api]), its replicator group ([group]) and the consumer groups it
serves from the start ([[consumer_groups]])."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from drc.config_section import Section
from drc.core.errors import ConfigError, MalformedScnError
from drc.core.masking import Masker
from drc.core.rowfilter import RowFilterError
from drc.core.rowfilter import parse as parse_predicate
from drc.core.scn import SCN
from drc.core.tablefilter import TableFilter, TableFilterError


class BufferConfig(Section):
    segment_mb: int = Field(64, ge=1, le=4096)
    fsync: Literal["batch", "always", "never"] = "batch"
    compress: bool = False
    retain_gb: float | None = Field(None, gt=0)
    retain_hours: float | None = Field(None, gt=0)


class ReplicatorConfig(Section):
    buffer_dir: Path
    start_from: str = "current"
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    fragment_rows: int = Field(10_000, ge=1)
    fragment_mb: float = Field(8, gt=0)
    commit_max_ms: float = Field(50, gt=0)
    # drc.heartbeat row written in the source this often (0: never), so lag is true when idle.
    heartbeat_interval_s: float = Field(1.0, ge=0, le=3600)
    # How DRC-originated transactions (its apply channels' writes) are stored: "full" with
    # their rows, or "marker": without them, never decoded (docs/configuration.md).
    drc_applied: Literal["full", "marker"] = "full"
    # "db.t" (or a pattern) -> {column: "hmac" | "null"}: values replaced before they are
    # stored, so they never leave this datacenter (drc.core.masking); "hmac" needs the key file.
    mask_columns: dict[str, dict[str, Literal["hmac", "null"]]] = Field(default_factory=dict)
    mask_key_file: Path | None = None
    buffer: BufferConfig = BufferConfig()

    @model_validator(mode="after")
    def _patterns(self) -> ReplicatorConfig:
        try:
            TableFilter.build(self.include, self.exclude)
            TableFilter.build(list(self.mask_columns))
        except TableFilterError as exc:
            raise ValueError(str(exc)) from exc
        empty = [pattern for pattern, columns in self.mask_columns.items() if not columns]
        if empty:
            raise ValueError(
                f'mask_columns {empty[0]!r}: name its columns, e.g. {{email = "hmac"}}'
            )
        uses_hmac = any("hmac" in m.values() for m in self.mask_columns.values())
        if uses_hmac and self.mask_key_file is None:
            raise ValueError('mask_columns uses "hmac": set mask_key_file to the file of its key')
        return self

    def masker(self) -> Masker | None:
        """The capture's column masking (None without mask_columns); reads the key file."""
        if not self.mask_columns:
            return None
        key = None
        if self.mask_key_file is not None:
            try:
                key = self.mask_key_file.read_bytes().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read replicator.mask_key_file {self.mask_key_file}: {exc}"
                ) from exc
            if len(key) < 16:
                raise ConfigError(
                    f"replicator.mask_key_file {self.mask_key_file} holds {len(key)} bytes: give "
                    "an HMAC key of at least 16 random bytes (e.g. openssl rand -hex 32)"
                )
        return Masker(self.mask_columns, key)

    def capture_filter(self) -> TableFilter:
        return TableFilter.build(self.include, self.exclude)


_TOKEN_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class ApiConfig(Section):
    """The pull API each replicator serves (subscribers, followers and remote apply channels)."""

    host: str = "127.0.0.1"
    port: int = Field(8640, ge=0, le=65535)
    # `drc run --role apply` serves /healthz, /metrics and /v1/status here (None: on `port`).
    apply_port: int | None = Field(None, ge=0, le=65535)
    tokens: tuple[SecretStr, ...] = ()
    tokens_file: Path | None = None
    admin_tokens: dict[str, SecretStr] = Field(default_factory=dict)  # name -> token
    admin_tokens_file: Path | None = None  # lines "NAME TOKEN"
    max_events: int = Field(10_000, ge=1)
    max_bytes_mb: float = Field(16, gt=0)
    max_wait_ms: int = Field(30_000, ge=0)
    # Long polls waiting at once, in all (then 503) and per bearer token (then 429).
    max_long_polls: int = Field(1000, ge=1, le=100_000)
    max_long_polls_per_token: int = Field(200, ge=1, le=100_000)
    # What pulls and streams may hold of records read but not yet sent, in all (drc.api.budget).
    reader_memory_mb: float = Field(512, ge=1)
    tls_certfile: Path | None = None
    tls_keyfile: Path | None = None

    @model_validator(mode="after")
    def _open_only_with_tokens(self) -> ApiConfig:
        bad = [n for n in self.admin_tokens if not _TOKEN_NAME.fullmatch(n)]
        if bad:
            raise ValueError(f"admin token names must be letters, digits, . _ - (got {bad})")
        tokenless = not (
            self.tokens or self.tokens_file or self.admin_tokens or self.admin_tokens_file
        )
        if self.host not in _LOOPBACK and tokenless:
            raise ValueError(
                f"host {self.host!r} is not loopback: set tokens or tokens_file so the API is "
                "not open to the network without authentication"
            )
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("give both tls_certfile and tls_keyfile, or neither")
        if self.max_long_polls_per_token > self.max_long_polls:
            raise ValueError(
                f"max_long_polls_per_token ({self.max_long_polls_per_token}) is above "
                f"max_long_polls ({self.max_long_polls}): lower it, or raise max_long_polls"
            )
        return self

    def secrets(self) -> tuple[str, ...]:
        """The accepted bearer tokens (config list plus one per line of tokens_file)."""
        tokens = [t.get_secret_value() for t in self.tokens]
        if self.tokens_file is not None:
            try:
                lines = self.tokens_file.read_text().splitlines()
            except OSError as exc:
                raise ConfigError(f"cannot read api.tokens_file {self.tokens_file}: {exc}") from exc
            tokens.extend(line.strip() for line in lines if line.strip())
        return tuple(tokens)

    def admin_secrets(self) -> dict[str, str]:
        """Admin tokens by name (``admin_tokens`` plus ``NAME TOKEN`` lines of the file)."""
        found = {name: token.get_secret_value() for name, token in self.admin_tokens.items()}
        if self.admin_tokens_file is None:
            return found
        try:
            lines = self.admin_tokens_file.read_text().splitlines()
        except OSError as exc:
            raise ConfigError(
                f"cannot read api.admin_tokens_file {self.admin_tokens_file}: {exc}"
            ) from exc
        for number, line in enumerate(lines, start=1):
            name, _, token = line.strip().partition(" ")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if not _TOKEN_NAME.fullmatch(name) or not token.strip():
                raise ConfigError(
                    f"api.admin_tokens_file {self.admin_tokens_file} line {number}: expected "
                    "'NAME TOKEN' (NAME: letters, digits, . _ -)"
                )
            found[name] = token.strip()
        return found


class GroupConfig(Section):
    """This replicator's place in its datacenter's replicator group (drc.replicator.group).

    Without a [group] section the process is the datacenter's only replicator and always leads.
    """

    zookeeper: str = Field(min_length=1)  # "host:port,host:port" of this datacenter's ensemble
    path: str = Field("/drc", pattern=r"^/[A-Za-z0-9_./-]*$")  # + "/<datacenter>" is the group
    member_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    session_timeout_s: float = Field(6.0, ge=1.0, le=60.0)
    # The pull API URL the other members and readers use to reach this one.
    advertise_url: str = Field(min_length=1, pattern=r"^https?://")
    connect_retry_s: float = Field(2.0, gt=0, le=60.0)  # ZooKeeper unreachable: wait, try again
    # Elected, wait this long at most for every member that ever joined to answer, to copy
    # the most advanced buffer before reading the source (drc.replicator.catch_up).
    catch_up_wait_s: float = Field(10.0, ge=0, le=300.0)
    tls_ca: Path | None = None  # CA of the members' https:// API certificates (else the system's)

    def group_path(self, datacenter: str) -> str:
        return f"{self.path.rstrip('/')}/{datacenter}"


class ConsumerGroupConfig(Section):
    """A consumer group this datacenter's replicators serve from the start (docs/subscribers.md);
    created by the leader unless it exists (an existing group keeps its state: change one with
    ``drc groups delete`` and a restart)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    tables: tuple[str, ...] = ()  # table filter patterns, as a pull's tables; (): every table
    rows: dict[str, str] = Field(default_factory=dict)  # {"db.table": predicate}, as a pull's
    partitioning: Literal["key", "table"] = "key"
    ranges: int = Field(64, ge=1, le=65536)
    heartbeat_timeout_s: float = Field(10.0, gt=0, le=3600)
    skip_drc: bool = False
    after: str | None = None  # SCN to start after; none: the newest when the group is created
    full: bool = False  # start with a snapshot of the tables (the full phase), then after it
    chunk_rows: int = Field(10_000, ge=1, le=1_000_000)  # rows per full-phase chunk, about

    @model_validator(mode="after")
    def _filters_parse(self) -> ConsumerGroupConfig:
        try:
            TableFilter.build(list(self.tables) or ["*.*"])
            for pattern, predicate in self.rows.items():
                TableFilter.build([pattern])
                parse_predicate(predicate)
            if self.after is not None:
                SCN.parse(self.after)
            if self.full and (self.after is not None or self.rows):
                raise ValueError(
                    "full = true starts where the snapshot stands and copies whole "
                    "tables: leave after and rows out"
                )
        except (TableFilterError, RowFilterError, MalformedScnError) as exc:
            raise ValueError(f"consumer group {self.name}: {exc}") from exc
        return self
