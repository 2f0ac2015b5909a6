"""TLS settings: config keys and their combinations, what pymysql and httpx are given, and how a
TLS refusal is told apart from a network failure. Real handshakes: tests/integration/test_tls.py.
"""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pymysql
import pytest

from drc.apply.service import default_subscriber, target_settings
from drc.config import load_config
from drc.config_channels import ChannelConfig
from drc.core.errors import ConfigError
from drc.core.scn import SCN
from drc.runtime import source_settings
from drc.sandbox import certs, mariadb
from drc.tls import MysqlTls, https_context, tls_failure
from tests.support.config import BASE, write_config


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> certs.CertFiles:
    directory = tmp_path_factory.mktemp("pem")
    return certs.issue(certs.make_ca(directory, "Unit CA"), directory, "client")


def _config(tmp_path: Path, source_keys: str = "", extra: str = "") -> Path:
    return write_config(
        tmp_path, BASE.replace("[replicator]", source_keys + "\n[replicator]") + extra
    )


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ('tls = "required"\ntls_ca = "/ca.pem"', r"source\.tls_ca is only used.*verify_ca"),
        ('tls = "verify_ca"\ntls_cert = "/c.pem"', r"source\.tls_cert and source\.tls_key"),
        ('tls_cert = "/c.pem"\ntls_key = "/k.pem"', r"source\.tls_cert needs source\.tls ="),
        ('tls = "verify"', r"source\.tls: Input should be 'disabled', 'preferred'"),
    ],
)
def test_bad_source_tls_combinations_name_the_key(tmp_path: Path, keys: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_config(_config(tmp_path, keys))


def test_target_tls_keys_are_named_as_target(tmp_path: Path) -> None:
    target = '[target]\nuser = "apply"\ntls = "disabled"\ntls_ca = "/ca.pem"\n'
    with pytest.raises(ConfigError, match=r"target\.tls_ca is only used"):
        load_config(_config(tmp_path, extra=target))


def test_source_tls_reaches_the_replicator_and_a_target_defaulting_to_it(
    tmp_path: Path, pem: certs.CertFiles
) -> None:
    keys = f'tls = "verify_identity"\ntls_ca = "{pem.ca}"\n'
    keys += f'tls_cert = "{pem.cert}"\ntls_key = "{pem.key}"'
    config = load_config(_config(tmp_path, keys))
    wanted = MysqlTls("verify_identity", pem.ca, pem.cert, pem.key, "source")
    assert source_settings(config)[0].tls == wanted
    assert target_settings(config.target_or_source()).tls == wanted  # errors name source.*
    context = source_settings(config)[0].pymysql_kwargs()["ssl"]
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_pymysql_options_per_mode(pem: certs.CertFiles) -> None:
    assert MysqlTls("disabled").pymysql_options() == {"ssl_disabled": True}
    assert MysqlTls("preferred").pymysql_options() == {}
    required = MysqlTls("required", cert=pem.cert, key=pem.key).pymysql_options()["ssl"]
    assert required.verify_mode == ssl.CERT_NONE and not required.check_hostname
    verify_ca = MysqlTls("verify_ca", pem.ca).pymysql_options()["ssl"]
    assert verify_ca.verify_mode == ssl.CERT_REQUIRED and not verify_ca.check_hostname
    assert verify_ca.get_ca_certs()[0]["subject"] == ((("commonName", "Unit CA"),),)


def test_unreadable_tls_files_are_config_errors_naming_the_key(
    tmp_path: Path, pem: certs.CertFiles
) -> None:
    with pytest.raises(ConfigError, match=r"target\.tls_ca .*nope\.pem: not a readable PEM"):
        MysqlTls("verify_ca", tmp_path / "nope.pem", section="target").pymysql_options()
    wrong_key = MysqlTls("required", cert=pem.cert, key=pem.ca, section="source")
    with pytest.raises(ConfigError, match=r"source\.tls_cert .* / source\.tls_key"):
        wrong_key.pymysql_options()


def test_channel_tls_keys_need_an_https_remote_and_a_consistent_set(pem: certs.CertFiles) -> None:
    base = {"name": "c", "origin": "dc2"}
    with pytest.raises(ValueError, match="tls_ca only apply to https:// remote URLs"):
        ChannelConfig(**base, remote=("http://dc2:8640",), tls_ca=pem.ca)
    with pytest.raises(ValueError, match="both tls_cert and tls_key"):
        ChannelConfig(**base, remote=("https://dc2:8640",), tls_cert=pem.cert)
    with pytest.raises(ValueError, match="tls_ca is given but tls_verify = false"):
        ChannelConfig(**base, remote=("https://dc2:8640",), tls_ca=pem.ca, tls_verify=False)
    assert ChannelConfig(**base, remote=("http://dc2:8640",)).https_verify() is True


def test_a_channel_subscriber_trusts_its_ca_and_presents_its_certificate(
    pem: certs.CertFiles,
) -> None:
    channel = ChannelConfig(
        name="c", origin="dc2", remote=("https://dc2:8640",),
        tls_ca=pem.ca, tls_cert=pem.cert, tls_key=pem.key,
    )  # fmt: skip
    context = channel.https_verify()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "Unit CA"),),)]
    default_subscriber(channel, SCN.zero()).close()  # builds its client from the same keys
    off = ChannelConfig(name="c", origin="dc2", remote=("https://x",), tls_verify=False)
    assert off.https_verify().verify_mode == ssl.CERT_NONE


def test_https_context_refuses_half_a_client_certificate(pem: certs.CertFiles) -> None:
    with pytest.raises(ConfigError, match="give both --cert and --key"):
        https_context(cert=pem.cert, names=("--ca", "--cert", "--key"))


def test_tls_refusals_are_told_apart_from_network_failures() -> None:
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_message = "unable to get local issuer certificate"
    wrapped = pymysql.err.OperationalError(2003, "Can't connect to MySQL server (...)")
    wrapped.original_exception = verify  # type: ignore[attr-defined]
    assert "unable to get local issuer" in (tls_failure(wrapped) or "")
    no_tls = pymysql.err.OperationalError(2026, "SSL is required but the server doesn't...")
    assert "does not offer TLS" in (tls_failure(no_tls) or "")
    refused = pymysql.err.OperationalError(2003, "Can't connect ([Errno 111] refused)")
    refused.original_exception = ConnectionRefusedError(111, "refused")  # type: ignore[attr-defined]
    assert tls_failure(refused) is None
    cut = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    cut.__cause__ = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    assert tls_failure(cut) is None  # a dropped TLS connection is retried like any other


def test_sandbox_certificates_name_loopback_and_chain_to_the_ca(tmp_path: Path) -> None:
    ca = certs.make_ca(tmp_path / "ca", "Sandbox test CA")
    server = certs.issue(ca, tmp_path / "dc1", "server")
    checked = subprocess.run(
        ["openssl", "verify", "-CAfile", str(ca.cert), "-verify_ip", "127.0.0.1",
         "-verify_hostname", "localhost", str(server.cert)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert server.key.stat().st_mode & 0o077 == 0
    argv = mariadb.server_argv(tmp_path, 3306, 1, server)
    assert f"--ssl-cert={server.cert}" in argv and f"--ssl-ca={ca.cert}" in argv
    assert not any(a.startswith("--ssl") for a in mariadb.server_argv(tmp_path, 3306, 1))
