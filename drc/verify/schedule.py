"""Periodic verify inside ``drc run``: channels with ``[channels.verify]`` compared on a schedule.

One thread (``drc-verify``) runs the due verifies one at a time, never two at once::

    wait until a channel's run is due (every_s after its last run ended, or after the start)
    wait while that channel is not running (paused, stopped, catching up) or lags more
        than max_lag_s: a verify then could only leave its differences unsettled
    drc.verify.driver.run_verify on the process's Spark session, report only (no repair)
    keep the result for /metrics (drc_verify_*), /v1/status and drc status

It must not disturb apply:

- the thread lowers its own CPU priority (nice 10 on Linux, where it is per thread), and the
  Spark JVM it starts, and that JVM's Python workers, inherit it;
- the session is built at the first run and kept (a JVM start costs seconds to a minute on a
  busy host), with the small heaps of drc.spark.session;
- at shutdown the running comparison's Spark job is cancelled, a recheck stops at its next
  wait, and the session is stopped: a verify only reads, so nothing is left half done.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from drc.config import DrcConfig
from drc.config_channels import ChannelConfig
from drc.core.rowsum import first_keys
from drc.verify.driver import SPARK_CONF, Options, Report, run_verify

log = logging.getLogger(__name__)

NICE = 10
RECHECK_EVERY_S = 5.0  # a due run whose channel is not ready looks again after this
JOB_GROUP = "drc-periodic-verify"
RESULTS = ("equal", "differ", "failed")
KEYS_SHOWN = 20  # keys of differing rows kept per table


@dataclass
class ChannelVerify:
    """What status and metrics show of one channel's periodic verify."""

    channel: ChannelConfig
    next_run: float  # Unix time the next run is due
    state: str = "scheduled"  # scheduled | waiting | running | stopped
    waiting_for: str | None = None  # why a due run has not started
    runs: dict[str, int] = field(default_factory=lambda: {r: 0 for r in RESULTS})
    last_started: float | None = None
    last_finished: float | None = None
    last_seconds: float | None = None
    last_error: str | None = None
    last: dict[str, Any] | None = None  # the last finished run's report, by table

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "waiting_for": self.waiting_for,
            "every_s": self.channel.verify.every_s if self.channel.verify else None,
            "next_run": self.next_run,
            "runs": dict(self.runs),
            "last_started": self.last_started,
            "last_finished": self.last_finished,
            "last_seconds": self.last_seconds,
            "last_error": self.last_error,
            "last": self.last,
        }


def summary(report: Report) -> dict[str, Any]:
    """A finished run as status shows it: totals and per table rows, differences by kind."""
    return {
        "rows": report.rows,
        "differences": report.differences,
        "stalled": report.stalled,
        "tables": [
            {
                "source": t.source,
                "target": t.target,
                "rows": t.rows,
                "differences": t.counts(),
                "keys": first_keys(t.differences, KEYS_SHOWN),
                "unsettled": len(t.unsettled),
                "skipped": t.skipped,
            }
            for t in report.tables
        ],
    }


