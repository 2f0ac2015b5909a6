"""Find a datacenter's replicators through its ZooKeeper: ``zk://HOSTS/PATH`` URLs.

Wherever DRC takes replicator API URLs (a channel's ``remote``, ``drc tail --api``, ``drc
status --api``, :class:`drc.client.Subscriber`), an entry ``zk://zk1:2181,zk2:2181/drc/dc1``
stands for the members of the replicator group at that ZooKeeper path ([group] path +
``/`` + datacenter): the leader first, then the followers, each by the API URL it advertises.
Static URLs and ``zk://`` entries may be mixed. The subscriber resolves the entries again after
every round in which no URL answered, so it follows the group as members come and go.

The group's layout in ZooKeeper (written by drc.replicator.group) is read here too:
``PATH/leader`` holds ``{"member", "url", "term"}``, ``PATH/members/ID`` ``{"member", "url"}``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from drc.core.errors import RetriableError

log = logging.getLogger("drc.client")
SCHEME = "zk://"
RESOLVE_TIMEOUT_S = 5.0
LEADER = "leader"
MEMBERS = "members"


class DiscoveryError(RetriableError):
    """The group's ZooKeeper could not be read; another attempt may succeed."""


def is_group(url: str) -> bool:
    return url.lower().startswith(SCHEME)


def split(spec: str) -> tuple[str, str]:
    """``zk://HOSTS/PATH`` -> (HOSTS, /PATH); ValueError for anything else."""
    rest = spec[len(SCHEME) :] if is_group(spec) else ""
    hosts, slash, path = rest.partition("/")
    if not hosts or not slash or not path.strip("/"):
        raise ValueError(
            f"{spec!r} is not a group URL: write zk://HOST:PORT[,HOST:PORT]/PATH/DATACENTER "
            "(the members' [group] zookeeper, path and datacenter name)"
        )
    return hosts, "/" + path.strip("/")


def load(raw: bytes | None) -> dict[str, Any]:
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _get(client: KazooClient, path: str, timeout_s: float) -> bytes:
    """A node's data, waiting at most ``timeout_s`` (a plain get waits for a reconnect)."""
    raw, _ = client.get_async(path).get(timeout=timeout_s)
    return bytes(raw or b"")


def read_leader(
    client: KazooClient, path: str, timeout_s: float = RESOLVE_TIMEOUT_S
) -> dict[str, Any] | None:
    try:
        return load(_get(client, f"{path}/{LEADER}", timeout_s))
    except NoNodeError:
        return None


def read_members(
    client: KazooClient, path: str, timeout_s: float = RESOLVE_TIMEOUT_S
) -> dict[str, str]:
    """Member id -> advertised URL, of the members registered now."""
    base = f"{path}/{MEMBERS}"
    try:
        children = sorted(client.get_children_async(base).get(timeout=timeout_s))
    except NoNodeError:
        return {}
    found = {}
    for child in children:
        try:
            raw = _get(client, f"{base}/{child}", timeout_s)
        except NoNodeError:
            continue
        url = load(raw).get("url")
        if isinstance(url, str):
            found[child] = url
    return found


def resolve(spec: str, timeout_s: float = RESOLVE_TIMEOUT_S) -> list[str]:
    """The API URLs of the group ``spec`` names, leader first; DiscoveryError if ZooKeeper
    does not answer, ValueError for a malformed spec."""
    hosts, path = split(spec)
    client = KazooClient(hosts=hosts, timeout=timeout_s)
    try:
        client.start(timeout=timeout_s)
        leader = read_leader(client, path)
        members = read_members(client, path)
    except (KazooTimeoutError, KazooException, OSError) as exc:
        raise DiscoveryError(f"ZooKeeper {hosts} did not answer for {path}: {exc!r}") from exc
    finally:
        try:
            client.stop()
            client.close()
        except KazooException:
            pass
    urls = [] if leader is None or not isinstance(leader.get("url"), str) else [leader["url"]]
    urls += [url for url in members.values() if url not in urls]
    return [url.rstrip("/") for url in urls]


def expand(urls: Sequence[str], resolver: Callable[[str], list[str]] = resolve) -> tuple[str, ...]:
    """Static URLs as they are and ``zk://`` entries resolved, in order, without repeats. An
    entry whose ZooKeeper does not answer (or names no member yet) stays as it is, so the
    caller sees it fail like an unreachable URL and resolves again later."""
    out: list[str] = []
    for url in urls:
        if not is_group(url):
            out.append(url)
            continue
        try:
            found = resolver(url)
        except DiscoveryError as exc:
            log.warning("cannot resolve %s: %s", url, exc)
            found = []
        out.extend(found or [url])
    return tuple(dict.fromkeys(out))
