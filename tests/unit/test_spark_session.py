"""Which Spark masters DRC accepts, and the session settings each gets (no JVM started)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from drc import native
from drc.spark import cds
from drc.spark.session import check_master, session_conf, with_task_retries


@pytest.mark.parametrize(
    "master",
    [
        "local",
        "local[*]",
        "local[4]",
        "local[2,3]",
        "spark://127.0.0.1:7077",
        "spark://spark-1.dc:7077",
    ],
)
def test_local_and_standalone_masters_are_accepted(master: str) -> None:
    assert check_master(master) == master


@pytest.mark.parametrize(
    "master", ["yarn", "local[0]", "local[x]", "spark://h", "spark://h:0", "spark://h:70000", ""]
)
def test_other_masters_are_refused_saying_what_works(master: str) -> None:
    with pytest.raises(ValueError, match=r"local\[\*\]"):
        check_master(master)


def test_local_masters_try_a_failed_task_again_as_a_cluster_does() -> None:
    assert with_task_retries("local[2]") == "local[2,4]"
    assert with_task_retries("local[*]", 3) == "local[*,3]"
    assert with_task_retries("local") == "local[1,4]"
    assert with_task_retries("local[2,1]") == "local[2,1]", "asked for explicitly"
    assert with_task_retries("spark://h:7077") == "spark://h:7077"  # spark.task.maxFailures


def test_local_and_loopback_drivers_bind_to_loopback_with_small_heaps() -> None:
    for master in ("local[*]", "spark://127.0.0.1:7077"):
        conf = session_conf(master)
        assert conf["spark.driver.bindAddress"] == "127.0.0.1"
        assert conf["spark.executor.memory"] == "512m"
        assert conf["spark.pyspark.python"] == sys.executable
    remote = session_conf("spark://spark-1.dc:7077", jars=["/j/a.jar", "/j/b.jar"])
    assert "spark.driver.bindAddress" not in remote
    assert remote["spark.jars"] == "/j/a.jar,/j/b.jar"
    assert remote["spark.executorEnv.DRC_COMPILED"] == native.STATE.setting  # the same hot path
    assert (
        session_conf("local", extra={"spark.executor.memory": "1g"})["spark.executor.memory"]
        == "1g"
    )


def test_the_driver_maps_the_class_data_archive_when_there_is_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(cds.ENV, str(archive))
    assert "spark.driver.extraJavaOptions" not in session_conf("local[2]"), "none built"
    archive.write_bytes(b"x")
    light = session_conf("local[2]", extra={"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"})
    options = light["spark.driver.extraJavaOptions"].split()
    assert options[0] == "-XX:+UseSerialGC", "the caller's options are kept"
    assert f"-XX:SharedArchiveFile={archive}" in options and "-Xshare:auto" in options
    assert "-XX:SharedArchiveFile" not in light.get("spark.executor.extraJavaOptions", "")
    monkeypatch.setenv(cds.ENV, "off")
    assert "spark.driver.extraJavaOptions" not in session_conf("local[2]")
