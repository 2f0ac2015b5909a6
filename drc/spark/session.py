"""A SparkSession for ``local[*]`` / ``local[N]`` or a standalone cluster ``spark://HOST:PORT``,
with small memory settings and the settings this machine kind needs.

- Heaps stay small (:data:`DRIVER_MEMORY`, :data:`EXECUTOR_MEMORY`): a standalone worker offers
  a fixed amount of memory (512m in the sandbox, drc.sandbox.spark) and an application asking
  for bigger executors waits for resources forever.
- Executors run Python with this interpreter (``spark.pyspark.python``): a pip-installed pyspark
  is importable only from the environment it was installed in, not from the system ``python3``.
- With a local master, or a cluster on a loopback address, the driver binds to 127.0.0.1 (as
  ``SPARK_LOCAL_IP`` would) so nothing listens beyond the machine.
- No web UI (``spark.ui.enabled``): it would take a port and a thread for nobody.
- Executors get the driver's DRC_COMPILED (drc.native): the same hot path, compiled or pure.
- The driver's JVM maps the class-data archive ``make setup`` built (drc.spark.cds), if any.
- ``jars``: e.g. MariaDB Connector/J for JDBC (``jdbc:mysql://`` URLs with driver
  ``org.mariadb.jdbc.Driver``; the ``jdbc:mariadb:`` dialect quotes columns with ``"``).

The driver's heap is fixed when its JVM starts, i.e. by the first session of the process.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession

from drc import native
from drc.spark import cds

DRIVER_MEMORY = "512m"
EXECUTOR_MEMORY = "512m"
SHUFFLE_PARTITIONS = 8
# For jobs whose JVM only carries Python's bytes (catch-up ships packed blobs): C1 alone
# compiles enough, and C2's compiler threads and a parallel GC cost more CPU than they win
# back. Measured on the 2-core host: a session's start and two small jobs took 18-20 CPU
# seconds of the JVM by default, 9-10 with these options.
LIGHT_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LIGHT_JVM = {
    "spark.driver.extraJavaOptions": LIGHT_JVM_OPTIONS,
    "spark.executor.extraJavaOptions": LIGHT_JVM_OPTIONS,
}
_LOCAL = re.compile(r"local(\[(\*|[1-9][0-9]{0,3})(,[1-9][0-9]{0,2})?\])?", re.ASCII)
TASK_TRIES = 4  # spark.task.maxFailures' default on a cluster
_CLUSTER = re.compile(
    r"spark://([A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:]{2,39}\]):([0-9]{1,5})", re.ASCII
)
_LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def check_master(master: str) -> str:
    """``master`` if it is ``local``, ``local[*]``, ``local[N]`` (``local[N,F]``: a failed
    task tried F times) or ``spark://HOST:PORT``;
    ValueError saying what is accepted otherwise."""
    cluster = _CLUSTER.fullmatch(master)
    if _LOCAL.fullmatch(master) or (cluster and 0 < int(cluster[2]) < 65536):
        return master
    raise ValueError(
        f"--master {master[:80]!r} is not a Spark master DRC runs on: use local[*], local[N] "
        "or spark://HOST:PORT (a standalone cluster, e.g. `drc sandbox up --spark`)"
    )


def with_task_retries(master: str, tries: int = TASK_TRIES) -> str:
    """``master`` with a failed task tried again up to ``tries`` times in local mode too, as
    on a cluster (``local[N]`` fails the job at a task's first failure: ``local[N,F]``)."""
    local = _LOCAL.fullmatch(master)
    if local is None or local[3]:
        return master
    return f"local[{local[2] or 1},{tries}]"


def session_conf(
    master: str, jars: Sequence[str] = (), extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The configuration :func:`build_session` uses (``extra`` wins over the defaults)."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.driver.memory": DRIVER_MEMORY,
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # Executors pick the compiled or pure hot path as the driver was told (drc.native);
        # a local master's inherit the environment anyway, a cluster's get it from here.
        f"spark.executorEnv.{native.SETTING}": native.STATE.setting,
    }
    cluster = _CLUSTER.fullmatch(master)
    if cluster is None or cluster[1] in _LOOPBACK:
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
    if jars:
        conf["spark.jars"] = ",".join(jars)
    conf.update(extra or {})
    shared = cds.driver_options()  # the driver's JVM starts faster (drc.spark.cds)
    if shared:
        options = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = f"{options} {shared}".strip()
    return conf


def build_session(
    master: str = "local[*]",
    app_name: str = "drc",
    *,
    jars: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
) -> Any:
    """A new (or the process's running) SparkSession on ``master``; stop it when done."""
    # The workers' interpreter: pyspark takes it from PYSPARK_PYTHON (else "python3" on the
    # PATH, which lacks this environment's packages), not from spark.pyspark.python.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder: Any = SparkSession.builder.master(check_master(master)).appName(app_name)
    for key, value in session_conf(master, jars, conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
