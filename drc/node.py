"""A datacenter's DRC process: the replicator (capture + pull API) and its apply channels.

``drc run --role all`` runs both in one process, ``--role replicator`` or ``--role apply`` one
of them (e.g. apply on other hosts). Each component runs in its own thread:

- a fatal capture error stops the whole node and is raised: the process exits non-zero and its
  supervisor (systemd) restarts it, resuming from the buffer's last SCN;
- a channel that stops with an error stops alone (streams are independent); the node goes on
  while anything still runs, and reports the failure on every progress line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from drc.apply.channel import ApplyChannel
from drc.apply.lww_guard import LwwGuard, build_guard
from drc.apply.service import build_channels
from drc.catchup.auto import AutoCatchup
from drc.config import DrcConfig
from drc.core.errors import RetriableError
from drc.runtime import ReplicatorService, build_replicator

log = logging.getLogger(__name__)
ROLES = ("all", "replicator", "apply")


@dataclass
class _Component:
    name: str
    thread: threading.Thread
    failure: list[BaseException] = field(default_factory=list)


class Node:
    def __init__(
        self, config: DrcConfig, role: str = "all", config_path: str | None = None
    ) -> None:
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        self.config = config
        self.role = role
        self.service: ReplicatorService | None = None
        self.channels: list[ApplyChannel] = []
        self.guard: LwwGuard | None = None
        self.config_path = config_path  # for the automatic catch-ups it may start
        self.auto: AutoCatchup | None = None
        self._components: list[_Component] = []

    @property
    def api_url(self) -> str | None:
        if self.service is None or self.service.api is None:
            return None
        return self.service.api.url

    def start(self, stop: threading.Event) -> None:
        if self.role in ("all", "replicator"):
            self.service = build_replicator(self.config)
            try:
                self.service.replicator.prepare()
            except RetriableError as exc:  # source down: capture retries and starts later
                log.warning("source not reachable yet: %s", exc)
            self.service.start_api()
            self._spawn("replicator", self.service.run_capture, stop)
        if self.role in ("all", "apply"):
            self.channels = build_channels(self.config)
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
        if self.service is not None:
            self.service.protection = self.protection
            self.service.channels = self.channel_status

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

    def wait(self, stop: threading.Event, every_s: float, progress: Callable[[str], None]) -> None:
        """Until ``stop`` or until nothing runs; raises a fatal capture error."""
        while not stop.wait(every_s if every_s > 0 else 1.0):
            if every_s > 0:
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

    def progress_line(self) -> str:
        parts = []
        if self.service is not None:
            stats = self.service.replicator.stats
            parts.append(
                f"capture: {stats.transactions} txns {stats.rows} rows, "
                f"buffer at {self.service.buffer.last_scn}"
            )
        for channel, component in zip(self.channels, self._channel_components(), strict=True):
            state = f"STOPPED ({component.failure[0]})" if component.failure else "running"
            catchup = None if self.auto is None else self.auto.status(channel.name)
            if catchup is not None and catchup["state"] == "running":
                state += ", bulk catch-up running"
            applied = channel.stats
            lag = "?" if applied.lag_seconds is None else f"{applied.lag_seconds:.2f}s"
            conflicts = f", {applied.conflicts} conflicts" if applied.conflicts else ""
            parts.append(
                f"{channel.name}: {applied.transactions} txns {applied.rows} rows{conflicts}, "
                f"lag {lag}, at {applied.last_scn} [{state}]"
            )
        unprotected = self.protection()["unprotected"] if self.guard is not None else []
        if unprotected:
            names = ", ".join(u["table"] for u in unprotected)
            parts.append(f"lww triggers MISSING on {names} (see drc status)")
        return "; ".join(parts) or "nothing to run"

    def channel_status(self) -> list[dict[str, Any]]:
        """Each apply channel's counters (drc.apply.stats), for status and metrics."""
        out = []
        for channel, component in zip(self.channels, self._channel_components(), strict=True):
            state = "STOPPED" if component.failure else "running"
            entry = {"name": channel.name, "state": state, **channel.stats.as_dict()}
            if self.auto is not None and (catchup := self.auto.status(channel.name)):
                entry["catchup"] = catchup
            out.append(entry)
        return out

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
        for component in self._components:
            component.thread.join(timeout=30)
        if self.service is not None:
            self.service.close()
