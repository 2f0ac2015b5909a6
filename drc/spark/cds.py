"""A class-data sharing (AppCDS) archive of the Spark driver's JVM, so every ``drc catchup``,
``drc snapshot`` and ``drc verify`` starts its session faster.

Starting a local session loads ~10,000 classes of Spark and its libraries; the JVM then spends
most of its start parsing and verifying them. A dynamic archive (``-XX:ArchiveClassesAtExit``,
Java 13+) dumped once from a small job holds them pre-parsed: measured on the 2-core host, a
session started in 3.1 s with it against 5.6-6.7 s without (docs/benchmarks.md, Verify).

``make setup`` builds it (``python -m drc.spark.cds``) into the virtualenv; :func:`driver_options`
adds it to the driver's options when it exists. The JVM checks the archive against its own
version and class path and ignores it (``-Xshare:auto``) when they differ, e.g. after a Java
update, so a stale archive costs the speed-up, never a failure. Executors of a standalone
cluster are separate JVMs on other hosts and do not use it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = "DRC_SPARK_CDS"  # a path to another archive, or "off"
ARCHIVE = Path(sys.prefix) / "spark-cds.jsa"
BUILD_TIMEOUT_S = 900


def archive() -> Path | None:
    """The archive the driver uses, if there is one (``$DRC_SPARK_CDS`` overrides)."""
    chosen = os.environ.get(ENV, "")
    if chosen == "off":
        return None
    path = Path(chosen) if chosen else ARCHIVE
    return path if path.is_file() else None


def driver_options() -> str:
    """JVM options that make the driver use the archive ("" without one)."""
    path = archive()
    return "" if path is None else f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off"


_JOB = """
import sys
from drc.spark.session import build_session
spark = build_session("local[2]", "drc-cds-archive", conf={
    "spark.driver.extraJavaOptions": "-XX:ArchiveClassesAtExit=" + sys.argv[1]
    + " -Xlog:cds=off -Xlog:cds+dynamic=off"})
spark.sparkContext.parallelize(range(100), 2).map(lambda x: x + 1).sum()
spark.createDataFrame([(1, "a")], "k INT, v STRING").groupBy("k").count().collect()
spark.stop()
"""


def build(target: Path = ARCHIVE) -> Path:
    """Dump the archive from a small job (a session, an RDD job and a DataFrame aggregation,
    the classes DRC's jobs load), into a temporary file renamed into place once complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".spark-cds-", suffix=".jsa", dir=target.parent)
    os.close(fd)
    os.unlink(name)  # the JVM creates it at exit
    partial = Path(name)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _JOB, str(partial)],
            env={**os.environ, ENV: "off"},
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        if done.returncode != 0 or not partial.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise RuntimeError("the archive job failed: " + " | ".join(tail))
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ARCHIVE
    print(f"building the Spark driver's class-data archive {target} (once, ~30 s)", flush=True)
    try:
        build(target)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        # Only the start-up speed depends on it: say so, and let setup go on.
        print(f"no class-data archive ({exc}); Spark sessions start without it", file=sys.stderr)
        return
    print(f"built {target} ({target.stat().st_size >> 20} MB)")


if __name__ == "__main__":
    main()
