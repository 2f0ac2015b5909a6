"""Run every benchmark in bench/ in turn (each prints its own markdown table).

Usage: python bench/run_all.py [--quick]. Copy the tables, with this command, into
docs/benchmarks.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = [  # in data-flow order
    "bench_codec.py",
    "bench_eventbuffer.py",
    "bench_replicator.py",
    "bench_api.py",
    "bench_apply.py",
    "bench_conflicts.py",
    "bench_catchup.py",
    "bench_snapshot.py",
    "bench_hotpath.py",
    "bench_latency.py",
    "bench_group.py",
    "bench_mq_sink.py",
    "bench_groups.py",
    "bench_wan.py",
]


def main() -> int:
    here = Path(__file__).parent
    status = 0
    for name in BENCHMARKS:
        print(f"\n## {name}\n", flush=True)
        status |= subprocess.run([sys.executable, str(here / name), *sys.argv[1:]]).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
