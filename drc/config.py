"""Configuration of one datacenter's DRC services, loaded once from TOML into frozen models.

Unknown keys are errors (a typo never silently falls back to a default); the password is a
SecretStr, so it never shows in a repr, a log line or an error. deploy/dc1.example.toml documents
every key.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from drc.config_lines import line_of
from drc.config_urls import api_url
from drc.core.errors import ConfigError
from drc.core.tablefilter import TableFilter, TableFilterError
from drc.tls import MysqlTls, MysqlTlsMode, https_context


class _Model(BaseModel):
    # hide_input_in_errors: a rejected value (a URL with a password in it) is not repeated in
    # a ValidationError's text; each message says what is wrong with it instead.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


# A replicator API URL or zk:// group, checked at load (drc.config_urls); an error's location
# is the entry's index, so `drc config check` names its key and line.
ApiUrl = Annotated[str, AfterValidator(api_url)]


class DatacenterConfig(_Model):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")


class _MysqlTlsKeys(_Model):
    """TLS keys of a MySQL connection (drc.tls explains the modes)."""

    tls: MysqlTlsMode = "preferred"
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    _tls_section: str = PrivateAttr("source")

    @model_validator(mode="after")
    def _usable_tls(self) -> _MysqlTlsKeys:
        problems = self.mysql_tls().problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def mysql_tls(self) -> MysqlTls:
        return MysqlTls(self.tls, self.tls_ca, self.tls_cert, self.tls_key, self._tls_section)


class SourceConfig(_MysqlTlsKeys):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    # The source's replication group (primary and GTID replicas), "host:port" each; empty: the
    # one server host/port. drc.replicator.failover says which one is read.
    servers: list[str] = []
    user: str
    password: SecretStr | None = None
    password_file: Path | None = None
    replica_server_id: int = Field(1_000_001, ge=1, le=2**32 - 1)
    heartbeat_s: float = Field(0.5, gt=0, le=60)

    @model_validator(mode="after")
    def _one_password(self) -> SourceConfig:
        if self.password is not None and self.password_file is not None:
            raise ValueError("give either password or password_file, not both")
        return self

    @model_validator(mode="after")
    def _servers(self) -> SourceConfig:
        addresses = self.addresses()
        if len(set(addresses)) != len(addresses):
            raise ValueError(f"servers lists a server twice: {self.servers}")
        return self

    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every configured source server, in order."""
        if not self.servers:
            return [(self.host, self.port)]
        return [_address(entry) for entry in self.servers]

    def secret(self) -> str:
        return _read_secret(self.password, self.password_file, "source.password_file")


def _address(entry: str) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"servers entry {entry!r} is not 'host:port' (e.g. '10.0.0.2:3306')")
    return host.strip("[]"), int(port)


class BufferConfig(_Model):
    segment_mb: int = Field(64, ge=1, le=4096)
    fsync: Literal["batch", "always", "never"] = "batch"
    compress: bool = False
    retain_gb: float | None = Field(None, gt=0)
    retain_hours: float | None = Field(None, gt=0)


class ReplicatorConfig(_Model):
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
    buffer: BufferConfig = BufferConfig()

    @model_validator(mode="after")
    def _patterns(self) -> ReplicatorConfig:
        try:
            TableFilter.build(self.include, self.exclude)
        except TableFilterError as exc:
            raise ValueError(str(exc)) from exc
        return self

    def capture_filter(self) -> TableFilter:
        return TableFilter.build(self.include, self.exclude)


class TargetConfig(_MysqlTlsKeys):
    """The local database apply channels write into; defaults to the [source] connection."""

    _tls_section: str = PrivateAttr("target")

    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str
    password: SecretStr | None = None
    password_file: Path | None = None

    def secret(self) -> str:
        return _read_secret(self.password, self.password_file, "target.password_file")


class OriginDbConfig(TargetConfig):
    """The origin datacenter's database, read by snapshot and verify (never written)."""

    _tls_section: str = PrivateAttr("channels.origin_db")

    def secret(self) -> str:
        return _read_secret(self.password, self.password_file, "channels.origin_db.password_file")


