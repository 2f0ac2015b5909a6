"""Configuration of one datacenter's DRC services, loaded once from TOML into frozen models.

Unknown keys are errors (a typo never silently falls back to a default); the password is a
SecretStr, so it never shows in a repr, a log line or an error. deploy/dc1.example.toml documents
every key.

This module holds the whole file's model, the checks across its sections, and loading; the
sections are drc.config_databases, drc.config_replicator, drc.config_channels and
drc.conflicts.settings (the conflicts package owns its section, beside the policies it checks).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from drc.config_channels import ChannelConfig
from drc.config_databases import SourceConfig, TargetConfig
from drc.config_lines import line_of
from drc.config_replicator import ApiConfig, ConsumerGroupConfig, GroupConfig, ReplicatorConfig
from drc.config_section import Section
from drc.conflicts.settings import ConflictsConfig
from drc.core.errors import ConfigError


class DatacenterConfig(Section):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")


NO_TARGET_FOR_SERVERS = (
    "[source] servers lists several servers, so apply cannot guess which one to write to: add a "
    "[target] section naming the current primary (a virtual IP or proxy that follows it, so a "
    "switchover needs no config change)"
)


class DrcConfig(Section):
    datacenter: DatacenterConfig
    source: SourceConfig
    replicator: ReplicatorConfig
    api: ApiConfig = ApiConfig()
    target: TargetConfig | None = None
    channels: tuple[ChannelConfig, ...] = ()
    conflicts: ConflictsConfig = ConflictsConfig()
    group: GroupConfig | None = None
    consumer_groups: tuple[ConsumerGroupConfig, ...] = ()

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
    def _unique_consumer_groups(self) -> DrcConfig:
        names = [g.name for g in self.consumer_groups]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"[[consumer_groups]] names must be unique, {repeated} repeat")
        return self

    @model_validator(mode="after")
    def _priority_names_every_datacenter(self) -> DrcConfig:
        if not self.conflicts.by_version:
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
    def _one_online_schema_change_mode(self) -> DrcConfig:
        modes = sorted({c.online_schema_change for c in self.channels})
        if len(modes) > 1:
            raise ValueError(
                f"channels disagree on online_schema_change ({', '.join(modes)}): set the same "
                "value on every channel of every datacenter. The datacenter where a tool runs "
                'leaves the tool\'s triggers unguarded only for "replay", which doubles their '
                "effect on a datacenter that copies (docs/operations.md, 'Online schema change "
                "tools')"
            )
        return self

    @property
    def replays_online_schema_changes(self) -> bool:
        """Whether this datacenter's channels replay a tool's ALTER (all of them or none)."""
        return any(c.online_schema_change == "replay" for c in self.channels)

    @model_validator(mode="after")
    def _apply_needs_one_target(self) -> DrcConfig:
        applies = self.channels or self.conflicts.by_version
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
        return TargetConfig.of_source(self.source)


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
