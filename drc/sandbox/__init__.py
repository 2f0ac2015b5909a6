"""A local multi-datacenter sandbox: N MariaDB servers and one ZooKeeper in a directory.

Used by ``drc sandbox``, ``make demo`` and the integration tests alike, so what the tests run is
what an operator runs. No system services and no Docker: every server is a child process with its
data and log under the sandbox directory, on a free loopback port.
"""

from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo, ZooKeeperInfo

__all__ = ["Sandbox", "SandboxDescription", "ServerInfo", "ZooKeeperInfo"]
