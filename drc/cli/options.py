"""Options several commands declare: each written once, so that its name, default and help read
the same in every command that takes it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from drc.core.errors import DrcError
from drc.core.scn import SCN

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
# --api (the parameter ``urls``) of the commands that read a replicator's change stream.
replicator_api_option = click.option(
    "--api",
    "urls",
    multiple=True,
    required=True,
    metavar="URL",
    help="Replicator API base URL, e.g. http://dc1:8640, or a group's zk://HOST:PORT/PATH/DC; "
    "repeat for failover across a group.",
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


@contextmanager
def client_errors() -> Iterator[None]:
    """SDK errors become one line (exit 1); their messages name the URL and what to check."""
    try:
        yield
    except (DrcError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


def parse_after(text: str | None) -> SCN | None:
    """--after's SCN (c:s:i:p), or None when not given."""
    if text is None:
        return None
    try:
        return SCN.parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--after") from None


def admin_connection(help: str) -> Callable[[F], F]:
    """--api URL (the parameter ``url``), --token and the TLS options of an admin command."""
    api = click.option("--api", "url", required=True, metavar="URL", help=help)
    return stacked(tls_options, api, token_option)


@contextmanager
def admin_api(
    client: Callable[..., Any], url: str, token: str | None, ca: Any, cert: Any, key: Any
) -> Iterator[Any]:
    """An admin API client (ChannelApi, GroupsApi) over the connection options, its errors as
    one line."""
    from drc.client import http

    with client_errors(), client(url, token, verify=http.tls_verify(True, ca, cert, key)) as api:
        yield api
