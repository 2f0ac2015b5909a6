"""A datacenter's DRC process: the replicator (capture + pull API) and its apply channels.

``drc run --role all`` runs both in one process, ``--role replicator`` or ``--role apply`` one
of them (e.g. apply on other hosts). Each component runs in its own thread:

- a fatal capture error stops the whole node and is raised: the process exits non-zero and its
  supervisor (systemd) restarts it, resuming from the buffer's last SCN;
- a channel that stops with an error stops alone (streams are independent); the node goes on
  while anything still runs, and reports the failure on every progress line, in /healthz (503
  naming the component) and in /metrics (``drc_channel_up`` 0).

Every role serves HTTP: ``all`` and ``replicator`` the whole pull API, ``apply`` only
/healthz, /metrics and /v1/status (drc.runtime.build_apply_api), so a channel running on its
own host is watched the same way. The replicator role also writes this datacenter's heartbeat
(drc.replicator.heartbeat) so the other datacenters' channels know their lag when idle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from drc.api.server import ApiServer
from drc.apply.actions import reload_request
from drc.apply.channel import ApplyChannel
from drc.apply.lww_guard import LwwGuard, build_guard
from drc.apply.progress import STOPPED
from drc.apply.service import build_channels, build_desk, channel_filters
from drc.catchup.auto import AutoCatchup
from drc.config import DrcConfig
from drc.core.errors import DrcError, RetriableError
from drc.replicator.heartbeat import HeartbeatWriter
from drc.runtime import (
    ReplicatorService,
    build_apply_api,
    build_heartbeat,
    build_replicator,
    catchup_finisher,
)
from drc.verify.schedule import PeriodicVerify

log = logging.getLogger(__name__)
ROLES = ("all", "replicator", "apply")


@dataclass
class _Component:
    name: str
    thread: threading.Thread
    failure: list[BaseException] = field(default_factory=list)


RELOAD_POLL_S = 0.5
_SELECTION = ("tables", "exclude", "map_tables", "map_columns", "objects")


def _selection(config: Any) -> dict[str, Any]:
    return {key: getattr(config, key) for key in _SELECTION}


class Node:
    def __init__(
        self,
        config: DrcConfig,
        role: str = "all",
        config_path: str | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``wall_clock``: this host's clock (heartbeats, lag); tests give one that runs
        ahead or behind to play a datacenter whose clock is off (clock skew)."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        self.config = config
        self.role = role
        self.service: ReplicatorService | None = None
        self.channels: list[ApplyChannel] = []
        self.guard: LwwGuard | None = None
        self.heartbeat: HeartbeatWriter | None = None
        self.apply_api: ApiServer | None = None  # role apply: health, metrics, status
        self.config_path = config_path  # for the automatic catch-ups it may start
        self.auto: AutoCatchup | None = None
        self.verifier: PeriodicVerify | None = None  # [channels.verify] (drc.verify.schedule)
        self._components: list[_Component] = []
        self.reload_requested = threading.Event()  # set by SIGHUP (drc run)
        self.wall_clock = wall_clock

    @property
    def api_url(self) -> str | None:
        if self.apply_api is not None:
            return self.apply_api.url
        if self.service is None or self.service.api is None:
            return None
        return self.service.api.url

    def start(self, stop: threading.Event) -> None:
        if self.role in ("all", "replicator"):
            self.service = build_replicator(self.config)
            self.service.wall_clock = self.wall_clock
            try:
                if self.service.group is None:  # a group's leader fixes the start when elected
                    self.service.replicator.prepare()
            except RetriableError as exc:  # source down: capture retries and starts later
                log.warning("source not reachable yet: %s", exc)
            self.service.start_api()
            self._spawn("replicator", self.service.run_capture, stop)
            self.heartbeat = build_heartbeat(self.config, self.wall_clock)
            if self.heartbeat is not None:
                self.service.heartbeat = self.heartbeat.stats.as_dict
                self._spawn("heartbeat", self.heartbeat.run, stop)
        if self.role in ("all", "apply"):
            self.channels = build_channels(
                self.config, finish=catchup_finisher(self.config), hold_on_error=True,
                wall_clock=self.wall_clock,
            )  # fmt: skip
            self.guard = build_guard(self.config, self.api_url)
            if self.guard is not None:
                self._spawn("lww guard", self.guard.run, stop)
            for channel in self.channels:
                self._spawn(f"channel {channel.name}", channel.run, stop)
            if self.config_path is not None:  # not a component: it never stops the node
                self.auto = AutoCatchup(self.config_path, self.channels)
                if self.auto.channels:
                    threading.Thread(target=self.auto.run, args=(stop,), name="drc-auto-catchup",
                                     daemon=True).start()  # fmt: skip
            if any(c.verify is not None for c in self.config.channels):  # not a component either
                self.verifier = PeriodicVerify(self.config, self._channel_state).start(stop)
        desk = build_desk(self.config, self.channels, self._report) if self.channels else None
        # What status shows of each channel: its report, and from the desk where a stop
        # happened, what continues it and the last action an operator took.
        shown = self.channel_status if desk is None else desk.channels
        if self.service is not None:
            self.service.protection = self.protection
            self.service.channels = shown
            self.service.failures = self.failures
            self.service.desk = desk
        else:
            self.apply_api = build_apply_api(
                self.config, shown, self.failures, self.protection, desk
            ).start()

    def _spawn(
        self, name: str, target: Callable[[threading.Event], None], stop: threading.Event
    ) -> None:
        component = _Component(name, threading.Thread(target=lambda: None))

        def run() -> None:
            try:
                target(stop)
            except BaseException as exc:  # kept for the node to report or raise
                component.failure.append(exc)
                log.error("%s stopped: %s", name, exc)

        component.thread = threading.Thread(target=run, name=f"drc-{name}", daemon=True)
        self._components.append(component)
        component.thread.start()

    def wait(
        self,
        stop: threading.Event,
        every_s: float,
        progress: Callable[[str], None],
        reload: Callable[[], DrcConfig] | None = None,
    ) -> None:
        """Until ``stop`` or until nothing runs; raises a fatal capture error. ``reload``
        reads the config again when :attr:`reload_requested` is set (SIGHUP)."""
        next_line = time.monotonic() + every_s
        while not stop.wait(RELOAD_POLL_S):
            if reload is not None and self.reload_requested.is_set():
                self.reload_requested.clear()
                self.reload(reload)
            if every_s > 0 and time.monotonic() >= next_line:
                next_line = time.monotonic() + every_s
                progress(self.progress_line())
            capture = next((c for c in self._components if c.name == "replicator"), None)
            if capture is not None and capture.failure:
                stop.set()
                raise capture.failure[0]
            if not any(c.thread.is_alive() for c in self._components):
                stop.set()
                failures = [c.failure[0] for c in self._components if c.failure]
                if failures:
                    raise failures[0]
                return

    def reload(self, read: Callable[[], DrcConfig]) -> list[str]:
        """Apply a re-read config to the running channels (their tables, exclusions, mappings,
        object kinds), each from its checkpoint; say what else changed and needs a restart.
        A config that does not load is logged and changes nothing. Returns the log lines."""
        said: list[str] = []
        try:
            new = read()
        except DrcError as exc:
            said.append(f"config reload refused, nothing changed: {exc}")
            log.error("%s", said[-1])
            return said
        wanted = {c.name: c for c in new.channels}
        for channel in self.channels:
            config = wanted.get(channel.name)
            if config is None:
                said.append(f"channel {channel.name} is gone from the config: restart to stop it")
                continue
            if config == channel.channel:
                continue
            if config.model_copy(update=_selection(channel.channel)) != channel.channel:
                said.append(f"channel {channel.name}: only tables, exclude, map_tables, "
                            "map_columns and objects change without a restart")  # fmt: skip
                config = channel.channel.model_copy(update=_selection(config))
            filters, subscribe = channel_filters(config, channel.conflicts is not None)
            channel.control.submit(reload_request(config, filters, subscribe))
            said.append(f"channel {channel.name}: new table selection queued")
        running = {c.name for c in self.channels}
        added = [name for name in wanted if name not in running]
        if added and self.role in ("all", "apply"):
            said.append(f"new channels {added} start at the next restart")
        old = self.config.model_dump(exclude={"channels"})
        if new.model_dump(exclude={"channels"}) != old:
            changed = sorted(
                k for k, v in new.model_dump(exclude={"channels"}).items() if old[k] != v
            )
            said.append(f"[{'], ['.join(changed)}] changed: those take effect at the next restart")
        for line in said:
            log.warning("reload: %s", line)
        return said

    def progress_line(self) -> str:
        parts = []
        if self.service is not None:
            stats = self.service.replicator.stats
            parts.append(
                f"capture: {stats.transactions} txns {stats.rows} rows, "
                f"buffer at {self.service.buffer.last_scn}"
            )
        for report in self.channel_status():
            state = report["state"]
            if state != "running" and report["error"]:
                state = f"{state.upper()}: {report['error']}"
            lag = report["lag_seconds"]
            shown = "?" if lag is None else f"{lag:.2f}s"
            conflicts = f", {report['conflicts']} conflicts" if report["conflicts"] else ""
            catchup = report.get("catchup")
            if catchup is not None and catchup["state"] == "running":
                state += ", bulk catch-up running"
            parts.append(
                f"{report['name']}: {report['transactions']} txns {report['rows']} rows"
                f"{conflicts}, lag {shown}, at {report['last_scn']} [{state}]"
            )
        unprotected = self.protection()["unprotected"] if self.guard is not None else []
        if unprotected:
            names = ", ".join(u["table"] for u in unprotected)
            parts.append(f"lww triggers MISSING on {names} (see drc status)")
        return "; ".join(parts) or "nothing to run"

    def channel_status(self) -> list[dict[str, Any]]:
        """Each apply channel's state, lag and counters (ApplyChannel.report), for status,
        metrics and progress lines."""
        return [self._report(channel) for channel in self.channels]

    def _report(self, channel: ApplyChannel) -> dict[str, Any]:
        report = channel.report()
        if self.auto is not None and (catchup := self.auto.status(channel.name)):
            report["catchup"] = catchup
        if self.verifier is not None and (verify := self.verifier.status(channel.name)):
            report["verify"] = verify
        component = next(
            (c for c in self._channel_components() if c.name == f"channel {channel.name}"), None
        )
        if component is not None and component.failure and report["state"] != STOPPED:
            failure = component.failure[0]  # died outside its own care
            error = f"{type(failure).__name__}: {failure}"
            report.update(state=STOPPED, up=False, error=error)
        return report

    def _channel_state(self, name: str) -> dict[str, Any] | None:
        channel = next((c for c in self.channels if c.name == name), None)
        return None if channel is None else channel.report()

    def failures(self) -> list[tuple[str, BaseException]]:
        """(component, error) of every component that stopped on an error, capture aside
        (the API reports that one itself), for /healthz."""
        found = [c for c in self._components if c.failure and c.name != "replicator"]
        held = [  # stopped, alive, waiting for an operator (drc channel)
            (f"channel {c.name}", c.control.failure)
            for c in self.channels
            if c.control.failure is not None
        ]
        return [(c.name, c.failure[0]) for c in found] + held

    def protection(self) -> dict[str, Any]:
        """lww protection here: tables refused DRC's triggers (and why), guard state."""
        found: dict[tuple[str, str], str] = {}
        for applier in (self.guard, *self.channels):
            if applier is not None and applier.conflicts is not None:
                found.update(applier.conflicts.unprotected)
        guard = next((c for c in self._components if c.name == "lww guard"), None)
        return {
            "guard": None if guard is None else ("STOPPED" if guard.failure else "running"),
            "guard_error": None if self.guard is None else self.guard.stats.last_error,
            "derived_tombstones": None if self.guard is None else self.guard.derived,
            "unprotected": [
                {"table": f"{schema}.{table}", "reason": reason}
                for (schema, table), reason in sorted(found.items())
            ],
        }

    def _channel_components(self) -> list[_Component]:
        return [c for c in self._components if c.name.startswith("channel ")]

    def close(self) -> None:
        if self.verifier is not None:
            self.verifier.close()
        for component in self._components:
            component.thread.join(timeout=30)
        if self.apply_api is not None:
            self.apply_api.stop()
        if self.service is not None:
            self.service.close()