class PeriodicVerify:
    """The ``drc-verify`` thread of a node (see the module docstring). ``channel_state`` gives
    an apply channel's report (state, lag_seconds) by name; ``runner`` and ``spark`` are
    replaced in tests."""

    def __init__(
        self,
        config: DrcConfig,
        channel_state: Callable[[str], dict[str, Any] | None],
        *,
        runner: Callable[..., Report] = run_verify,
        spark: Callable[[str], Any] | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._state_of = channel_state
        self._runner = runner
        self._session_on = spark or self._spark
        self._now = wall_clock
        start = wall_clock()
        self.channels = {
            c.name: ChannelVerify(c, start + c.verify.every_s)
            for c in config.channels
            if c.verify is not None
        }
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._session: Any = None
        self._master: str | None = None
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> PeriodicVerify:
        self._thread = threading.Thread(target=self.run, args=(stop,), name="drc-verify",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def status(self, name: str) -> dict[str, Any] | None:
        entry = self.channels.get(name)
        if entry is None:
            return None
        with self._lock:
            return entry.as_dict()

    def run(self, stop: threading.Event) -> None:
        lower_priority()
        watcher = threading.Thread(target=self._cancel_on, args=(stop,), daemon=True,
                                   name="drc-verify-stop")  # fmt: skip
        watcher.start()
        try:
            while not self._stop.is_set():
                entry = self._next_ready()
                if entry is None:
                    self._stop.wait(self._until_next())
                    continue
                self._run_one(entry)
        finally:
            self._stop.set()
            self._stop_session()

    def close(self, timeout: float = 30.0) -> None:
        """Stop (cancelling a running comparison) and wait for the thread."""
        self._cancel()
        if self._thread is not None:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ scheduling

    def _next_ready(self) -> ChannelVerify | None:
        """The most overdue run whose channel is ready; the due ones that are not say why."""
        now = self._now()
        found = None
        for entry in sorted(self.channels.values(), key=lambda e: e.next_run):
            if entry.next_run > now:
                break
            why = self._not_ready(entry)
            if why is not None:
                with self._lock:
                    entry.state, entry.waiting_for = "waiting", why
            elif found is None:
                found = entry
        return found

    def _until_next(self) -> float:
        """How long to sleep: until the next run is due, and no more than RECHECK_EVERY_S
        (a due run waiting for its channel is looked at again after that)."""
        soonest = min((e.next_run for e in self.channels.values()), default=self._now() + 60)
        ahead = soonest - self._now()
        return RECHECK_EVERY_S if ahead <= 0 else max(0.1, min(ahead, RECHECK_EVERY_S))

    def _not_ready(self, entry: ChannelVerify) -> str | None:
        """Why the channel's run should wait now (None: it may start)."""
        state = self._state_of(entry.channel.name)
        if state is None:
            return None  # the channel runs in another process (--role replicator)
        if state.get("state") != "running":
            return f"the channel is {state.get('state')}"
        lag = state.get("lag_seconds")
        limit = entry.channel.verify.max_lag_s if entry.channel.verify else 0.0
        if lag is not None and lag > limit:
            return f"the channel lags {lag:.0f}s (max_lag_s {limit:g})"
        return None

    def _run_one(self, entry: ChannelVerify) -> None:
        schedule = entry.channel.verify
        assert schedule is not None
        with self._lock:
            entry.state, entry.waiting_for = "running", None
            entry.last_started = self._now()
        began = time.monotonic()
        options = Options(
            tables=",".join(schedule.tables) or None, master=schedule.master,
            chunk_rows=schedule.chunk_rows, streams=schedule.streams,
            max_rounds=schedule.rounds, job_group=JOB_GROUP, stop=self._stop,
        )  # fmt: skip
        result, error, report = "failed", None, None
        try:
            session = self._session_on(schedule.master)
            report = self._runner(self.config, entry.channel.name, options, session=session,
                                  out=lambda line: log.debug("verify %s: %s",
                                                             entry.channel.name, line))  # fmt: skip
            result = "differ" if report.differences else "equal"
        except Exception as exc:  # a failed run is reported; the schedule goes on
            error = f"{type(exc).__name__}: {exc}"
            if self._stop.is_set():
                result, error = "", None  # stopped at shutdown: not a failure
            else:
                log.warning("periodic verify of %s failed: %s", entry.channel.name, error)
        with self._lock:
            if result:
                entry.runs[result] += 1
            entry.last_finished = self._now()
            entry.last_seconds = time.monotonic() - began
            entry.last_error = error
            if report is not None:
                entry.last = summary(report)
            entry.state = "stopped" if self._stop.is_set() else "scheduled"
            entry.next_run = self._now() + schedule.every_s
        if report is not None:
            log.info("periodic verify of %s: %d rows, %d differences, %.1fs",
                     entry.channel.name, report.rows, report.differences,
                     entry.last_seconds)  # fmt: skip

    # ------------------------------------------------------------------ Spark

    def _spark(self, master: str) -> Any:
        """The process's session on ``master`` (built at the first run, from this niced
        thread, so the JVM and its workers inherit the priority)."""
        if self._session is not None and self._master != master:
            self._stop_session()
        if self._session is None:
            from drc.spark.session import build_session, check_master

            check_master(master)
            self._session = build_session(master, "drc-periodic-verify", conf=SPARK_CONF)
            self._master = master
            if self._stop.is_set():  # stopped while the JVM started
                self._stop_session()
                raise RuntimeError("stopped")
        return self._session

    def _stop_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.stop()
            except Exception as exc:  # the JVM may be gone already
                log.debug("stopping the verify Spark session: %s", exc)

    def _cancel_on(self, stop: threading.Event) -> None:
        while not self._stop.is_set():
            if stop.wait(1.0):
                self._cancel()
                return

    def _cancel(self) -> None:
        self._stop.set()
        session = self._session
        if session is not None:
            try:
                session.sparkContext.cancelJobGroup(JOB_GROUP)
            except Exception as exc:  # not started, or already stopping
                log.debug("cancelling the verify job: %s", exc)


def lower_priority(nice: int = NICE) -> None:
    """Nice the calling thread (Linux: per thread; processes it starts inherit it)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
    except OSError as exc:
        log.debug("cannot lower the verify thread's priority: %s", exc)
