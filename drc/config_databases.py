"""The MySQL databases a datacenter's config connects to: the [source] it captures, the [target]
apply writes into, a channel's [channels.origin_db]; their addresses, TLS keys and passwords."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, PrivateAttr, SecretStr, model_validator

from drc.config_section import Section, read_secret
from drc.tls import MysqlTls, MysqlTlsMode


class _MysqlTlsKeys(Section):
    """TLS keys of a MySQL connection (drc.tls explains the modes)."""

    tls: MysqlTlsMode = "preferred"
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    _tls_section: str = PrivateAttr("source")

    @model_validator(mode="after")
    def _usable_tls(self) -> _MysqlTlsKeys:
        problems = self.mysql_tls().problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def mysql_tls(self) -> MysqlTls:
        return MysqlTls(self.tls, self.tls_ca, self.tls_cert, self.tls_key, self._tls_section)


class SourceConfig(_MysqlTlsKeys):
    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    # The source's replication group (primary and GTID replicas), "host:port" each; empty: the
    # one server host/port. drc.replicator.failover says which one is read.
    servers: list[str] = []
    user: str
    password: SecretStr | None = None
    password_file: Path | None = None
    replica_server_id: int = Field(1_000_001, ge=1, le=2**32 - 1)
    heartbeat_s: float = Field(0.5, gt=0, le=60)

    @model_validator(mode="after")
    def _one_password(self) -> SourceConfig:
        if self.password is not None and self.password_file is not None:
            raise ValueError("give either password or password_file, not both")
        return self

    @model_validator(mode="after")
    def _servers(self) -> SourceConfig:
        addresses = self.addresses()
        if len(set(addresses)) != len(addresses):
            raise ValueError(f"servers lists a server twice: {self.servers}")
        return self

    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every configured source server, in order."""
        if not self.servers:
            return [(self.host, self.port)]
        return [_address(entry) for entry in self.servers]

    def secret(self) -> str:
        return read_secret(self.password, self.password_file, "source.password_file")


def _address(entry: str) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"servers entry {entry!r} is not 'host:port' (e.g. '10.0.0.2:3306')")
    return host.strip("[]"), int(port)


class TargetConfig(_MysqlTlsKeys):
    """The local database apply channels write into; defaults to the [source] connection."""

    _tls_section: str = PrivateAttr("target")

    host: str = "127.0.0.1"
    port: int = Field(3306, ge=1, le=65535)
    user: str
    password: SecretStr | None = None
    password_file: Path | None = None

    def secret(self) -> str:
        return read_secret(self.password, self.password_file, "target.password_file")

    @classmethod
    def of_source(cls, source: SourceConfig) -> TargetConfig:
        """The [source] connection as the target (when no [target] is given)."""
        target = cls(
            host=source.host, port=source.port, user=source.user, password=source.password,
            password_file=source.password_file, tls=source.tls, tls_ca=source.tls_ca,
            tls_cert=source.tls_cert, tls_key=source.tls_key,
        )  # fmt: skip
        target._tls_section = "source"  # errors name the keys the operator wrote
        return target


class OriginDbConfig(TargetConfig):
    """The origin datacenter's database, read by snapshot and verify (never written)."""

    _tls_section: str = PrivateAttr("channels.origin_db")

    def secret(self) -> str:
        return read_secret(self.password, self.password_file, "channels.origin_db.password_file")
