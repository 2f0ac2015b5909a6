"""Many ``/v1/stream`` readers on one replicator (tests/integration/test_fan_out.py and
bench/bench_fan_out.py).

The replicator runs as its own process (``drc replicator run``), so its RSS and CPU
(``/proc/<pid>``) are its own, not the readers'. A :class:`Reader` reads every frame and keeps
a count and a CRC of the records it got (one, the reference, also decodes them); a stalled
reader is a socket that sent its request and never reads (a small receive buffer, so the
replicator's side fills soon).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from drc.api import streamwire, wire
from drc.core.scn import SCN
from drc.sandbox.sandbox import ServerInfo
from tests.support.config import server_toml
from tests.support.servers import connect, execute, master_position

TOKEN = "fan-out-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TICKS = os.sysconf("SC_CLK_TCK")
_HEAD = struct.Struct(">cI")
_META = struct.Struct(">H")


@dataclass
class Replicator:
    proc: subprocess.Popen[str]
    url: str

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS in /proc status")

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime

    def metric(self, name: str) -> float:
        text = httpx.get(self.url + wire.PATH_METRICS, headers=AUTH, timeout=30).text
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")


def prepare(server: ServerInfo, schema: str) -> tuple[str, int]:
    """A fresh ``schema.t`` (id, a blob); the binlog position after it."""
    execute(server, f"DROP DATABASE IF EXISTS {schema}", f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.t (id INT PRIMARY KEY, b MEDIUMBLOB)")  # fmt: skip
    return master_position(server)


def write(server: ServerInfo, schema: str, transactions: int, rows: int, row_bytes: int) -> None:
    """``transactions`` transactions of ``rows`` incompressible rows each."""
    conn = connect(server, autocommit=False)
    try:
        with conn.cursor() as cur:
            for n in range(transactions):
                values = [(n * rows + k, os.urandom(row_bytes)) for k in range(rows)]
                cur.executemany(f"INSERT INTO {schema}.t (id, b) VALUES (%s, %s)", values)
                conn.commit()
    finally:
        conn.close()


@contextmanager
def replicator_process(
    server: ServerInfo, tmp_path: Path, schema: str, start: tuple[str, int], api: str = ""
) -> Iterator[Replicator]:
    """``drc replicator run`` capturing ``schema`` from ``start``; ``api``: more [api] lines."""
    config = tmp_path / "fan.toml"
    config.write_text(f"""
[datacenter]
name = "dc1"
{server_toml("source", server, replica_server_id=91028)}
[replicator]
buffer_dir = "{tmp_path / "buf"}"
start_from = "{start[0]}:{start[1]}"
include = ["{schema}.*"]
heartbeat_interval_s = 0
[api]
port = 0
tokens = ["{TOKEN}"]
max_long_polls = 2000
max_long_polls_per_token = 2000
{api}
""")
    argv = [sys.executable, "-m", "drc.cli", "replicator", "run", "--config", str(config)]
    log = (tmp_path / "replicator.log").open("w")
    proc = subprocess.Popen(
        [*argv, "--progress-every", "0"], stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("API serving on http://"), f"{line!r}: the replicator did not start"
        yield Replicator(proc, line.split()[-1])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def stream_path(schema: str) -> str:
    return f"{streamwire.PATH_STREAM}?after=0:0:0:0&tables={schema}.t&wait_ms=500"


def stalled_socket(url: str, path: str) -> socket.socket:
    """A stream requested and never read."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    sock.sendall(request.encode())
    return sock


@dataclass
class Target:
    """Where readers stop: set once the reference has every transaction."""

    scn: SCN | None = None


@dataclass
class Reader:
    """One stream read to the end: record count, CRC of the records' bytes in order."""

    decode: bool = False  # the reference: decode every record, keep the SCNs
    count: int = 0
    crc: int = 0
    next: SCN = SCN.ZERO
    frames: int = 0
    scns: list[SCN] = field(default_factory=list)
    end: dict[str, Any] | None = None

    async def run(self, client: httpx.AsyncClient, path: str, target: Target) -> None:
        buf = bytearray()
        async with client.stream("GET", path, headers=AUTH) as response:
            assert response.status_code == 200, await response.aread()
            async for chunk in response.aiter_raw():
                buf += chunk
                used = self._frames(buf)
                del buf[:used]
                if self.end is not None:
                    raise AssertionError(f"the stream ended: {self.end}")
                if target.scn is not None and self.next >= target.scn:
                    return

    def _frames(self, buf: bytearray) -> int:
        offset = 0
        view = memoryview(buf)
        while len(buf) - offset >= _HEAD.size:
            kind, length = _HEAD.unpack_from(buf, offset)
            start = offset + _HEAD.size
            if len(buf) - start < length:
                break
            body = view[start : start + length]
            if kind == streamwire.BATCH:
                (meta_len,) = _META.unpack_from(body)
                meta = bytes(body[_META.size : _META.size + meta_len]).decode().split()
                records = body[_META.size + meta_len :]
                self.count += int(meta[2])
                self.crc = zlib.crc32(records, self.crc)
                self.next = SCN.parse(meta[0])
                if self.decode:
                    frame = streamwire.parse_frame(kind, body)
                    self.scns += [t.scn for t in frame.transactions]
            elif kind == streamwire.HEARTBEAT:
                self.next = SCN.parse(bytes(body).decode().split()[0])
            else:
                self.end = streamwire.parse_frame(kind, body).end
            self.frames += 1
            offset = start + length
        view.release()
        return offset
