"""Prometheus text exposition (format 0.0.4), written by hand: a few gauges and counters do not
need a client library.

:class:`ApiMetrics` holds what only the API knows (requests by route and status, long-poll
waiters, records served); :func:`render` adds the buffer and capture figures read at scrape time.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ApiMetrics:
    """Thread-safe counters, updated from the event loop and from pull worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str, int]] = Counter()
        self._waiting = 0
        self._served_records = 0
        self._served_bytes = 0
        self._compression_in = 0
        self._compression_out = 0

    def request(self, method: str, route: str, status: int) -> None:
        with self._lock:
            self._requests[(method, route, status)] += 1

    def served(self, records: int, size: int) -> None:
        with self._lock:
            self._served_records += records
            self._served_bytes += size

    def compressed(self, records: int, sent: int) -> None:
        """Record bytes of a body or frame a client asked to compress, and the bytes sent."""
        with self._lock:
            self._compression_in += records
            self._compression_out += sent

    @property
    def compression(self) -> tuple[int, int]:
        with self._lock:
            return self._compression_in, self._compression_out

    @contextmanager
    def waiting(self) -> Iterator[None]:
        with self._lock:
            self._waiting += 1
        try:
            yield
        finally:
            with self._lock:
                self._waiting -= 1

    @property
    def waiters(self) -> int:
        return self._waiting

    def snapshot(self) -> tuple[dict[tuple[str, str, int], int], int, int, int]:
        with self._lock:
            return dict(self._requests), self._waiting, self._served_records, self._served_bytes


@dataclass
class Family:
    """One metric family: name, type, help, and samples (labels -> value)."""

    name: str
    kind: str  # "gauge" | "counter"
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float | None, **labels: str) -> Family:
        if value is not None:
            self.samples.append((labels, float(value)))
        return self


def api_families(metrics: ApiMetrics) -> list[Family]:
    requests, waiting, records, size = metrics.snapshot()
    by_route = Family("drc_api_requests_total", "counter", "HTTP requests by route and status")
    for (method, route, status), count in sorted(requests.items()):
        by_route.add(count, method=method, route=route, status=str(status))
    return [
        by_route,
        Family(
            "drc_api_long_poll_waiters", "gauge", "Pulls and streams waiting for a commit now"
        ).add(waiting),
        Family(
            "drc_api_served_records_total", "counter", "Records sent by /v1/events and /v1/stream"
        ).add(records),
        Family(
            "drc_api_served_bytes_total",
            "counter",
            "Record bytes sent by /v1/events and /v1/stream",
        ).add(size),
        Family(
            "drc_api_compression_input_bytes_total",
            "counter",
            "Record bytes of answers whose client asked for compression (X-DRC-Compression)",
        ).add(metrics.compression[0]),
        Family(
            "drc_api_compression_output_bytes_total",
            "counter",
            "Bytes sent for them: input / output is the compression ratio on the wire",
        ).add(metrics.compression[1]),
    ]


def render(families: list[Family]) -> str:
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            lines.append(f"{family.name}{_labels(labels)} {_number(value)}")
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{name}="{_escape_label(value)}"' for name, value in labels.items())
    return "{" + inner + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
