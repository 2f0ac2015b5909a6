"""Find a datacenter's replicators through its ZooKeeper: ``zk://HOSTS/PATH`` URLs.

Wherever DRC takes replicator API URLs (a channel's ``remote``, ``drc tail --api``, ``drc
status --api``, :class:`drc.client.Subscriber`), an entry ``zk://zk1:2181,zk2:2181/drc/dc1``
stands for the members of the replicator group at that ZooKeeper path ([group] path +
``/`` + datacenter): the leader first, then the followers, each by the API URL it advertises.
Static URLs and ``zk://`` entries may be mixed. The subscriber resolves the entries again after
every round in which no URL answered, so it follows the group as members come and go.

The group's layout in ZooKeeper (written by drc.replicator.group) is read here too:
``PATH/leader`` holds ``{"member", "url", "term"}``, ``PATH/members/ID`` ``{"member", "url"}``.

A reader that stays on a group keeps a :class:`LeaderWatch` on it: a ZooKeeper session of its
own watching ``PATH/leader``, so that a leadership change (a leader whose session expired, a
new leader elected) reaches the reader at once, not when a read from a silent leader times
out; the watch also answers the group's members from that session instead of a new one.
"""

from __future__ import annotations

import json
import logging
import threading
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
        return _urls(client, path, timeout_s)
    except (KazooTimeoutError, KazooException, OSError) as exc:
        raise DiscoveryError(f"ZooKeeper {hosts} did not answer for {path}: {exc!r}") from exc
    finally:
        _close(client)


def _urls(client: KazooClient, path: str, timeout_s: float) -> list[str]:
    leader = read_leader(client, path, timeout_s)
    members = read_members(client, path, timeout_s)
    urls = [] if leader is None or not isinstance(leader.get("url"), str) else [leader["url"]]
    urls += [url for url in members.values() if url not in urls]
    return [url.rstrip("/") for url in urls]


def _close(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except KazooException:
        pass


class DataChanges:
    """A kazoo DataWatch function: calls ``on_change()`` (on ZooKeeper's thread: it must not
    block) each time the node's data differs from its last reading (the first is no change),
    until ``ended()``, which ends the watch. ``what`` names the handler in the log."""

    def __init__(self, on_change: Callable[[], None], ended: Callable[[], bool], what: str):
        self._on_change = on_change
        self._ended = ended
        self._what = what
        self._seen: tuple[bytes | None] | None = None  # the node's data when last read

    def __call__(self, data: bytes | None, _stat: object) -> bool:
        if self._ended():
            return False  # ends the watch
        seen, self._seen = self._seen, (data,)
        if seen is not None and seen != (data,):
            try:
                self._on_change()
            except Exception:  # a handler's bug must not end the watch
                log.exception("%s failed", self._what)
        return True


class LeaderWatch:
    """Calls ``on_change()`` (on ZooKeeper's thread: it must not block) each time the group's
    ``leader`` node changes after the watch began: the leader's session ended (the node is
    deleted) or a member took office (created). Connects in the background and keeps trying
    while ZooKeeper is unreachable; :meth:`urls` resolves the group from the same session."""

    def __init__(
        self,
        spec: str,
        on_change: Callable[[], None],
        timeout_s: float = RESOLVE_TIMEOUT_S,
    ) -> None:
        self.spec = spec
        hosts, self._path = split(spec)
        self._timeout_s = timeout_s
        self._stop = threading.Event()
        what = f"leader change handler of {spec}"
        self._changes = DataChanges(on_change, self._stop.is_set, what)
        self._client = KazooClient(hosts=hosts, timeout=timeout_s)
        self._thread = threading.Thread(target=self._start, name="drc-leader-watch", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        while not self._stop.is_set():
            try:
                self._client.start(timeout=self._timeout_s)
            except (KazooTimeoutError, KazooException, OSError) as exc:
                log.debug("leader watch of %s: ZooKeeper not reachable yet (%s)", self.spec, exc)
                self._stop.wait(1.0)
                continue
            if self._stop.is_set():
                _close(self._client)  # close() ran while this was connecting
                return
            try:
                self._client.DataWatch(f"{self._path}/{LEADER}", self._changes)
            except KazooException as exc:  # closed meanwhile
                log.debug("leader watch of %s not set: %s", self.spec, exc)
            return

    def urls(self) -> list[str]:
        """The group's URLs, leader first, read over the watch's session; DiscoveryError
        while it is not connected (the caller resolves with a session of its own)."""
        if not self._client.connected:
            raise DiscoveryError(f"the leader watch of {self.spec} is not connected")
        try:
            return _urls(self._client, self._path, self._timeout_s)
        except (KazooTimeoutError, KazooException, OSError) as exc:
            raise DiscoveryError(f"{self.spec} did not answer: {exc!r}") from exc

    def close(self) -> None:
        self._stop.set()
        _close(self._client)
        self._thread.join(timeout=self._timeout_s)


def expand(urls: Sequence[str], resolver: Callable[[str], list[str]] = resolve) -> tuple[str, ...]:
    """Static URLs as they are and ``zk://`` entries resolved, in order, without repeats. An
    entry whose ZooKeeper does not answer (or names no member yet) stays as it is, so the
    caller sees it fail like an unreachable URL and resolves again later."""
    out: list[str] = []
    for url, found, error in _resolved(urls, resolver):
        if error is not None:
            log.warning("cannot resolve %s: %s", url, error)
        out.extend(found or [url])
    return tuple(dict.fromkeys(out))


def members(
    urls: Sequence[str], resolver: Callable[[str], list[str]] | None = None
) -> tuple[str, ...]:
    """The API URLs a one-shot request asks (a snapshot's origin, a catch-up's segments, an
    operator's action): static URLs as they are and ``zk://`` entries resolved now, in order,
    without repeats. Unlike :func:`expand` a group that cannot be resolved is left out (there
    is no later round to retry it in); DiscoveryError, naming each group and why, when that
    leaves no URL at all."""
    out: list[str] = []
    problems: list[str] = []
    for url, found, error in _resolved(urls, resolver or resolve):
        if error is not None:
            problems.append(f"{url}: {error}")
        elif not found:
            problems.append(f"{url}: no replicator of that group is registered")
        out.extend(found)
    for problem in problems:
        log.warning("cannot resolve %s", problem)
    if problems and not out:
        raise DiscoveryError(
            "no replicator API URL to ask: "
            + "; ".join(problems)
            + ". Check that the group's ZooKeeper is reachable from here and that its "
            "replicators are running (drc run), or list their http(s):// URLs instead"
        )
    return tuple(dict.fromkeys(out))


def _resolved(
    urls: Sequence[str], resolver: Callable[[str], list[str]]
) -> list[tuple[str, list[str], DiscoveryError | None]]:
    """Each entry with the URLs it stands for: a static URL itself, a ``zk://`` entry its
    group's members now, or none and why when its ZooKeeper did not answer."""
    entries: list[tuple[str, list[str], DiscoveryError | None]] = []
    for url in urls:
        if not is_group(url):
            entries.append((url, [url], None))
            continue
        try:
            entries.append((url, resolver(url), None))
        except DiscoveryError as exc:
            entries.append((url, [], exc))
    return entries
