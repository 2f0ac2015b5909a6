"""A private CA and certificates for the sandbox, made with the ``openssl`` CLI.

    DIR/tls/ca.crt, ca.key        the sandbox's own CA (trust it with tls_ca / --ca)
    DIR/dcN/server.crt, .key      each MariaDB's certificate, signed by that CA, naming
                                  127.0.0.1 and localhost (so verify_identity holds)

Keys are P-256 EC (fast to make), files 0600. Tests use :func:`make_ca` and :func:`issue` to
make other CAs and API certificates the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from drc.core.errors import SandboxError

DAYS = 3650
LOOPBACK_NAMES = ("127.0.0.1", "localhost")
_EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class CertFiles:
    """A certificate, its key, and the CA certificate that signed it (PEM files)."""

    cert: Path
    key: Path
    ca: Path


def make_ca(directory: Path, name: str) -> CertFiles:
    """A self-signed CA in ``directory`` (ca.crt, ca.key), made once and then reused."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertFiles(directory / "ca.crt", directory / "ca.key", directory / "ca.crt")
    if ca.cert.exists() and ca.key.exists():
        return ca
    _openssl(
        "req", "-x509", *_EC_KEY, "-days", str(DAYS), "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(ca.key), "-out", str(ca.cert),
    )  # fmt: skip
    os.chmod(ca.key, 0o600)
    return ca


def issue(
    ca: CertFiles, directory: Path, name: str, hosts: tuple[str, ...] = LOOPBACK_NAMES
) -> CertFiles:
    """A certificate for ``hosts`` signed by ``ca``: ``directory/name.crt`` and ``name.key``."""
    directory.mkdir(parents=True, exist_ok=True)
    made = CertFiles(directory / f"{name}.crt", directory / f"{name}.key", ca.cert)
    csr, extensions = directory / f"{name}.csr", directory / f"{name}.ext"
    names = ",".join(f"IP:{h}" if h[0].isdigit() or ":" in h else f"DNS:{h}" for h in hosts)
    extensions.write_text(
        f"subjectAltName={names}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl("req", *_EC_KEY, "-subj", f"/CN={name}", "-keyout", str(made.key), "-out", str(csr))
    os.chmod(made.key, 0o600)
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-CAcreateserial", "-CAserial", str(directory / f"{name}.srl"), "-days", str(DAYS),
        "-extfile", str(extensions), "-out", str(made.cert),
    )  # fmt: skip
    for scratch in (csr, extensions, directory / f"{name}.srl"):
        scratch.unlink(missing_ok=True)
    return made


def _openssl(*args: str) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise SandboxError("openssl not found; run `make setup` (it installs the openssl CLI)")
    result = subprocess.run([binary, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SandboxError(f"openssl {args[0]} failed (exit {result.returncode}): {result.stderr}")
