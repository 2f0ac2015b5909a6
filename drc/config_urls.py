"""The replicator API URLs a config accepts: a channel's ``remote``, ``conflicts.local_api``.

A malformed URL would otherwise show only once the channel runs, as a remote that never answers;
this checks the form at load (nothing is connected to): a scheme http, https or zk, a host, ports
in 1-65535, no whitespace, and for zk:// the group's path (drc.client.discovery). A user and
password written in a URL are masked in every error, so a rejected URL never prints them.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

FORMS = "write http(s)://HOST[:PORT][/PATH] or zk://HOST:PORT[,HOST:PORT]/PATH/DATACENTER"


def api_url(url: str) -> str:
    """``url`` unchanged when well formed; ValueError saying what is wrong with it otherwise."""
    shown = masked(url)
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https", "zk"):
        raise ValueError(f"{shown!r} is not an http://, https:// or zk:// URL: {FORMS}")
    if any(c.isspace() for c in url):
        raise ValueError(f"{shown!r} contains whitespace: {FORMS}")
    authority, slash, path = rest.partition("/")
    if scheme.lower() != "zk":
        _host_port(authority, shown)
        return url
    if not slash or not path.strip("/"):
        raise ValueError(f"{shown!r} names no group path: {FORMS}")
    for host in authority.split(","):
        _host_port(host, shown)
    return url


# A config key's type for one such URL; an error's location is the entry's index, so
# `drc config check` names its key and line.
ApiUrl = Annotated[str, AfterValidator(api_url)]


def _host_port(authority: str, shown: str) -> None:
    parts = urlsplit("//" + authority.rpartition("@")[2])
    if not parts.hostname:
        raise ValueError(f"{shown!r} names no host: {FORMS}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"{shown!r} has a port that is not a number in 1-65535: {FORMS}")


def masked(url: str) -> str:
    """``url`` with the ``user:password@`` of its authority, if any, shown as ``***@``."""
    scheme, sep, rest = url.partition("://") if "://" in url else ("", "", url)
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url
    return f"{scheme}{sep}***@{authority.rpartition('@')[2]}{slash}{path}"
