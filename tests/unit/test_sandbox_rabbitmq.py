"""The sandbox broker's environment keeps every file and port of the node its own."""

from __future__ import annotations

from pathlib import Path

from drc.sandbox import rabbitmq
from drc.sandbox.procs import free_port


def test_every_path_the_broker_writes_or_reads_is_under_its_directory(tmp_path: Path) -> None:
    env = rabbitmq._environment(tmp_path, 5001, 5002, 5003, "drc-x@localhost")
    paths = {k: v for k, v in env.items() if k.startswith("RABBITMQ_") and v.startswith("/")}
    assert paths and all(Path(v).is_relative_to(tmp_path) for v in paths.values())
    assert env["HOME"] == str(tmp_path)  # the Erlang cookie
    assert "RABBITMQ_CONF_ENV_FILE" in paths  # else /etc/rabbitmq/rabbitmq-env.conf is read
    assert (env["ERL_EPMD_PORT"], env["RABBITMQ_NODE_PORT"], env["RABBITMQ_DIST_PORT"]) == (
        "5003", "5001", "5002",
    )  # fmt: skip


def test_a_port_nobody_listens_on_does_not_answer() -> None:
    assert not rabbitmq.answers(free_port(), timeout=0.5)


def test_the_amqp_url_names_the_loopback_port() -> None:
    info = rabbitmq.RabbitInfo("/tmp/x", 5672, 1, 2, "n@localhost", 10, 11)
    assert info.amqp_url == "amqp://guest:guest@127.0.0.1:5672/%2F"
