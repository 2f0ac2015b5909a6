"""TLS end to end on a sandbox MariaDB with its own CA (``Sandbox.up(tls=True)``).

The capture and apply users are created with REQUIRE SSL / REQUIRE X509, so the server itself
refuses them any plaintext session: a row that arrives proves every connection on the way (the
binlog dump, its metadata connection, the apply and DDL connections) was encrypted. The pull API
serves HTTPS with a certificate of the same private CA, and the channel trusts only that CA.
A CA that did not sign the certificate, or TLS demanded of a server without it, fails at once
with a fatal error naming the keys to check (retrying could not fix a certificate).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer
from drc.apply.service import build_channel
from drc.apply.sink import TargetSession
from drc.cli.main import cli
from drc.client import ApiTlsError, Subscriber
from drc.core.errors import SourceConfigError
from drc.core.tablefilter import TableFilter
from drc.core.target_errors import TargetTlsError
from drc.mysql.driver import TargetSettings
from drc.replicator.replicator import CaptureOptions
from drc.replicator.source import BinlogStream, SourceSettings, inspect_source
from drc.sandbox import certs
from drc.sandbox.sandbox import Sandbox, ServerInfo
from drc.tls import MysqlTls
from tests.support.apply import APPLY_GRANTS, Running, channel_config
from tests.support.capture import capturing_from
from tests.support.network import Proxy
from tests.support.servers import execute, master_position, query
from tests.support.waits import wait_for

CAPTURE_USER, APPLY_USER, PASSWORD = "drc_tls_cap", "drc_tls_apply", "tls-secret"
SRC, DST = "tls_src", "tls_dst"


@pytest.fixture(scope="module")
def tls_server() -> Iterator[ServerInfo]:
    directory = Path(tempfile.mkdtemp(prefix="drc-tls-"))
    box = Sandbox(directory)
    try:
        server = box.up(datacenters=1, tls=True).servers[0]
        _create_users(server)
        yield server
    finally:
        box.down()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def sandbox_ca(tls_server: ServerInfo) -> certs.CertFiles:
    directory = Path(tls_server.tls_ca or "").parent
    return certs.CertFiles(directory / "ca.crt", directory / "ca.key", directory / "ca.crt")


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> certs.CertFiles:
    return certs.make_ca(tmp_path_factory.mktemp("other-ca"), "Some other CA")


def _create_users(server: ServerInfo) -> None:
    apply_user = f"'{APPLY_USER}'@'%'"
    execute(
        server,
        "SET SESSION sql_log_bin = 0",
        f"CREATE USER '{CAPTURE_USER}'@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL",
        f"GRANT ALL PRIVILEGES ON *.* TO '{CAPTURE_USER}'@'%'",
        f"CREATE USER {apply_user} IDENTIFIED BY '{PASSWORD}' REQUIRE X509",
        *(grant.format(u=apply_user) for grant in APPLY_GRANTS),
    )


def _source(server: ServerInfo, tls: MysqlTls, user: str = CAPTURE_USER) -> SourceSettings:
    password = PASSWORD if user == CAPTURE_USER else server.password
    return SourceSettings(server.host, server.port, user, password, 77301, tls=tls)


@contextmanager
def _capturing_https(
    source: SourceSettings, api_cert: certs.CertFiles, directory: Path
) -> Iterator[str]:
    """Capture ``tls_src.*`` from now on and serve it over HTTPS; yields the API URL."""
    start = master_position_of(source)
    options = CaptureOptions(
        capture=TableFilter.build([f"{SRC}.*"]), start_from=f"{start[0]}:{start[1]}",
        commit_max_ms=10,
    )  # fmt: skip
    with capturing_from([source], directory / "buffer", options) as capture:
        deps = ApiDeps(buffer=capture.buffer, metastore=capture.metastore)
        api = ApiServer(
            create_app(deps), "127.0.0.1", 0, open_access=True,
            certfile=api_cert.cert, keyfile=api_cert.key,
        ).start()  # fmt: skip
        try:
            yield api.url
        finally:
            api.stop()


def master_position_of(source: SourceSettings) -> tuple[str, int]:
    info = inspect_source(source)
    return info.current_file, info.current_pos


def test_capture_https_pull_and_apply_all_over_tls_with_a_private_ca(
    tls_server: ServerInfo, sandbox_ca: certs.CertFiles, tmp_path: Path
) -> None:
    execute(
        tls_server,
        f"DROP DATABASE IF EXISTS {SRC}", f"DROP DATABASE IF EXISTS {DST}",
        f"CREATE DATABASE {SRC}", f"CREATE DATABASE {DST}",
        f"CREATE TABLE {SRC}.t (id INT PRIMARY KEY, v VARCHAR(20))",
        f"CREATE TABLE {DST}.t (id INT PRIMARY KEY, v VARCHAR(20))",
    )  # fmt: skip
    source = _source(tls_server, MysqlTls("verify_identity", Path(sandbox_ca.cert)))
    client = certs.issue(sandbox_ca, tmp_path / "client", "drc-apply")
    target = TargetSettings(
        tls_server.host, tls_server.port, APPLY_USER, PASSWORD,
        tls=MysqlTls("verify_ca", client.ca, client.cert, client.key, "target"),
    )  # fmt: skip
    api_cert = certs.issue(sandbox_ca, tmp_path / "api", "api")
    with _capturing_https(source, api_cert, tmp_path) as url:
        assert url.startswith("https://")
        config = channel_config(
            "tls-in", url, [f"{SRC}.*"], map_tables={f"{SRC}.*": f"{DST}.*"},
            tls_ca=sandbox_ca.cert,
        )  # fmt: skip
        execute(tls_server, f"INSERT INTO {SRC}.t VALUES (1, 'over'), (2, 'tls')")
        with Running(build_channel(config, target)) as running:
            wait_for(
                lambda: len(query(tls_server, f"SELECT * FROM {DST}.t")) == 2,
                "rows applied over TLS", running=running,
            )  # fmt: skip
    assert query(tls_server, f"SELECT * FROM {DST}.t ORDER BY id") == [(1, "over"), (2, "tls")]


def test_the_binlog_connections_are_encrypted(
    tls_server: ServerInfo, sandbox_ca: certs.CertFiles
) -> None:
    source = _source(tls_server, MysqlTls("verify_ca", Path(sandbox_ca.cert)))
    log_file, log_pos = master_position_of(source)
    stream = BinlogStream(source, log_file, log_pos)
    execute(tls_server, "FLUSH LOGS")  # something for the stream to read (a rotate)
    try:
        next(stream.events(threading.Event()), None)
        reader = stream._reader  # the library's connections: is the socket really TLS?
        assert reader._stream_connection._sock.cipher() is not None
        with reader._ctl_connection.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            assert cur.fetchone()["Value"] != ""
    finally:
        stream.close()


def test_a_certificate_of_another_ca_is_refused_at_once(
    tls_server: ServerInfo, other_ca: certs.CertFiles
) -> None:
    wrong = MysqlTls("verify_ca", other_ca.cert)
    with pytest.raises(SourceConfigError, match="certificate was refused.*source.tls"):
        inspect_source(_source(tls_server, wrong))
    stream = BinlogStream(_source(tls_server, wrong), *master_position(tls_server))
    try:
        with pytest.raises(SourceConfigError, match="certificate was refused"):
            next(stream.events(threading.Event()))
    finally:
        stream.close()
    target = TargetSettings(
        tls_server.host, tls_server.port, tls_server.user, tls_server.password,
        tls=replace(wrong, section="target"),
    )  # fmt: skip
    with pytest.raises(TargetTlsError, match="certificate was refused.*target.tls"):
        TargetSession(target).open()


def test_verify_identity_refuses_a_certificate_for_another_host(
    tls_server: ServerInfo, sandbox_ca: certs.CertFiles, tmp_path: Path
) -> None:
    """The server's certificate names 127.0.0.1 and localhost; reach it as 127.0.0.2."""
    proxy = Proxy(tls_server.host, tls_server.port, listen="127.0.0.2")
    try:
        source = _source(tls_server, MysqlTls("verify_identity", sandbox_ca.cert))
        elsewhere = replace(source, host="127.0.0.2", port=proxy.port)
        with pytest.raises(SourceConfigError, match="certificate was refused.*(?i:ip address)"):
            inspect_source(elsewhere)
        unchecked = replace(elsewhere, tls=MysqlTls("verify_ca", sandbox_ca.cert))
        assert inspect_source(unchecked).server_id == tls_server.server_id  # only the name
    finally:
        proxy.cut()


