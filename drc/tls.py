"""TLS for DRC's client connections: to MySQL ([source], [target]) and to a pull API over HTTPS.

MySQL connections take MySQL's ssl-mode names::

    tls = "disabled"          plaintext, even if the server offers TLS
          "preferred"         (default) TLS when the server offers it, certificate not checked
          "required"          TLS or no connection; certificate not checked
          "verify_ca"         TLS, certificate signed by tls_ca (or the system's trusted CAs)
          "verify_identity"   verify_ca, and the certificate names the host connected to

    tls_ca                    PEM file of the CA(s) to trust (verify modes only)
    tls_cert, tls_key         PEM client certificate and its key, both or neither (not with
                              disabled or preferred: a certificate sent in plaintext fallback
                              would be pointless)

HTTPS (a channel's remote pull API, a subscriber): verification is on unless asked off; ``ca``
replaces the system's trusted CAs, ``cert``/``key`` present a client certificate.

Files are read when a connection is opened, so a missing or unreadable one is a ConfigError
naming its key, raised before any network I/O. A connection refused by TLS (certificate not
trusted, wrong host name, the server has no TLS) is told apart from the network being down by
:func:`tls_failure`: retrying cannot fix it, an operator must.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from drc.core.errors import ConfigError

MysqlTlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]
VERIFY_MODES = ("verify_ca", "verify_identity")
_CR_SSL_CONNECTION_ERROR = 2026  # pymysql: "SSL is required but the server doesn't support it"


@dataclass(frozen=True)
class MysqlTls:
    """How one MySQL connection uses TLS; ``section`` names the config keys in errors."""

    mode: MysqlTlsMode = "preferred"
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    section: str = "source"

    def problems(self) -> list[str]:
        """What is wrong with this combination of keys (empty when it is usable)."""
        found = []
        if self.ca is not None and self.mode not in VERIFY_MODES:
            found.append(
                f"{self.section}.tls_ca is only used when certificates are checked: set "
                f"{self.section}.tls = 'verify_ca' or 'verify_identity', or remove tls_ca"
            )
        found += _pair_problems(self.cert, self.key, self._names())
        if self.cert is not None and self.mode in ("disabled", "preferred"):
            found.append(
                f"{self.section}.tls_cert needs {self.section}.tls = 'required', 'verify_ca' "
                f"or 'verify_identity' (with tls = {self.mode!r} it may never be sent)"
            )
        return found

    def pymysql_options(self) -> dict[str, Any]:
        """Keyword arguments for pymysql.connect (python-mysql-replication passes them on)."""
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        if self.mode == "preferred":
            return {}  # pymysql's own default: TLS when offered, unverified, else plaintext
        return {"ssl": self.context()}  # an SSLContext makes pymysql require TLS

    def context(self) -> ssl.SSLContext:
        """The SSLContext of a TLS connection in this mode ("preferred": the one used when the
        server offers TLS, certificate not checked, as pymysql's own)."""
        verify = self.mode in VERIFY_MODES
        context = _context(self.ca if verify else None, self._names(), verify)
        context.check_hostname = self.mode == "verify_identity"
        if not verify:
            context.verify_mode = ssl.CERT_NONE
        _load_client_cert(context, self.cert, self.key, self._names())
        return context

    def _names(self) -> tuple[str, str, str]:
        return (f"{self.section}.tls_ca", f"{self.section}.tls_cert", f"{self.section}.tls_key")


def https_context(
    ca: str | Path | None = None,
    cert: str | Path | None = None,
    key: str | Path | None = None,
    verify: bool = True,
    names: tuple[str, str, str] = ("ca", "cert", "key"),
) -> ssl.SSLContext:
    """The SSLContext for HTTPS to a pull API (httpx ``verify=``); ``names`` are what the
    caller calls ca, cert and key (config keys, CLI options), for errors."""
    problems = _pair_problems(cert, key, names)
    if ca is not None and not verify:
        problems.append(f"{names[0]} is given but certificate verification is off; drop one")
    if problems:
        raise ConfigError("; ".join(problems))
    context = _context(ca, names, verify)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    _load_client_cert(context, cert, key, names)
    return context


def tls_failure(exc: BaseException) -> str | None:
    """Why TLS refused this connection, or None if ``exc`` is not a TLS refusal.

    Only what a retry cannot change counts: a certificate that fails verification, an alert
    from the peer (it refused our certificate or protocol), no TLS on the server. A TLS
    connection cut mid-stream (SSLEOFError, ...) is a network failure like any other.
    pymysql wraps handshake errors in OperationalError(2003) with ``original_exception``;
    httpx keeps the ssl error in ``__cause__``/``__context__``.
    """
    if exc.args and exc.args[0] == _CR_SSL_CONNECTION_ERROR:
        return "the server does not offer TLS (start it with ssl_cert/ssl_key, or lower tls)"
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return f"the server's certificate was refused: {current.verify_message}"
        reason = getattr(current, "reason", None)  # set by the ssl module, not by hand
        if isinstance(current, ssl.SSLError) and _refusal(reason):
            return f"the TLS handshake was refused: {reason}"
        inner = getattr(current, "original_exception", None)
        current = inner or current.__cause__ or current.__context__
    return None


def _refusal(reason: str | None) -> bool:
    return any(word in (reason or "") for word in ("ALERT", "CERTIFICATE", "WRONG_VERSION"))


def _pair_problems(cert: object, key: object, names: tuple[str, str, str]) -> list[str]:
    if (cert is None) != (key is None):
        return [f"give both {names[1]} and {names[2]} (a client certificate needs its key)"]
    return []


def _context(ca: str | Path | None, names: tuple[str, str, str], verify: bool) -> ssl.SSLContext:
    try:
        # Without a CA file, verification uses the system's trusted CAs.
        return ssl.create_default_context(cafile=str(ca) if ca is not None and verify else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{names[0]} {ca}: not a readable PEM CA file ({exc})") from exc


def _load_client_cert(
    context: ssl.SSLContext,
    cert: str | Path | None,
    key: str | Path | None,
    names: tuple[str, str, str],
) -> None:
    if cert is None:
        return
    try:
        context.load_cert_chain(str(cert), str(key) if key is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{names[1]} {cert} / {names[2]} {key}: not a readable PEM certificate and its "
            f"unencrypted key ({exc})"
        ) from exc
