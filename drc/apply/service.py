"""Build the apply channels a datacenter config asks for (used by the composition root)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from drc.apply.channel import ApplyChannel, target_settings
from drc.config import DrcConfig

JOIN_POLL_S = 0.2


def build_channels(config: DrcConfig, names: Sequence[str] = ()) -> list[ApplyChannel]:
    """One ApplyChannel per ``[[channels]]`` entry (or only those named), writing into
    ``[target]``, or into the ``[source]`` database when there is no [target]."""
    unknown = set(names) - {c.name for c in config.channels}
    if unknown:
        known = ", ".join(c.name for c in config.channels) or "none"
        raise ValueError(f"no channel named {sorted(unknown)} in the config (channels: {known})")
    target = target_settings(config.target_or_source())
    return [
        ApplyChannel(channel, target, conflicts=config.conflicts, datacenter=config.datacenter.name)
        for channel in config.channels
        if not names or channel.name in names
    ]


def run_channels(
    channels: Sequence[ApplyChannel], stop: threading.Event
) -> dict[str, BaseException]:
    """Run every channel in its own thread until ``stop``; returns the errors that stopped any.

    A channel that fails stops alone; the others go on (their streams are independent).
    """
    failures: dict[str, BaseException] = {}

    def run(channel: ApplyChannel) -> None:
        try:
            channel.run(stop)
        except BaseException as exc:  # reported to the caller, which decides the exit status
            failures[channel.name] = exc

    threads = [
        threading.Thread(target=run, args=(c,), name=f"drc-apply-{c.name}", daemon=True)
        for c in channels
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        # Never an unbounded join: a blocked join keeps the main thread from running a signal
        # handler when the kernel delivers SIGTERM to another thread (the process would hang).
        while thread.is_alive():
            thread.join(JOIN_POLL_S)
    return failures
