"""Options several commands declare: each written once, so that its name, default and help read
the same in every command that takes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

config_option = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Datacenter config (TOML); see deploy/dc1.example.toml.",
)
progress_option = click.option(
    "--progress-every",
    default=5.0,
    show_default=True,
    help="Seconds between progress lines on stderr (0: none).",
)
token_option = click.option(
    "--token",
    envvar="DRC_TOKEN",
    show_envvar=True,
    default=None,
    help="Bearer token of the API (prefer the env var: arguments show in ps).",
)
_pem = click.Path(exists=True, dir_okay=False)


class Parsed(click.ParamType):
    """A value read from its text by ``parse``, whose ValueError is the option's usage error."""

    def __init__(self, name: str, parse: Callable[[str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # read already: click may convert a value twice
        try:
            return self._parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def stacked(*options: Callable[[F], F]) -> Callable[[F], F]:
    """The options as one decorator, in the order given (the first is listed first)."""

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


tls_options = stacked(
    click.option("--ca", type=_pem, default=None,
                 help="PEM file of the CA(s) to trust for https:// URLs (else the system's)."),
    click.option("--cert", type=_pem, default=None, help="PEM client certificate, with --key."),
    click.option("--key", type=_pem, default=None, help="PEM key of --cert (unencrypted)."),
)  # fmt: skip


def format_option(default: str, help: str, other: str = "json") -> Callable[[F], F]:
    """--format (the parameter ``fmt``): ``default`` (for people) or ``other`` (for scripts)."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice([default, other]),
        default=default,
        show_default=True,
        help=help,
    )


def range_option(
    flag: str, default: float, low: float, high: float | None = None, *, help: str,
    name: str | None = None,
) -> Callable[[F], F]:  # fmt: skip
    """A number from ``low`` to ``high`` (None: no upper bound), its default shown in --help; a
    whole number unless ``default`` is a float. ``name``: the parameter, when not the flag's."""
    kind = click.FloatRange if isinstance(default, float) else click.IntRange
    names = (flag,) if name is None else (flag, name)
    return click.option(*names, default=default, show_default=True, type=kind(low, high), help=help)


def channel_option(verb: str) -> Callable[[F], F]:
    """--channel (the parameter ``channel_name``): the [[channels]] entry a command works on."""
    return click.option(
        "--channel", "channel_name", required=True, help=f"The [[channels]] name to {verb}."
    )


# What `drc status` and `drc channel` print of an API's answer.
api_document_format = format_option("text", "text: readable lines; json: the API's document as is.")