class VerifyScheduleConfig(_Model):
    """A periodic ``drc verify`` of the channel inside ``drc run`` (drc.verify.schedule)."""

    every_s: float = Field(21600, gt=0)  # from the end of one run to the start of the next
    tables: tuple[str, ...] = ()  # source db.table patterns; empty: all the channel's tables
    chunk_rows: int = Field(10_000, ge=10)
    master: str = Field("local[2]", min_length=1)  # the Spark master, kept running between runs
    streams: int = Field(2, ge=1, le=64)  # chunk comparisons each Spark task runs at once
    rounds: int = Field(6, ge=2, le=100)
    max_lag_s: float = Field(60, ge=0)  # a run waits while the channel lags more than this


ObjectKind = Literal["view", "function", "procedure", "trigger", "event"]


class ChannelConfig(_Model):
    """One apply channel: a set of tables from one remote datacenter into the local target."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    origin: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")  # the remote datacenter
    # API URLs of the remote replicator group, or zk://HOSTS/PATH/DC (drc.client.discovery)
    remote: tuple[ApiUrl, ...]
    token: SecretStr | None = None
    token_file: Path | None = None
    tables: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    map_tables: dict[str, str] = Field(default_factory=dict)  # "db.t" -> "db2.t2"
    map_columns: dict[str, dict[str, str]] = Field(default_factory=dict)  # "db.t" -> {src: dst}
    no_primary_key: Literal["refuse", "match_whole_row"] = "refuse"
    max_txns_per_commit: int = Field(500, ge=1)
    max_bytes_per_commit_mb: float = Field(8, gt=0)
    max_commit_delay_ms: float = Field(100, ge=0)
    wait_ms: int = Field(200, ge=-1)
    # "stream": one long-lived GET /v1/stream per remote (pulls where a remote has none);
    # "pull": a GET /v1/events per batch, as before streams existed.
    transport: Literal["stream", "pull"] = "stream"
    retries: int = Field(10, ge=0)
    # Schema objects whose CREATE/ALTER/DROP are applied; statements on the others are counted.
    objects: tuple[ObjectKind, ...] = ("view", "function", "procedure", "trigger", "event")
    # The account that becomes the definer of a view, routine, trigger or event whose definer
    # the target lacks ("user@host"); empty: such a statement stops the channel.
    definer: str = Field("", pattern=r"^$|^[^@\s]+@[^@\s]+$")
    # `drc run` starts `drc catchup` for this channel when the remote's segments after its
    # checkpoint pass this size (drc.catchup.auto); 0: never on its own.
    catchup_backlog_mb: float = Field(1024, ge=0)
    catchup_master: str = Field("local[*]", min_length=1)  # the Spark master it runs on
    # HTTPS to the remote API (drc.tls): a private CA, a client certificate, verification.
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_verify: bool = True
    # The origin datacenter's database (its primary or a replica), which `drc snapshot` copies
    # from and `drc verify` compares with; only those commands need it.
    origin_db: OriginDbConfig | None = None
    verify: VerifyScheduleConfig | None = None  # [channels.verify]: a periodic verify

    @field_validator("remote")
    @classmethod
    def _some_remote(cls, remote: tuple[str, ...]) -> tuple[str, ...]:
        if not remote:  # not Field(min_length=1), which also fires when an entry is rejected
            raise ValueError("lists no URL: give the remote replicator group's API URLs")
        return remote

    @model_validator(mode="after")
    def _valid(self) -> ChannelConfig:
        if self.verify is not None and self.origin_db is None:
            raise ValueError("[channels.verify] needs [channels.origin_db] (verify reads the "
                             "origin datacenter's database)")  # fmt: skip
        try:
            TableFilter.build(self.tables, self.exclude)
            TableFilter.build(list(self.map_tables) + list(self.map_tables.values()))
            TableFilter.build(list(self.map_columns))
        except TableFilterError as exc:
            raise ValueError(str(exc)) from exc
        return self

    @model_validator(mode="after")
    def _usable_tls(self) -> ChannelConfig:
        given = [k for k in ("tls_ca", "tls_cert", "tls_key") if getattr(self, k) is not None]
        given += [] if self.tls_verify else ["tls_verify"]
        if given and not any(url.lower().startswith(("https://", "zk://")) for url in self.remote):
            raise ValueError(f"{', '.join(given)} only apply to https:// remote URLs")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("give both tls_cert and tls_key (a client certificate needs its key)")
        if self.tls_ca is not None and not self.tls_verify:
            raise ValueError("tls_ca is given but tls_verify = false; drop one")
        return self

    def https_verify(self) -> Any:
        """httpx's ``verify``: True (system trust) unless TLS keys are given, else a context."""
        if self.tls_ca is None and self.tls_cert is None and self.tls_verify:
            return True
        prefix = f"channels.{self.name}."
        return https_context(
            self.tls_ca, self.tls_cert, self.tls_key, self.tls_verify,
            names=(prefix + "tls_ca", prefix + "tls_cert", prefix + "tls_key"),
        )  # fmt: skip

    def table_filter(self) -> TableFilter:
        return TableFilter.build(self.tables, self.exclude)

    def secret(self) -> str | None:
        if self.token is None and self.token_file is None:
            return None
        return _read_secret(self.token, self.token_file, f"channels.{self.name}.token_file")


