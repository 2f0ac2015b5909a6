"""ApiServer: uvicorn in a thread on loopback (port 0), clean stop, loopback rule, TLS."""

from __future__ import annotations

import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drc.api import wire
from drc.api.app import create_app
from drc.api.deps import ApiDeps
from drc.api.server import ApiServer, ApiServerError, is_loopback
from drc.core.errors import ConfigError
from drc.eventbuffer import EventBuffer
from tests.support.api import STREAM, store


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[ApiDeps]:
    with EventBuffer.open(tmp_path / "buf") as buffer:
        store(buffer, *STREAM)
        yield ApiDeps(buffer=buffer)


def serve(deps: ApiDeps, **kw: object) -> ApiServer:
    return ApiServer(create_app(deps), "127.0.0.1", 0, open_access=True, stop_event=deps.stop, **kw)


def test_serves_on_a_free_port_and_stops_cleanly_under_a_long_poll(deps: ApiDeps) -> None:
    server = serve(deps).start()
    assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}"
    assert httpx.get(server.url + wire.PATH_HEALTH).json() == {"status": "ok"}
    answers: list[int] = []
    params = {"after": str(STREAM[-1].scn), "wait_ms": "30000"}
    poll = threading.Thread(
        target=lambda: answers.append(
            httpx.get(server.url + wire.PATH_EVENTS, params=params, timeout=30).status_code
        )
    )
    poll.start()
    waited = time.monotonic() + 10
    while not deps.metrics.waiters and time.monotonic() < waited:  # the poll is in
        time.sleep(0.01)
    start = time.monotonic()
    server.stop()
    poll.join(10)
    assert time.monotonic() - start < 10 and answers == [200], "the long poll ended, answered"
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + wire.PATH_HEALTH, timeout=2)


def test_an_open_api_refuses_a_non_loopback_address(deps: ApiDeps) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    with pytest.raises(ConfigError, match="only on loopback"):
        ApiServer(create_app(deps), "0.0.0.0", 0, open_access=True)


def test_a_port_in_use_is_a_clear_error(deps: ApiDeps) -> None:
    with serve(deps) as first:
        with pytest.raises(ApiServerError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            ApiServer(create_app(deps), "127.0.0.1", first.port, open_access=True)


def test_tls_serves_https_with_the_configured_certificate(deps: ApiDeps, tmp_path: Path) -> None:
    cert, key = tmp_path / "api.crt", tmp_path / "api.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
         "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    with serve(deps, certfile=cert, keyfile=key) as server:
        assert server.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        assert httpx.get(server.url + wire.PATH_HEALTH, verify=context).status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(server.url + wire.PATH_HEALTH)  # not trusted without the certificate


def test_a_client_that_hangs_up_frees_its_long_poll_thread(deps: ApiDeps) -> None:
    with serve(deps) as server:
        params = {"after": str(STREAM[-1].scn), "wait_ms": "30000"}
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(server.url + wire.PATH_EVENTS, params=params, timeout=0.5)
        deadline = time.monotonic() + 2
        while deps.metrics.waiters and time.monotonic() < deadline:
            time.sleep(0.05)
        assert deps.metrics.waiters == 0, "the pull noticed the disconnect, long before 30 s"
