"""Bring a sandbox of N datacenters (one MariaDB each) and one ZooKeeper up and down.

Layout under the sandbox directory::

    DIR/sandbox.json        the machine-readable description (mode 0600: it holds the password)
    DIR/dc1/                MariaDB of datacenter 1: data/, mysqld.sock, error.log
    DIR/dc2/ ...
    DIR/dc1r/               with ``up(replica=True)``: a MariaDB GTID replica of dc1's server
                            (server_id 100 + N, dc N's GTID domain, log_slave_updates, read_only),
                            whose binlog holds the same GTIDs: a failover target for tests
    DIR/zookeeper/          zoo.cfg, data/, zookeeper.log
    DIR/replicators/dcN/rK/ with ``up(replicators=N)``: member K of dcN's replicator group
                            (drc.toml, buffer/, replicator.log; drc.sandbox.group)
    DIR/tls/                with ``up(tls=True)``: the sandbox's own CA (drc.sandbox.certs);
                            each dcN/ then holds server.crt/.key and its MariaDB offers TLS
    DIR/spark/              with ``up(spark=True)``: a Spark standalone master and worker
                            (drc.sandbox.spark)

``up`` is idempotent: servers that already run are kept, missing ones are started on their
recorded ports. ``down`` signals only the PIDs recorded in sandbox.json, and only if their command
line still names this sandbox, then waits for them to exit.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from drc.core.errors import SandboxError
from drc.sandbox import certs, group, mariadb, rabbitmq, spark, zookeeper
from drc.sandbox.group import MemberInfo
from drc.sandbox.procs import free_port, pid_alive, stop_pid, tail
from drc.sandbox.spark import SparkInfo

DESCRIPTION_FILE = "sandbox.json"
SANDBOX_USER = "drc"
# sun_path is 108 bytes on Linux; keep a margin for the NUL.
MAX_SOCKET_PATH = 100
REPLICA_SERVER_ID_BASE = 100  # dc N's replica has server_id 100 + N


@dataclass(frozen=True)
class ServerInfo:
    datacenter: str
    host: str
    port: int
    socket: str
    server_id: int
    gtid_domain_id: int
    user: str
    password: str = field(repr=False)
    pid: int
    base_dir: str
    error_log: str
    tls_ca: str | None = None  # the CA that signed the server's certificate, if it offers TLS

    @property
    def marker(self) -> str:
        return f"--datadir={self.base_dir}/data"


@dataclass(frozen=True)
class ZooKeeperInfo:
    connect: str
    port: int
    pid: int
    base_dir: str
    log: str

    @property
    def marker(self) -> str:
        return f"{self.base_dir}/zoo.cfg"


@dataclass(frozen=True)
class SandboxDescription:
    dir: str
    servers: tuple[ServerInfo, ...]
    zookeeper: ZooKeeperInfo
    replicas: tuple[ServerInfo, ...] = ()  # one per datacenter with ``up(replica=True)``
    spark: SparkInfo | None = None
    replicators: tuple[MemberInfo, ...] = ()  # `up --replicators N`: group members per DC

    def server(self, datacenter: str) -> ServerInfo:
        return _of(datacenter, self.servers, f"no datacenter {datacenter!r} in sandbox {self.dir}")

    def replica(self, datacenter: str) -> ServerInfo:
        missing = f"no replica of {datacenter!r} in sandbox {self.dir}; bring it up with --replica"
        return _of(datacenter, self.replicas, missing)

    def to_json(self, reveal_password: bool = True) -> str:
        data = asdict(self)
        if not reveal_password:
            for server in (*data["servers"], *data["replicas"]):
                server["password"] = f"(in {Path(self.dir) / DESCRIPTION_FILE})"
        return json.dumps(data, indent=2)

    @classmethod
    def from_json(cls, text: str) -> SandboxDescription:
        data = json.loads(text)
        return cls(
            dir=data["dir"],
            servers=tuple(ServerInfo(**s) for s in data["servers"]),
            zookeeper=ZooKeeperInfo(**data["zookeeper"]),
            spark=SparkInfo(**data["spark"]) if data.get("spark") else None,
            replicas=tuple(ServerInfo(**s) for s in data.get("replicas", ())),
            replicators=tuple(MemberInfo(**m) for m in data.get("replicators", ())),
        )

    def all_servers(self) -> tuple[tuple[str, ServerInfo], ...]:
        """(name, server) of every MariaDB: ``dc1``, ..., then ``dc1 replica``, ..."""
        return (
            *((s.datacenter, s) for s in self.servers),
            *((f"{s.datacenter} replica", s) for s in self.replicas),
        )

    def logs(self) -> dict[str, Path]:
        logs = {f"mariadb {name}": Path(s.error_log) for name, s in self.all_servers()}
        logs["zookeeper"] = Path(self.zookeeper.log)
        if self.spark is not None:
            logs["spark master"] = Path(self.spark.master_log)
            logs["spark worker"] = Path(self.spark.worker_log)
        for member in self.replicators:
            logs[f"replicator {member.datacenter}/{member.member_id}"] = Path(member.log)
        return logs


class Sandbox:
    """The sandbox rooted at one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory).resolve()
        self.description_path = self.dir / DESCRIPTION_FILE

    def describe(self) -> SandboxDescription | None:
        """The recorded description, or None if this sandbox was never brought up."""
        try:
            return SandboxDescription.from_json(self.description_path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise SandboxError(
                f"{self.description_path} is not a sandbox description ({exc}); "
                "stop any servers by hand and remove the directory"
            ) from exc

    def up(
        self,
        datacenters: int = 2,
        progress: Callable[[str], None] = lambda _msg: None,
        tls: bool = False,
        with_spark: bool = False,
        replica: bool = False,
        replicators: int = 0,
    ) -> SandboxDescription:
        """Start whatever of the N-datacenter sandbox is not running; return its description.
        With ``tls`` every MariaDB offers TLS with a certificate of the sandbox's own CA; with
        ``replica`` each datacenter also gets a GTID replica of its server; with ``with_spark``
        a Spark standalone master and worker run too (kept once started). ``replicators``: that
        many replicator group members per datacenter (drc.sandbox.group), electing their leader
        in the sandbox ZooKeeper."""
        if datacenters < 1:
            raise SandboxError(f"--datacenters must be at least 1, got {datacenters}")
        previous = self.describe()
        if previous is not None:
            self._check_same_shape(previous, datacenters, tls)
        self.dir.mkdir(parents=True, exist_ok=True)
        password = previous.servers[0].password if previous else secrets.token_urlsafe(16)
        progress("zookeeper: starting (or already running)")
        zk = self._zookeeper_up(previous.zookeeper if previous else None)
        self._write(SandboxDescription(str(self.dir), previous.servers if previous else (), zk))
        ca = certs.make_ca(self.dir / "tls", "DRC sandbox CA") if tls else None
        servers: list[ServerInfo] = []
        for number in range(1, datacenters + 1):
            known = previous.servers[number - 1] if previous else None
            progress(f"mariadb dc{number}: starting (or already running)")
            servers.append(self._server_up(number, known, password, ca))
            self._write(SandboxDescription(str(self.dir), tuple(servers), zk))
        replicas: list[ServerInfo] = []
        known_replicas = {r.datacenter: r for r in (previous.replicas if previous else ())}
        for primary in servers if replica or known_replicas else ():
            progress(f"mariadb {primary.datacenter} replica: starting (or already running)")
            known = known_replicas.get(primary.datacenter)
            replicas.append(self._replica_up(primary, known, ca))
            self._write(
                SandboxDescription(str(self.dir), tuple(servers), zk, replicas=tuple(replicas))
            )
        members = self._replicators_up(
            servers, zk, replicators, previous.replicators if previous else (), progress
        )
        known_spark = previous.spark if previous else None
        described = SandboxDescription(
            str(self.dir), tuple(servers), zk, replicas=tuple(replicas), replicators=members
        )
        self._write(described)
        if with_spark or known_spark is not None:
            progress("spark master and worker: starting (or already running)")
            self._write(replace(described, spark=known_spark))  # down finds it if start fails
            described = replace(described, spark=self._spark_up(known_spark))
            self._write(described)
        return described

    def _spark_up(self, known: SparkInfo | None) -> SparkInfo:
        if known is not None and all(spark.running(known).values()):
            return known
        if known is not None:
            spark.stop(known)  # half of it died: start both again
        return spark.start(self.dir / "spark")

    def _replicators_up(
        self,
        servers: list[ServerInfo],
        zk: ZooKeeperInfo,
        count: int,
        known: tuple[MemberInfo, ...],
        progress: Callable[[str], None],
    ) -> tuple[MemberInfo, ...]:
        running = tuple(m for m in known if pid_alive(m.pid, m.marker))
        if count == 0 or len(running) == count * len(servers):
            return running
        for member in running:  # a different shape: start the set again
            stop_pid(member.pid, member.marker)
        members: list[MemberInfo] = []
        for server in servers:
            progress(f"replicators {server.datacenter}: starting {count}")
            members += group.start_members(
                self.dir / "replicators", datacenter=server.datacenter, count=count,
                source_host=server.host, source_port=server.port, user=server.user,
                password=server.password, zookeeper=zk.connect,
            )  # fmt: skip
        return tuple(members)

    def _check_same_shape(self, previous: SandboxDescription, datacenters: int, tls: bool) -> None:
        if len(previous.servers) != datacenters:
            raise SandboxError(
                f"sandbox {self.dir} has {len(previous.servers)} datacenters, not {datacenters}; "
                f"run `drc sandbox down --dir {self.dir}` and remove it to change the count"
            )
        if previous.servers and (previous.servers[0].tls_ca is None) == tls:
            raise SandboxError(
                f"sandbox {self.dir} was brought up {'without' if tls else 'with'} --tls; run "
                f"`drc sandbox down --dir {self.dir}` and remove it to change that"
            )

    def _server_up(
        self, number: int, known: ServerInfo | None, password: str, ca: certs.CertFiles | None
    ) -> ServerInfo:
        if known is not None and pid_alive(known.pid, known.marker):
            return known
        return self._mariadb_up(f"dc{number}", f"dc{number}", number, number, known, password, ca)

    def _replica_up(
        self, primary: ServerInfo, known: ServerInfo | None, ca: certs.CertFiles | None
    ) -> ServerInfo:
        if known is not None and pid_alive(known.pid, known.marker):
            return known
        dirname = f"{primary.datacenter}r"
        fresh = not (self.dir / dirname / "data" / "mysql").is_dir()
        server_id = REPLICA_SERVER_ID_BASE + primary.server_id
        info = self._mariadb_up(
            dirname,
            primary.datacenter,
            server_id,
            primary.gtid_domain_id,
            known,
            primary.password,
            ca,
            read_only=True,
        )
        if fresh:  # a restarted replica keeps its own replication settings (--skip-slave-start)
            mariadb.replicate_from(Path(info.socket), primary.port, primary.user, primary.password)
        else:
            mariadb.start_replication(Path(info.socket))
        return info

    def _mariadb_up(
        self,
        dirname: str,
        datacenter: str,
        server_id: int,
        domain_id: int,
        known: ServerInfo | None,
        password: str,
        ca: certs.CertFiles | None,
        read_only: bool = False,
    ) -> ServerInfo:
        base = self.dir / dirname
        if len(str(base / "mysqld.sock")) > MAX_SOCKET_PATH:
            raise SandboxError(
                f"sandbox directory {self.dir} is too deep for a unix socket path "
                f"(max {MAX_SOCKET_PATH} characters); choose a shorter --dir"
            )
        port = known.port if known is not None else free_port()
        mariadb.bootstrap(base)
        tls = _server_cert(ca, base)
        argv = mariadb.server_argv(base, port, server_id, tls, domain_id, read_only)
        pid = mariadb.start(base, argv)
        socket_path = base / "mysqld.sock"
        mariadb.ensure_user(socket_path, SANDBOX_USER, password)
        return ServerInfo(
            datacenter=datacenter,
            host="127.0.0.1",
            port=port,
            socket=str(socket_path),
            server_id=server_id,
            gtid_domain_id=domain_id,
            user=SANDBOX_USER,
            password=password,
            pid=pid,
            base_dir=str(base),
            error_log=str(base / "error.log"),
            tls_ca=None if ca is None else str(ca.cert),
        )

    def _zookeeper_up(self, known: ZooKeeperInfo | None) -> ZooKeeperInfo:
        if known is not None and pid_alive(known.pid, known.marker):
            return known
        base = self.dir / "zookeeper"
        port = known.port if known is not None else free_port()
        pid = zookeeper.start(base, port)
        return ZooKeeperInfo(
            connect=f"127.0.0.1:{port}",
            port=port,
            pid=pid,
            base_dir=str(base),
            log=str(base / "zookeeper.log"),
        )

    def zookeeper_stop(self) -> None:
        """Stop the sandbox ZooKeeper (its data is kept): for outage tests."""
        description = self._require()
        zk = description.zookeeper
        stop_pid(zk.pid, zk.marker)

    def zookeeper_start(self) -> ZooKeeperInfo:
        """Start the sandbox ZooKeeper again on its port with its data (no-op if it runs)."""
        description = self._require()
        zk = self._zookeeper_up(description.zookeeper)
        self._write(dataclasses.replace(description, zookeeper=zk))
        return zk

    def _require(self) -> SandboxDescription:
        description = self.describe()
        if description is None:
            raise SandboxError(f"no sandbox in {self.dir}; start one with `drc sandbox up`")
        return description

    def down(self) -> list[int]:
        """Stop every recorded process of this sandbox; return the PIDs that were stopped."""
        description = self.describe()
        if description is None:
            return []
        stopped = []
        targets = [(m.pid, m.marker) for m in description.replicators]  # first: they use the rest
        targets += [(s.pid, s.marker) for _name, s in description.all_servers()]
        if description.spark is not None:
            stopped.extend(spark.stop(description.spark))
        targets.append((description.zookeeper.pid, description.zookeeper.marker))
        broker = rabbitmq.load(self.dir / "rabbitmq")  # `drc sandbox rabbitmq start`
        if broker is not None and rabbitmq.running(broker):
            rabbitmq.stop(broker)
            stopped.append(broker.pid)
        for pid, marker in targets:
            if pid_alive(pid, marker):
                stop_pid(pid, marker)
                stopped.append(pid)
        return stopped

    def status(self) -> dict[str, bool]:
        """Which of the recorded processes run, by name."""
        description = self.describe()
        if description is None:
            return {}
        state = {
            f"mariadb {name}": pid_alive(s.pid, s.marker) for name, s in description.all_servers()
        }
        zk = description.zookeeper
        state["zookeeper"] = pid_alive(zk.pid, zk.marker)
        if description.spark is not None:
            state.update(spark.running(description.spark))
        for m in description.replicators:
            state[f"replicator {m.datacenter}/{m.member_id}"] = pid_alive(m.pid, m.marker)
        return state

    def probe(self) -> dict[str, str]:
        """Ask every running server who it is: proof of life beyond a PID."""
        description = self.describe()
        if description is None:
            return {}
        answers = {
            name: mariadb.identify(s.host, s.port, s.user, s.password)
            for name, s in description.all_servers()
        }
        srvr = zookeeper.four_letter(description.zookeeper.port, "srvr")
        answers["zookeeper"] = srvr.splitlines()[0] if srvr else "no answer"
        if description.spark is not None:
            workers = spark.alive_workers(description.spark)
            answers["spark"] = f"{workers} worker(s) alive at {description.spark.master_url}"
        return answers

    def _write(self, description: SandboxDescription) -> None:
        # temp + rename: a crash never leaves a half-written description behind.
        tmp = self.description_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(description.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.description_path)


def _of(datacenter: str, servers: tuple[ServerInfo, ...], missing: str) -> ServerInfo:
    """The server of ``datacenter``; SandboxError ``missing`` when there is none."""
    for info in servers:
        if info.datacenter == datacenter:
            return info
    raise SandboxError(missing)


def _server_cert(ca: certs.CertFiles | None, base: Path) -> certs.CertFiles | None:
    if ca is None:
        return None
    made = certs.CertFiles(base / "server.crt", base / "server.key", ca.cert)
    if made.cert.exists() and made.key.exists():
        return made
    return certs.issue(ca, base, "server")


def log_tails(description: SandboxDescription, lines: int = 40) -> str:
    """Every server's log tail, for test failure reports and `drc sandbox status --logs`."""
    parts = [
        f"----- {name}: {path} -----\n{tail(path, lines)}"
        for name, path in description.logs().items()
    ]
    return "\n".join(parts)


__all__ = [
    "MemberInfo", "Sandbox", "SandboxDescription", "ServerInfo", "SparkInfo", "ZooKeeperInfo",
    "log_tails",
]  # fmt: skip
