"""Run a config's apply channels in this process: ``python -m drc.apply --config FILE``.

Stops on SIGTERM/SIGINT (the open group is committed first; a second signal exits at once).
With ``--stats-every S`` it prints every channel's stats as one JSON line per S seconds on
stdout. Exit status 1 if a channel stopped on an error (the error is logged and printed; its
checkpoint was not advanced).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time

from drc.apply.lww_guard import build_guard
from drc.apply.service import build_channels, run_channels
from drc.config import load_config
from drc.core.errors import DrcError
from drc.runtime import catchup_finisher, freeze_startup_heap

STOP_GRACE_S = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m drc.apply", description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--channel", action="append", default=[], help="only these channels")
    parser.add_argument("--stats-every", type=float, default=0.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per pull otherwise
    try:
        config = load_config(args.config)
        channels = build_channels(config, args.channel, finish=catchup_finisher(config))
        guard = None if args.channel else build_guard(config)  # drc.apply.lww_guard
        if guard is not None:
            channels.append(guard)
    except (DrcError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        if stop.is_set():  # asked twice: leave now; the checkpoint is in the target anyway
            os._exit(1)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    threading.Thread(target=_watchdog, args=(stop,), daemon=True).start()
    if args.stats_every > 0:
        threading.Thread(
            target=_report, args=(channels, stop, args.stats_every), daemon=True
        ).start()
    freeze_startup_heap()
    failures = run_channels(channels, stop)
    for name, failure in failures.items():
        print(f"error: channel {name}: {failure}", file=sys.stderr)
    return 1 if failures else 0


def _watchdog(stop: threading.Event) -> None:
    """Once asked to stop, give the channels STOP_GRACE_S to commit and close, then exit."""
    stop.wait()
    time.sleep(STOP_GRACE_S)
    print(f"error: channels did not stop within {STOP_GRACE_S}s; exiting", file=sys.stderr)
    os._exit(1)


def _report(channels: list, stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        for channel in channels:
            print(json.dumps({"channel": channel.name, **channel.stats.as_dict()}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