def _read_secret(value: SecretStr | None, path: Path | None, what: str) -> str:
    if path is not None:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read {what} {path}: {exc}") from exc
    return value.get_secret_value() if value is not None else ""


_TOKEN_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


class ApiConfig(_Model):
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


class GroupConfig(_Model):
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
    tls_ca: Path | None = None  # CA of the members' https:// API certificates (else the system's)

    def group_path(self, datacenter: str) -> str:
        return f"{self.path.rstrip('/')}/{datacenter}"


ConflictPolicyName = Literal["lww", "resolver", "overwrite", "keep", "off"]


class ConflictTableConfig(_Model):
    """The conflict policy of the tables matching ``table`` (target names, wildcards allowed)."""

    table: str
    policy: ConflictPolicyName
    # lww (required) or resolver (optional): the row's timestamp column. DRC then keeps it moving
    # forward and keeps tombstones, so deletes have a time too (drc.conflicts.tombstones).
    column: str | None = Field(None, min_length=1)
    resolver: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:function

    @model_validator(mode="after")
    def _complete(self) -> ConflictTableConfig:
        try:
            TableFilter.build([self.table])
        except TableFilterError as exc:
            raise ValueError(str(exc)) from exc
        if self.policy == "lww" and self.column is None:
            raise ValueError(f"{self.table}: policy lww needs column = the timestamp column")
        if self.policy == "resolver" and self.resolver is None:
            raise ValueError(f"{self.table}: policy resolver needs resolver = 'module:function'")
        if self.column is not None and self.policy not in ("lww", "resolver"):
            raise ValueError(f"{self.table}: column is only used by policies lww and resolver")
        if self.resolver is not None and self.policy != "resolver":
            raise ValueError(f"{self.table}: resolver is only used by policy resolver")
        return self


class ConflictsConfig(_Model):
    """How apply channels detect and resolve write conflicts (see drc.conflicts).

    Every datacenter must be given the same policies and priority, or the sides decide
    differently and never converge.
    """

    priority: tuple[str, ...] = ()  # datacenters, first wins a lww tie on equal timestamps
    tombstone_retention_hours: float = Field(168, gt=0)
    log_retention_days: float = Field(90, gt=0)  # how long drc.conflicts keeps an entry
    tables: tuple[ConflictTableConfig, ...] = ()  # first matching entry wins
    # API URLs of this datacenter's own replicator, read by the lww guard (drc.apply.lww_guard)
    # when it runs on another host than the replicator (default: the [api] address).
    local_api: tuple[ApiUrl, ...] = ()

    @property
    def active(self) -> bool:
        return any(t.policy != "off" for t in self.tables)


NO_TARGET_FOR_SERVERS = (
    "[source] servers lists several servers, so apply cannot guess which one to write to: add a "
    "[target] section naming the current primary (a virtual IP or proxy that follows it, so a "
    "switchover needs no config change)"
)


