"""Bulk catch-up killed midway, and automatic catch-up in `drc run`: dc1 captured and served in
process, its backlog replayed into dc2 by `drc catchup` (a child process, real Spark in local
mode) or by the catch-up `drc run` starts (drc.node.Node in process, role apply).

A killed catch-up leaves part of its range applied beyond the channel checkpoint: a re-run, or
the streaming channel once the lease expired, finishes it; streaming never applies that range
again (the keyless `events` table would get duplicate rows)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from drc.apply.service import build_channel
from drc.catchup import auto
from drc.catchup.executor import cache_dir
from drc.cli.main import cli
from drc.config import load_config
from drc.node import Node
from drc.runtime import catchup_finisher
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo
from tests.support.apply import Running, assert_same
from tests.support.catchup import (
    SCHEMA,
    TABLES,
    checkpoint_of,
    config_for,
    prepare,
    served,
    workload,
)
from tests.support.servers import execute, master_position, query
from tests.support.waits import mark_end, wait_end, wait_for

pytestmark = pytest.mark.integration


def argv_for(path: Path, channel: str, lease_ttl: str = "3") -> list[str]:
    """`drc catchup` cutting the range into many small batches (a kill lands midway)."""
    return [sys.executable, "-m", "drc.cli", "catchup", "--config", str(path), "--channel",
            channel, "--master", "local[2]", "--partitions", "3", "--batch-changes", "5",
            "--lease-ttl", lease_ttl]  # fmt: skip


def done_batches(server: ServerInfo) -> int:
    try:
        return int(query(server, "SELECT COUNT(*) FROM drc.catchup_done")[0][0])
    except Exception:  # not created yet
        return 0


def events(server: ServerInfo, schema: str) -> int:
    return int(query(server, f"SELECT COUNT(*) FROM {schema}.events")[0][0])


@contextmanager
def driver(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The catch-up driver in a session of its own: on exit it, its Spark JVM and its Python
    workers are killed (-9) if still there."""
    with open(log, "wb") as output:
        proc = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def wait_batches(
    proc: subprocess.Popen[bytes],
    server: ServerInfo,
    log: Path,
    count: int,
    also: Callable[[], bool] = lambda: True,
) -> None:
    """Until ``count`` batches committed (and ``also()``), the driver still running."""
    deadline = time.monotonic() + 600
    while done_batches(server) < count or not also():
        assert proc.poll() is None, "the catch-up ended before it could be killed: " + tail(log)
        assert time.monotonic() < deadline, "no batch committed: " + tail(log)
        time.sleep(0.02)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def kill_midway(argv: list[str], server: ServerInfo, log: Path) -> None:
    """Run the catch-up and kill -9 its driver (with its JVM and workers) midway."""
    with driver(argv, log) as proc:
        wait_batches(proc, server, log, 3)
        os.killpg(proc.pid, signal.SIGKILL)
    assert done_batches(server) > 0


def backlog(dc1: ServerInfo, schema: str, capture: Any, txns: int = 800) -> None:
    execute(dc1, f"CREATE DATABASE {schema}", *(t.replace(SCHEMA, schema) for t in TABLES))
    workload(dc1, schema, seed=9, txns=txns, ddl_at=None)
    capture.wait_for(master_position(dc1))


