"""An apply channel's section, [[channels]]: the remote it pulls from, its tables, how it
commits, and the [channels.verify] schedule."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from drc.config_databases import OriginDbConfig
from drc.config_section import Section, read_secret
from drc.config_urls import ApiUrl
from drc.core.rowfilter import Predicate, parse
from drc.core.tablefilter import TableFilter, TableFilterError
from drc.tls import https_context

TRANSFORM_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # module:function


class VerifyScheduleConfig(Section):
    """A periodic ``drc verify`` of the channel inside ``drc run`` (drc.verify.schedule)."""

    every_s: float = Field(21600, gt=0)  # from the end of one run to the start of the next
    tables: tuple[str, ...] = ()  # source db.table patterns; empty: all the channel's tables
    chunk_rows: int = Field(10_000, ge=10)
    master: str = Field("local[2]", min_length=1)  # the Spark master, kept running between runs
    streams: int = Field(2, ge=1, le=64)  # chunk comparisons each Spark task runs at once
    rounds: int = Field(6, ge=2, le=100)
    max_lag_s: float = Field(60, ge=0)  # a run waits while the channel lags more than this


ObjectKind = Literal["view", "function", "procedure", "trigger", "event"]


class ChannelConfig(Section):
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
    # "db.t" (or a pattern) -> a predicate on source columns (drc.core.rowfilter): the rows
    # applied; an update moving a row in or out of it is applied as an insert or a delete.
    row_filters: dict[str, str] = Field(default_factory=dict)
    # "db.t" (or a pattern) -> source columns left out of every change (not key columns).
    exclude_columns: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    no_primary_key: Literal["refuse", "match_whole_row"] = "refuse"
    max_txns_per_commit: int = Field(500, ge=1)
    max_bytes_per_commit_mb: float = Field(8, gt=0)
    max_commit_delay_ms: float = Field(100, ge=0)
    # Connections a group's independent transactions are written on at once (drc.apply.parallel)
    parallel_workers: int = Field(1, ge=1, le=16)
    # "db.table" pattern -> "module:function": a hook given each row change (drc.apply.transforms)
    transforms: dict[str, str] = Field(default_factory=dict)
    wait_ms: int = Field(200, ge=-1)
    # "stream": one long-lived GET /v1/stream per remote (pulls where a remote has none);
    # "pull": a GET /v1/events per batch, as before streams existed.
    transport: Literal["stream", "pull"] = "stream"
    # "lz4": records compressed on the wire (drc.api.wire), for long, thin links.
    compression: Literal["none", "lz4"] = "none"
    retries: int = Field(10, ge=0)
    # Schema objects whose CREATE/ALTER/DROP are applied; statements on the others are counted.
    objects: tuple[ObjectKind, ...] = ("view", "function", "procedure", "trigger", "event")
    # The account that becomes the definer of a view, routine, trigger or event whose definer
    # the target lacks ("user@host"); empty: such a statement stops the channel.
    definer: str = Field("", pattern=r"^$|^[^@\s]+@[^@\s]+$")
    # pt-online-schema-change / gh-ost runs on the origin: "copy" applies its shadow table,
    # triggers, copy and rename like any DDL and rows; "replay" leaves them out and runs its
    # ALTER on the table at the cut-over (drc.core.osc_replay). Every channel of every
    # datacenter must say the same (the tool's side guards the tool's triggers by it).
    online_schema_change: Literal["copy", "replay"] = "copy"
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
            TableFilter.build(list(self.transforms))
            TableFilter.build(list(self.row_filters))
            TableFilter.build(list(self.exclude_columns))
        except TableFilterError as exc:
            raise ValueError(str(exc)) from exc
        return self

    @field_validator("transforms")
    @classmethod
    def _hook_names(cls, transforms: dict[str, str]) -> dict[str, str]:
        for pattern, spec in transforms.items():
            if not TRANSFORM_SPEC.match(spec):
                raise ValueError(f"transform {spec!r} for {pattern} must look like module:function")
        return transforms

    @field_validator("row_filters")
    @classmethod
    def _parsed(cls, row_filters: dict[str, str]) -> dict[str, str]:
        parse_filters(row_filters)  # a RowFilterError is a ValueError: its position shown
        return row_filters

    @field_validator("exclude_columns")
    @classmethod
    def _named(cls, exclude: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for pattern, columns in exclude.items():
            if not columns or not all(c.strip() for c in columns):
                raise ValueError(f"exclude_columns {pattern!r}: list the column names to leave out")
        return exclude

    def row_stage(self, schema: str, table: str) -> str | None:
        """``"row_filters"`` or ``"exclude_columns"`` when one selects the table (snapshot and
        verify copy and compare whole tables, so they leave it out), else None."""
        for key, entries in (
            ("row_filters", self.row_filters),
            ("exclude_columns", self.exclude_columns),
        ):
            if any(TableFilter.build([pattern]).matches(schema, table) for pattern in entries):
                return key
        return None

    def row_predicates(self) -> dict[str, Predicate]:
        """``row_filters`` parsed (checked at load, so this does not fail)."""
        return parse_filters(self.row_filters)

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
        return read_secret(self.token, self.token_file, f"channels.{self.name}.token_file")


def parse_filters(row_filters: dict[str, str]) -> dict[str, Predicate]:
    """Every table's predicate; RowFilterError (a ValueError) naming the first that fails."""
    parsed = {}
    for pattern, text in row_filters.items():
        try:
            parsed[pattern] = parse(text)
        except ValueError as exc:
            raise type(exc)(f"row_filters {pattern!r}: {exc}") from exc
    return parsed