class DrcConfig(_Model):
    datacenter: DatacenterConfig
    source: SourceConfig
    replicator: ReplicatorConfig
    api: ApiConfig = ApiConfig()
    target: TargetConfig | None = None
    channels: tuple[ChannelConfig, ...] = ()
    conflicts: ConflictsConfig = ConflictsConfig()
    group: GroupConfig | None = None

    @model_validator(mode="after")
    def _unique_channels(self) -> DrcConfig:
        # Raised as a ValidationError so its location is the second entry's name (its line in
        # `drc config check`); pydantic keeps the location of one raised inside a validator.
        seen: set[str] = set()
        for index, channel in enumerate(self.channels):
            if channel.name in seen:
                error = PydanticCustomError(
                    "duplicate_channel",
                    "channel name '{name}' is already used by an earlier [[channels]] entry: "
                    "channel names must be unique",
                    {"name": channel.name},
                )
                raise ValidationError.from_exception_data(
                    "DrcConfig",
                    [{"type": error, "loc": ("channels", index, "name"), "input": channel.name}],
                )
            seen.add(channel.name)
        return self

    @model_validator(mode="after")
    def _priority_names_every_datacenter(self) -> DrcConfig:
        if not any(t.policy == "lww" for t in self.conflicts.tables):
            return self
        ranked = self.conflicts.priority
        needed = [self.datacenter.name, *(c.origin for c in self.channels)]
        missing = [dc for dc in dict.fromkeys(needed) if dc not in ranked]
        if missing or len(set(ranked)) != len(ranked):
            raise ValueError(
                f"conflicts.priority must list every datacenter once (missing {missing}, got "
                f"{list(ranked)}): lww breaks equal timestamps by it, the same way on every side"
            )
        return self

    @model_validator(mode="after")
    def _apply_needs_one_target(self) -> DrcConfig:
        applies = self.channels or any(t.policy == "lww" for t in self.conflicts.tables)
        if applies and self.target is None and len(self.source.servers) > 1:
            raise ValueError(NO_TARGET_FOR_SERVERS)
        return self

    def channel(self, name: str) -> ChannelConfig:
        """The ``[[channels]]`` entry named ``name``; ConfigError naming the known ones."""
        for channel in self.channels:
            if channel.name == name:
                return channel
        known = ", ".join(c.name for c in self.channels) or "none"
        raise ConfigError(f"no channel named {name!r} in the config (channels: {known})")

    def target_or_source(self) -> TargetConfig:
        """Apply writes into [target], or into the [source] database when none is given."""
        if self.target is not None:
            return self.target
        if len(self.source.servers) > 1:
            raise ValueError(NO_TARGET_FOR_SERVERS)
        src = self.source
        target = TargetConfig(
            host=src.host, port=src.port, user=src.user, password=src.password,
            password_file=src.password_file, tls=src.tls, tls_ca=src.tls_ca,
            tls_cert=src.tls_cert, tls_key=src.tls_key,
        )  # fmt: skip
        target._tls_section = "source"  # errors name the keys the operator wrote
        return target


def load_config(path: str | Path) -> DrcConfig:
    """Read and validate a datacenter config; every problem names the file and the field."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path} not found; see deploy/dc1.example.toml") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path} is not readable: {exc}") from exc
    problems = config_problems(text)
    if problems:
        raise ConfigError(f"config file {path} is invalid: {'; '.join(problems)}")
    return DrcConfig.model_validate(tomllib.loads(text))


def config_problems(text: str) -> list[str]:
    """Every problem of a config file's text, each naming its line and field; [] when valid."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return [f"not readable TOML: {exc}"]
    try:
        DrcConfig.model_validate(data)
    except ValidationError as exc:
        return [_problem(text, err["loc"], err["msg"]) for err in exc.errors(include_input=False)]
    return []


def _problem(text: str, loc: tuple[str | int, ...], message: str) -> str:
    field = ".".join(str(p) for p in loc) or "(top level)"
    line = line_of(text, loc)
    return f"line {line}: {field}: {message}" if line is not None else f"{field}: {message}"