def test_required_tls_against_a_server_without_it_fails_clearly(dc1: ServerInfo) -> None:
    source = SourceSettings(dc1.host, dc1.port, dc1.user, dc1.password, tls=MysqlTls("required"))
    with pytest.raises(SourceConfigError, match="does not offer TLS"):
        inspect_source(source)
    target = TargetSettings(
        dc1.host, dc1.port, dc1.user, dc1.password, tls=MysqlTls("required", section="target")
    )
    with pytest.raises(TargetTlsError, match="does not offer TLS.*target.tls"):
        TargetSession(target).open()


def test_subscriber_and_status_trust_only_the_given_ca(
    tls_server: ServerInfo,
    sandbox_ca: certs.CertFiles,
    other_ca: certs.CertFiles,
    tmp_path: Path,
) -> None:
    source = _source(tls_server, MysqlTls("verify_ca", sandbox_ca.cert))
    api_cert = certs.issue(sandbox_ca, tmp_path / "api", "api")
    with _capturing_https(source, api_cert, tmp_path) as url:
        with Subscriber(url, ca=sandbox_ca.cert, wait_ms=100) as trusting:
            assert trusting.get(timeout=10).url == url
        with Subscriber(url, ca=other_ca.cert, wait_ms=100) as wrong:
            with pytest.raises(ApiTlsError, match="certificate was refused"):
                wrong.get(timeout=30)  # fatal at once, not retried until the timeout
        runner = CliRunner()
        good = runner.invoke(cli, ["status", "--api", url, "--ca", str(sandbox_ca.cert)])
        assert good.exit_code == 0, good.output
        bad = runner.invoke(cli, ["status", "--api", url, "--ca", str(other_ca.cert)])
        assert bad.exit_code == 1 and "certificate was refused" in bad.output


def test_a_channel_with_another_ca_stops_with_a_tls_error(
    tls_server: ServerInfo,
    sandbox_ca: certs.CertFiles,
    other_ca: certs.CertFiles,
    tmp_path: Path,
) -> None:
    source = _source(tls_server, MysqlTls("verify_ca", sandbox_ca.cert))
    api_cert = certs.issue(sandbox_ca, tmp_path / "api", "api")
    target = TargetSettings(tls_server.host, tls_server.port, tls_server.user, tls_server.password)
    with _capturing_https(source, api_cert, tmp_path) as url:
        config = channel_config("tls-wrong", url, [f"{SRC}.*"], tls_ca=other_ca.cert)
        with Running(build_channel(config, target)) as running:
            wait_for(lambda: running.error is not None, "the channel to stop")
    assert isinstance(running.error, ApiTlsError), running.error
