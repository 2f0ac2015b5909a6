"""What every config section model shares: the strict, frozen base and reading a secret that is
given inline or in a file."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr

from drc.core.errors import ConfigError


class Section(BaseModel):
    """A section of the config file, or the whole file (drc.config.DrcConfig): unknown keys are
    errors, and a loaded config never changes."""

    # hide_input_in_errors: a rejected value (a URL with a password in it) is not repeated in
    # a ValidationError's text; each message says what is wrong with it instead.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


def read_secret(value: SecretStr | None, path: Path | None, what: str) -> str:
    """The secret read from ``path`` when it is given, else ``value``; ConfigError naming
    ``what`` (the file's key) when the file cannot be read."""
    if path is not None:
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read {what} {path}: {exc}") from exc
    return value.get_secret_value() if value is not None else ""
