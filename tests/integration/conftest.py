"""Real servers for integration tests, started by the project's own sandbox code.

One sandbox (two MariaDB datacenters and one ZooKeeper) serves the whole session, and one
RabbitMQ broker (``rabbitmq``, started only if a test asks for it). A server that
cannot start fails the run: never a skip, in CI or anywhere else. When a test that used the
sandbox fails, the tail of every server log is attached to its report.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from drc.core.errors import SandboxError
from drc.sandbox import rabbitmq as rabbitmq_sandbox
from drc.sandbox.sandbox import Sandbox, SandboxDescription, ServerInfo, log_tails
from tests.support.rabbitmq import Broker
from tests.support.servers import forget_drc_state

SANDBOX_FIXTURES = ("sandbox", "dc1", "dc2")
_STARTED: list[SandboxDescription] = []  # the session's sandbox, once a test started it


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxDescription]:
    # A short /tmp path: unix socket paths are limited to 108 bytes.
    directory = Path(tempfile.mkdtemp(prefix="drc-sbx-"))
    box = Sandbox(directory)
    try:
        description = box.up(datacenters=2)
    except SandboxError as exc:
        box.down()
        pytest.fail(f"sandbox did not start (run `make setup`): {exc}", pytrace=False)
    _STARTED.append(description)
    try:
        yield description
    finally:
        _STARTED.clear()
        box.down()
        shutil.rmtree(directory, ignore_errors=True)


def _forget_drc_state() -> None:
    for description in _STARTED:
        forget_drc_state(*description.servers)


def _shares_nodes_across_tests(module: object) -> bool:
    # A module whose module- or class-scoped fixtures run nodes keeps its state between tests.
    source = Path(str(getattr(module, "__file__", ""))).read_text()
    return 'scope="module"' in source or 'scope="class"' in source


@pytest.fixture(scope="module", autouse=True)
def _fresh_drc_state_per_module() -> None:
    _forget_drc_state()


@pytest.fixture(autouse=True)
def _fresh_drc_state_per_test(request: pytest.FixtureRequest) -> None:
    if not _shares_nodes_across_tests(request.module):
        _forget_drc_state()


@pytest.fixture(scope="session")
def dc1(sandbox: SandboxDescription) -> ServerInfo:
    return sandbox.server("dc1")


@pytest.fixture(scope="session")
def dc2(sandbox: SandboxDescription) -> ServerInfo:
    return sandbox.server("dc2")


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[Broker]:
    """A RabbitMQ broker for the session, started on first use (Erlang takes 5-20 s to start)."""
    directory = Path(tempfile.mkdtemp(prefix="drc-rmq-"))
    try:
        broker = Broker(rabbitmq_sandbox.start(directory / "rabbitmq"))
    except SandboxError as exc:
        shutil.rmtree(directory, ignore_errors=True)
        pytest.fail(f"RabbitMQ did not start (run `make setup`): {exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not report.failed or not any(f in item.fixturenames for f in SANDBOX_FIXTURES):
        return
    description = Sandbox(_sandbox_dir(item)).describe() if _sandbox_dir(item) else None
    if description is not None:
        report.sections.append(("sandbox server logs", log_tails(description)))


def _sandbox_dir(item: pytest.Item) -> str | None:
    funcargs = getattr(item, "funcargs", {})
    description = funcargs.get("sandbox")
    if description is None:
        server = funcargs.get("dc1") or funcargs.get("dc2")
        return str(Path(server.base_dir).parent) if server is not None else None
    return description.dir
