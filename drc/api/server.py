"""Serve the API with uvicorn in a background thread of the replicator's process.

In-process serving is deliberate: the API reads the writer's EventBuffer, so a commit wakes
every long poll at once (another process could only poll the directory).

The socket is bound here, before uvicorn starts, so ``port = 0`` picks a free port and
:attr:`ApiServer.port` is known as soon as :meth:`ApiServer.start` returns. :meth:`stop` sets
uvicorn's ``should_exit`` and the pulls' stop event (a long poll then returns within
:data:`drc.api.pull.STOP_CHECK_S`), and joins the thread.

TLS: give ``certfile`` and ``keyfile`` (``[api] tls_certfile``/``tls_keyfile`` in the config,
PEM files; the key must not need a passphrase) and uvicorn serves HTTPS with them through its
``ssl_certfile``/``ssl_keyfile`` options; the URL then starts with https://. Without tokens the
API is open, so it may listen only on a loopback address: :meth:`start` refuses anything else
(the config refuses it too; this guards other callers).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from drc.core.errors import ConfigError, FatalError

log = logging.getLogger("drc.api")

GRACEFUL_STOP_S = 3


class ApiServerError(FatalError):
    """The API server could not start (address in use, unreadable TLS files, ...)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiServer:
    def __init__(
        self,
        app: FastAPI,
        host: str,
        port: int,
        *,
        open_access: bool,
        certfile: Path | None = None,
        keyfile: Path | None = None,
        stop_event: threading.Event | None = None,
    ) -> None:
        if open_access and not is_loopback(host):
            raise ConfigError(
                f"the API has no tokens, so it may listen only on loopback, not {host!r}: "
                "set [api] tokens or tokens_file, or host = 127.0.0.1"
            )
        self.host = host
        self._tls = certfile is not None
        self._stop_event = stop_event
        self._config = uvicorn.Config(
            app,
            ssl_certfile=None if certfile is None else str(certfile),
            ssl_keyfile=None if keyfile is None else str(keyfile),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=GRACEFUL_STOP_S,
        )
        self._server = uvicorn.Server(self._config)
        self._sock = _bind(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self._tls else 'http'}://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> ApiServer:
        """Serve in a daemon thread; returns once accepting connections."""
        self._thread = threading.Thread(target=self._run, name="drc-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                self.stop()
                raise ApiServerError(f"the API server did not start on {self.url} in time")
            time.sleep(0.01)  # startup only: uvicorn offers no started event
        if not self._server.started:
            self._sock.close()
            raise ApiServerError(f"the API server failed to start on {self.url}: {self._failure}")
        return self

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # SystemExit from uvicorn's startup failure, or any error
            self._failure = exc
            log.error("API server on %s stopped: %r", self.url, exc)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop accepting, let in-flight requests finish (long polls return early); join."""
        if self._stop_event is not None:
            self._stop_event.set()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._sock.close()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ApiServerError(f"cannot resolve API host {host!r}: {exc}") from exc
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ApiServerError(f"cannot listen on {host}:{port} for the API: {exc}") from exc
    return sock
