"""``drc wait``: wait until this datacenter applied a GTID written on another one (read your
writes across datacenters; ``GET /v1/wait``, drc.api.waits).

Exit status: 0 applied, 1 not applied within ``--timeout-ms`` (the message says where the
channel is), 2 anything else (a malformed GTID, a domain no channel here receives, no API).
"""

from __future__ import annotations

import json
from typing import Any

import click

from drc.cli.options import stacked, tls_options, token_option

TIMEOUT_EXIT = 1
ERROR_EXIT = 2
_WILDCARD_HOSTS = {"", "0.0.0.0", "::"}


class _Failed(click.ClickException):
    exit_code = ERROR_EXIT


@click.command()
@click.option("--gtid", required=True, metavar="GTID",
              help="The GTID to wait for (SELECT @@last_gtid where it was written), or a "
              "comma-separated position: all of it.")  # fmt: skip
@click.option("--timeout-ms", default=10_000, show_default=True, type=click.IntRange(0),
              help="Give up after this long (at most the API's [api] max_wait_ms).")  # fmt: skip
@click.option("--channel", default=None, metavar="NAME",
              help="The channel that receives the GTID's domain, when several do.")  # fmt: skip
@click.option("--config", "config_path", default=None, type=click.Path(dir_okay=False),
              help="This datacenter's config: its API address and token.")  # fmt: skip
@click.option(
    "--api",
    "url",
    default=None,
    metavar="URL",
    help="The API of the drc run process that runs the channels (instead of --config).",
)
@stacked(tls_options, token_option)
@click.option("--json", "as_json", is_flag=True, help="Print the API's answer as JSON.")
def wait(gtid: str, timeout_ms: int, channel: str | None, config_path: str | None,
         url: str | None, ca: Any, cert: Any, key: Any, token: str | None,
         as_json: bool) -> None:  # fmt: skip
    """Wait until this datacenter's apply channels applied GTID (exit 0), else exit 1."""
    from drc.client import http
    from drc.client.errors import WaitTimeoutError
    from drc.client.waits import wait_for_gtid
    from drc.core.errors import DrcError

    if (config_path is None) == (url is None):
        raise click.UsageError("give exactly one of --config FILE or --api URL")
    try:
        if url is None:
            url, token = _from_config(str(config_path), token)
        answer = wait_for_gtid(
            url, gtid, timeout_ms, token=token, channel=channel,
            verify=http.tls_verify(True, ca, cert, key),
        )  # fmt: skip
    except WaitTimeoutError as exc:
        click.echo(f"drc wait: not applied: {exc}", err=True)
        raise SystemExit(TIMEOUT_EXIT) from None
    except (DrcError, ValueError) as exc:
        raise _Failed(str(exc)) from None
    if as_json:
        click.echo(json.dumps(answer, indent=2, sort_keys=True))
        return
    for applied in answer["gtids"]:
        click.echo(f"{applied['gtid']} applied by channel {applied['channel']} "
                   f"(now at {applied['position']}), waited {answer['waited_ms']} ms")  # fmt: skip


def _from_config(path: str, token: str | None) -> tuple[str, str | None]:
    """The API of the process running this config's channels, and a token it accepts."""
    from drc.config import load_config

    api = load_config(path).api
    host = "127.0.0.1" if api.host in _WILDCARD_HOSTS else api.host
    host = f"[{host}]" if ":" in host else host
    port = api.apply_port if api.apply_port is not None else api.port
    scheme = "https" if api.tls_certfile is not None else "http"
    if token is None:
        tokens = api.secrets() + tuple(api.admin_secrets().values())
        token = tokens[0] if tokens else None
    return f"{scheme}://{host}:{port}", token