@pytest.mark.slow
def test_killing_the_catchup_driver_midway_then_running_it_again_ends_equal(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "catchup_kill"
    prepare(dc1, dc2, schema)
    with served(dc1, tmp_path, schema) as (capture, url):
        backlog(dc1, schema, capture)
        argv = argv_for(config_for(tmp_path, dc2, url, "kill", schema), "kill")
        kill_midway(argv, dc2, tmp_path / "catchup.log")
        assert checkpoint_of(dc2, "kill") != str(capture.buffer.last_scn), "not the range end"
        left = dead_run_cache(dc2, "kill")
        again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "resuming the interrupted catch-up run" in again.stdout
        assert skipped(again.stdout) > 0, again.stdout[-3000:]
        assert checkpoint_of(dc2, "kill") == str(capture.buffer.last_scn)
        assert not left.exists(), "the killed run's segment copies were removed"
    assert_same(dc1, dc2, schema)  # the keyless table's rows included: none twice


def dead_run_cache(server: ServerInfo, channel: str) -> Path:
    """The segment copies the killed run left on this host (they exist: the test can fail)."""
    ((owner,),) = query(server, "SELECT owner FROM drc.catchup_run WHERE channel = %s", (channel,))
    assert cache_dir(owner).is_dir(), "the killed run left no copies"
    return cache_dir(owner)


def skipped(output: str) -> int:
    found = re.search(r"(\d+) batches already done by an earlier run", output)
    assert found is not None, output[-3000:]
    return int(found[1])


@contextmanager
def apply_node(path: Path) -> Iterator[Node]:
    """`drc run --role apply --config PATH` in this process (its status API on a free port)."""
    with open(path, "a") as config:
        config.write('[api]\nhost = "127.0.0.1"\nport = 0\n')
    stop = threading.Event()
    node = Node(load_config(path), role="apply", config_path=str(path))
    try:
        node.start(stop)
        yield node
    finally:
        stop.set()
        node.close()


@pytest.mark.slow
def test_after_a_killed_catchup_streaming_finishes_its_run_then_streams_nothing_twice(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """The catch-up is not run again: once its lease expired, the streaming channel (automatic
    catch-up off) finishes the run itself, skipping what it committed, then streams on."""
    schema = "catchup_resume"
    prepare(dc1, dc2, schema)
    with served(dc1, tmp_path, schema) as (capture, url):
        backlog(dc1, schema, capture)
        path = config_for(tmp_path, dc2, url, "resume", schema, catchup_backlog_mb=0)
        log = tmp_path / "catchup.log"
        # A lease of 10 s, not 3: on a loaded host a renewal can come late, and a catch-up that
        # lost its lease stops on its own before the test can kill it.
        with driver(argv_for(path, "resume", lease_ttl="10"), log) as proc:  # killed midway
            wait_batches(proc, dc2, log, 3, lambda: events(dc2, schema) > 0)
            os.killpg(proc.pid, signal.SIGKILL)
        checkpoint = checkpoint_of(dc2, "resume")
        assert checkpoint != str(capture.buffer.last_scn), "killed midway"
        assert query(dc2, "SELECT COUNT(*) FROM drc.catchup_run") == [(1,)]
        left = dead_run_cache(dc2, "resume")
        config = load_config(path)
        finish = catchup_finisher(config)(config.channels[0])  # as drc run hands it over
        channel = build_channel(config.channels[0], config.target_or_source(), finish=finish)
        with Running(channel) as running:
            workload(dc1, schema, seed=10, txns=50, ddl_at=None)  # streamed after the run
            wait_end(dc2, schema, mark_end(dc1, schema), running, timeout=300)
        assert channel.stats.idempotent_fixes == 0, "nothing applied twice"
        assert channel.catchup_unfinished is None
        assert query(dc2, "SELECT COUNT(*) FROM drc.catchup_run") == [(0,)]
        assert query(dc2, "SELECT COUNT(*) FROM drc.catchup_done") == [(0,)]
        assert not left.exists(), "the killed run's segment copies were removed"
    assert_same(dc1, dc2, schema)  # the keyless events table row for row: none twice


def python_workers(root: int) -> list[int]:
    """The Spark Python workers under process ``root``: children of a pyspark.daemon."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            commands[int(entry)] = (
                Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            )
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])

    def under(pid: int) -> bool:
        while pid > 1:
            if pid == root:
                return True
            pid = parents.get(pid, 0)
        return False

    return [
        pid for pid, command in commands.items()
        if "pyspark.daemon" in command and "pyspark.daemon" in commands.get(parents.get(pid, 0), "")
        and under(pid)
    ]  # fmt: skip


@pytest.mark.slow
def test_killing_the_executors_python_workers_midway_is_retried_and_ends_equal(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    schema = "catchup_worker"
    prepare(dc1, dc2, schema)
    with served(dc1, tmp_path, schema) as (capture, url):
        backlog(dc1, schema, capture, txns=1500)  # a longer apply stage to kill workers in
        argv = argv_for(config_for(tmp_path, dc2, url, "worker", schema), "worker", "30")
        log = tmp_path / "catchup.log"
        with driver(argv, log) as proc:
            wait_batches(proc, dc2, log, 3)
            workers = python_workers(proc.pid)
            assert workers, "Spark's Python workers"
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
            assert proc.wait(timeout=600) == 0, tail(log)
        output = log.read_text(errors="replace")
        assert skipped(output) > 0, "a retried task skipped what it had committed"
        assert checkpoint_of(dc2, "worker") == str(capture.buffer.last_scn)
    assert_same(dc1, dc2, schema)


def executor_jvms() -> set[int]:
    """The Spark executor JVMs running on this host (standalone workers start them)."""
    found = set()
    for entry in os.listdir("/proc"):
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:  # not a process, or gone meanwhile
            continue
        if b"CoarseGrainedExecutorBackend" in command:
            found.add(int(entry))
    return found


@pytest.mark.slow
def test_killing_the_executor_jvm_on_the_standalone_cluster_midway_ends_equal(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    """kill -9 of the executor (its JVM and so its Python workers) while it writes: the
    standalone master starts another executor and Spark runs the lost tasks again, skipping
    what they committed; were the run to fail instead, running it again ends equal."""
    spark = Sandbox(sandbox.dir).up(datacenters=len(sandbox.servers), with_spark=True).spark
    assert spark is not None
    schema = "catchup_executor"
    prepare(dc1, dc2, schema)
    with served(dc1, tmp_path, schema) as (capture, url):
        backlog(dc1, schema, capture, txns=1500)
        path = config_for(tmp_path, dc2, url, "executor", schema)
        argv = [*argv_for(path, "executor", "30")]
        argv[argv.index("--master") + 1] = spark.master_url
        log, before = tmp_path / "catchup.log", executor_jvms()
        with driver(argv, log) as proc:
            wait_batches(proc, dc2, log, 3)
            ours = executor_jvms() - before
            assert ours, "the run's executor JVM"
            for pid in ours:
                os.kill(pid, signal.SIGKILL)
            code = proc.wait(timeout=600)
        print("executor killed; the run", "failed, run again" if code else "went on (retried)")
        if code != 0:  # the job failed: a re-run resumes it
            again = subprocess.run(argv, capture_output=True, text=True, timeout=600)
            assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
            output = again.stdout
        else:
            output = log.read_text(errors="replace")
        assert skipped(output) > 0, "what the killed executor committed was skipped"
        assert checkpoint_of(dc2, "executor") == str(capture.buffer.last_scn)
    assert_same(dc1, dc2, schema)


@pytest.mark.slow
def test_drc_run_starts_a_catchup_past_its_threshold_shows_it_and_streams_after_it(
    dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema = "catchup_auto"
    prepare(dc1, dc2, schema)
    monkeypatch.setattr(auto, "CHECK_EVERY_S", 1.0)
    with served(dc1, tmp_path, schema) as (capture, url):
        execute(dc1, f"CREATE DATABASE {schema}", *(t.replace(SCHEMA, schema) for t in TABLES))
        path = config_for(tmp_path, dc2, url, "auto", schema, catchup_backlog_mb=0.05,
                          catchup_master="local[2]")  # fmt: skip
        with apply_node(path) as node:
            wait_end(dc2, schema, mark_end(dc1, schema))
            channel = node.channels[0]
            channel.control.pause()  # a maintenance window: the backlog builds
            wait_for(lambda: channel.report()["state"] == "paused", "the channel to pause")
            workload(dc1, schema, seed=4, txns=600, ddl_at=300)
            capture.wait_for(master_position(dc1))
            status = lambda: CliRunner().invoke(cli, ["status", "--api", str(node.api_url)]).output  # noqa: E731
            wait_for(lambda: "bulk catch-up: running" in status(), "drc status to show it", 120)
            last = str(capture.buffer.last_scn)
            wait_for(lambda: checkpoint_of(dc2, "auto") == last, "the catch-up to end", 300)
            channel.control.resume()
            workload(dc1, schema, seed=5, txns=50, ddl_at=None)  # streamed after it
            wait_end(dc2, schema, mark_end(dc1, schema))
            # The subprocess exits (Spark stopped) a little after its rows and checkpoint land.
            wait_for(lambda: "bulk catch-up: idle" in status(), "drc status to show it ended", 120)
            assert channel.stats.idempotent_fixes == 0, "nothing applied twice"
            assert node.auto is not None and node.auto.status("auto")["runs"] == 1  # type: ignore[index]
    assert_same(dc1, dc2, schema)
