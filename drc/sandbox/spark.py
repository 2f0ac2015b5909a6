"""A sandbox Spark standalone cluster: one master and one worker, started from the pyspark
package's own ``bin/spark-class`` (no separate Spark download, no sbin/ scripts).

    DIR/spark/spark.conf     properties both daemons read (``--properties-file``; its path in
                             their command lines is the marker that proves a PID is ours)
    DIR/spark/master.log     the master's output
    DIR/spark/worker.log     the worker's output
    DIR/spark/work/          the worker's application directories

Traps this avoids:

- spark-class ``exec``s the JVM, so the PID started is the daemon's own PID.
- Daemons default to a 1 GiB heap (``SPARK_DAEMON_MEMORY``): 512m here. The worker offers
  :data:`WORKER_MEMORY` to applications, so an application must ask for executors no bigger
  (drc.spark.session does), or it waits for resources forever.
- The master's REST submission server takes the fixed port 6066 unless turned off; every other
  port (master, both web UIs) is a free loopback port.
- Readiness is the master's ``/json/`` document showing the worker ALIVE, not a log line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from drc.core.errors import SandboxError
from drc.sandbox.procs import free_port, pid_alive, start_detached, stop_pid, tail, wait_for

START_TIMEOUT_S = 120.0  # two JVMs on a busy 2-core machine
DAEMON_MEMORY = "512m"
WORKER_MEMORY = "512m"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
PROPERTIES = {
    "spark.master.rest.enabled": "false",
    "spark.worker.cleanup.enabled": "true",
}


@dataclass(frozen=True)
class SparkInfo:
    master_url: str  # spark://127.0.0.1:PORT, what drc.spark.session and --master take
    master_pid: int
    worker_pid: int
    web_port: int  # the master's web UI (its /json/ document)
    base_dir: str
    master_log: str
    worker_log: str

    @property
    def marker(self) -> str:
        return str(Path(self.base_dir) / "spark.conf")


def spark_home() -> Path:
    """The installed pyspark package, which holds bin/spark-class and the jars."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SandboxError("pyspark is not installed; run `make setup` (the spark extra)")
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").exists():
        raise SandboxError(f"{home} has no bin/spark-class; reinstall pyspark with `make setup`")
    return home


def start(base: Path, cores: int | None = None) -> SparkInfo:
    """Start a master and one worker under ``base``; return once the worker is registered."""
    if shutil.which("java") is None:
        raise SandboxError("java is missing; run `make setup` to install a JRE")
    home = spark_home()
    (base / "work").mkdir(parents=True, exist_ok=True)
    conf = base / "spark.conf"
    conf.write_text("".join(f"{k} {v}\n" for k, v in PROPERTIES.items()))
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "SPARK_CONF_DIR": str(base),
    }
    port, web, worker_web = free_port(), free_port(), free_port()
    spark_class = str(home / "bin" / "spark-class")
    common = ["--host", "127.0.0.1", "--properties-file", str(conf)]
    master = start_detached(
        [spark_class, MASTER_CLASS, *common, "--port", str(port), "--webui-port", str(web)],
        base / "master.log",
        env=env,
    )
    url = f"spark://127.0.0.1:{port}"
    info = SparkInfo(url, master, 0, web, str(base), str(base / "master.log"), "")
    worker = start_detached(
        [
            spark_class, WORKER_CLASS, *common, "--webui-port", str(worker_web),
            "--cores", str(cores or os.cpu_count() or 2), "--memory", WORKER_MEMORY,
            "--work-dir", str(base / "work"), url,
        ],
        base / "worker.log",
        env=env,
    )  # fmt: skip
    info = SparkInfo(url, master, worker, web, str(base), info.master_log, str(base / "worker.log"))
    try:
        _wait_ready(info)
    except SandboxError:
        stop(info)
        raise
    return info


def _wait_ready(info: SparkInfo) -> None:
    def ready() -> bool:
        for pid, log in ((info.master_pid, info.master_log), (info.worker_pid, info.worker_log)):
            if not pid_alive(pid):
                raise SandboxError(f"Spark exited during startup; {log} ends:\n{tail(Path(log))}")
        return alive_workers(info) >= 1

    if not wait_for(ready, START_TIMEOUT_S, interval=0.5):
        raise SandboxError(
            f"the Spark worker did not register with {info.master_url} within "
            f"{START_TIMEOUT_S:.0f}s; {info.worker_log} ends:\n{tail(Path(info.worker_log))}"
        )


def alive_workers(info: SparkInfo) -> int:
    """Workers the master counts as ALIVE; 0 when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{info.web_port}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def running(info: SparkInfo) -> dict[str, bool]:
    return {
        "spark master": pid_alive(info.master_pid, info.marker),
        "spark worker": pid_alive(info.worker_pid, info.marker),
    }


def stop(info: SparkInfo) -> list[int]:
    """Stop the worker, then the master (only if their command lines name this sandbox)."""
    stopped = []
    for pid in (info.worker_pid, info.master_pid):
        if pid and pid_alive(pid, info.marker):
            stop_pid(pid, info.marker)
            stopped.append(pid)
    return stopped
