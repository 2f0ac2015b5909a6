"""Automatic catch-up: `drc run` starts `drc catchup` for a channel whose backlog grew too big.

Every :data:`CHECK_EVERY_S` the node asks each channel's remote replicator for its segments
after the channel's checkpoint (``GET /v1/segments``). When the segments that lie wholly after
it add up to ``catchup_backlog_mb`` (a channel key; 0 turns it off), the node starts
``drc catchup --config FILE --channel NAME --master catchup_master`` as a child process. The
streaming channel goes on running: it waits while the catch-up holds the lease and streams from
the checkpoint the catch-up wrote (drc.apply.handover), so nothing else is needed to resume.

An interrupted catch-up run is not this module's: the streaming channel finishes it itself
once its lease expired (drc.apply.handover, drc.catchup.driver.finish_interrupted). One
catch-up per channel at a time; its state (``idle``,
``running``, ``failed (exit N)``) and the backlog last measured are in the channel's entry of
``/v1/status`` (``drc status``). A
catch-up still running when the node stops is left to finish: stopping it would leave its range
half applied until it is run again.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from drc.client import SegmentSource, discovery
from drc.config_channels import ChannelConfig
from drc.core.scn import SCN

log = logging.getLogger(__name__)

CHECK_EVERY_S = 30.0


def segment_backlog_mb(channel: ChannelConfig, after: SCN) -> float:
    """MB of the remote's segments that lie wholly after ``after`` (the first remote that
    answers; 0 when none does: no catch-up is started on a guess)."""
    try:
        urls = discovery.members(channel.remote)
    except discovery.DiscoveryError as exc:
        log.debug("backlog of %s not known: %s", channel.name, exc)
        return 0.0
    for url in urls:
        try:
            with SegmentSource(url, token=channel.secret(), verify=channel.https_verify()) as src:
                listing = src.list(after=after)
        except Exception as exc:  # unreachable, or too old (catch-up would refuse it too)
            log.debug("backlog of %s from %s not known: %s", channel.name, url, exc)
            continue
        whole = [s for s in listing.segments if s.prev_scn >= after]
        return sum(s.size for s in whole) / 1e6
    return 0.0


@dataclass
class _State:
    process: Any = None
    state: str = "idle"
    backlog_mb: float | None = None
    runs: int = 0
    ended_at: SCN | None = None  # the channel's applied SCN when the last catch-up ended


class AutoCatchup:
    """Watches channels (objects with ``channel`` config and ``stats.last_scn``) and starts
    catch-ups (see the module docstring). ``backlog`` and ``spawn`` are replaced in tests."""

    def __init__(
        self,
        config_path: str,
        channels: Sequence[Any],
        *,
        every_s: float | None = None,  # CHECK_EVERY_S
        backlog: Callable[[ChannelConfig, SCN], float] = segment_backlog_mb,
        spawn: Callable[[list[str]], Any] = subprocess.Popen,
    ) -> None:
        self.config_path = config_path
        self.channels = [c for c in channels if c.channel.catchup_backlog_mb > 0]
        self.every_s = CHECK_EVERY_S if every_s is None else every_s
        self._backlog, self._spawn = backlog, spawn
        self._states = {c.name: _State() for c in self.channels}
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.every_s):
            self.check()

    def check(self) -> None:
        for channel in self.channels:
            state = self._states[channel.name]
            if state.process is not None:
                code = state.process.poll()
                if code is None:
                    continue
                with self._lock:
                    state.process = None
                    state.state = "idle" if code == 0 else f"failed (exit {code})"
                state.ended_at = channel.stats.last_scn
            applied = channel.stats.last_scn
            if applied is None:
                continue  # not started yet
            if getattr(channel, "catchup_unfinished", None) is not None:
                continue  # the channel is finishing an interrupted run (drc.apply.handover)
            if applied == state.ended_at:
                continue  # (paused) not yet streaming from the checkpoint the catch-up wrote
            size = self._backlog(channel.channel, applied)
            state.backlog_mb = round(size, 1)
            if size >= channel.channel.catchup_backlog_mb:
                why = f"backlog of {size:.0f} MB (catchup_backlog_mb = "
                self._start(channel, state, why + f"{channel.channel.catchup_backlog_mb})")

    def _start(self, channel: Any, state: _State, why: str) -> None:
        argv = [sys.executable, "-m", "drc.cli", "catchup", "--config", self.config_path,
                "--channel", channel.name, "--master", channel.channel.catchup_master]  # fmt: skip
        log.info("channel %s: %s: starting a bulk catch-up", channel.name, why)
        with self._lock:
            state.process = self._spawn(argv)
            state.state, state.runs = "running", state.runs + 1

    def status(self, name: str) -> dict[str, Any] | None:
        """The channel's catch-up state for /v1/status (None: automatic catch-up is off)."""
        state = self._states.get(name)
        if state is None:
            return None
        with self._lock:
            return {"state": state.state, "backlog_mb": state.backlog_mb, "runs": state.runs}
