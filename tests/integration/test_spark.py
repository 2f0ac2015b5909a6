"""Spark plumbing: a trivial job (SQL and Python workers) in local mode and on the sandbox's
standalone cluster, started from the pyspark package by `drc sandbox up --spark`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.sandbox.sandbox import Sandbox, SandboxDescription
from drc.sandbox.spark import SparkInfo, alive_workers, running
from drc.spark.session import build_session
from tests.support.tools import require_compiled_build

pytestmark = pytest.mark.integration


def trivial_job(spark: Any) -> tuple[int, int]:
    """A SQL aggregate (JVM only) and a Python map (Python workers on the executors)."""
    total = spark.range(1000).selectExpr("sum(id) AS s").first()["s"]
    squares = spark.sparkContext.parallelize(range(100), 4).map(lambda x: x * x).sum()
    return int(total), int(squares)


@pytest.fixture(scope="module")
def cluster(sandbox: SandboxDescription) -> Iterator[SparkInfo]:
    box = Sandbox(sandbox.dir)
    description = box.up(datacenters=len(sandbox.servers), with_spark=True)
    assert description.spark is not None
    yield description.spark
    # The session's sandbox teardown stops the daemons with the rest (they are recorded).


def test_a_trivial_job_runs_in_local_mode() -> None:
    spark = build_session("local[2]", "drc-test-local")
    try:
        assert trivial_job(spark) == (499500, 328350)
    finally:
        spark.stop()


def _hot_path_of_this_worker(_: Any) -> list[tuple[str, bool]]:
    """In an executor's Python worker: whether the catch-up's decoder and codec (what
    drc.catchup.executor imports) loaded compiled."""
    import importlib

    from drc import native

    names = ("drc.core.codec", "drc.core.value_codec", "drc.replicator.binlog.rows")
    return [(n, native.is_compiled(importlib.import_module(n))) for n in names]


def test_executors_decode_with_the_compiled_hot_path() -> None:
    """The catch-up's executors use the driver's hot path (issue 26: the same compiled
    decoder as streaming), not the pure modules."""
    require_compiled_build()
    spark = build_session("local[2]", "drc-test-native")
    try:
        found = spark.sparkContext.parallelize(range(2), 2).map(_hot_path_of_this_worker).collect()
    finally:
        spark.stop()
    assert found and all(compiled for worker in found for _, compiled in worker), found


@pytest.mark.slow
def test_a_trivial_job_runs_on_the_sandbox_standalone_cluster(cluster: SparkInfo) -> None:
    assert alive_workers(cluster) == 1
    spark = build_session(cluster.master_url, "drc-test-cluster")
    try:
        assert spark.sparkContext.master == cluster.master_url
        assert trivial_job(spark) == (499500, 328350)
    finally:
        spark.stop()


@pytest.mark.slow
def test_sandbox_up_keeps_a_running_cluster_and_down_stops_it() -> None:
    directory = Path(tempfile.mkdtemp(prefix="drc-sbx-spark-"))  # short: socket paths
    runner = CliRunner()
    up = runner.invoke(
        cli, ["sandbox", "up", "--dir", str(directory), "--datacenters", "1", "--spark"]
    )
    try:
        assert up.exit_code == 0, up.output
        box = Sandbox(directory)
        first = box.describe()
        assert first is not None and first.spark is not None
        assert all(running(first.spark).values())
        again = runner.invoke(cli, ["sandbox", "up", "--dir", str(directory), "--datacenters", "1"])
        assert again.exit_code == 0, again.output
        kept = box.describe()
        assert kept is not None and kept.spark == first.spark, "a running cluster is kept"
        status = runner.invoke(cli, ["sandbox", "status", "--dir", str(directory)])
        assert status.exit_code == 0 and "1 worker(s) alive" in status.output, status.output
    finally:
        down = runner.invoke(cli, ["sandbox", "down", "--dir", str(directory)])
    assert down.exit_code == 0, down.output
    assert first.spark is not None and not any(running(first.spark).values())
    shutil.rmtree(directory, ignore_errors=True)
