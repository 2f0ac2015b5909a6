"""``drc sandbox up|down|status``: the local multi-datacenter sandbox."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from drc.cli.options import F, range_option
from drc.sandbox.sandbox import Sandbox, log_tails

DEFAULT_DIR = ".sandbox"


def dir_option(help: str) -> Callable[[F], F]:
    """--dir (the parameter ``directory``): the sandbox's directory."""
    return click.option(
        "--dir",
        "directory",
        default=DEFAULT_DIR,
        show_default=True,
        type=click.Path(file_okay=False),
        help=help,
    )


_dir = dir_option("Directory holding the sandbox's data, logs and sandbox.json.")


@click.group()
def sandbox() -> None:
    """A local sandbox: one MariaDB per datacenter and one ZooKeeper (and with --spark a Spark
    master and worker; `drc sandbox rabbitmq start` a RabbitMQ broker), on loopback ports."""


@sandbox.command()
@_dir
@range_option("--datacenters", 2, 1, 9, help="How many datacenters (MariaDB servers) to run.")
@click.option(
    "--tls",
    is_flag=True,
    help="Make a private CA (DIR/tls/ca.crt) and have every MariaDB offer TLS signed by it.",
)
@click.option(
    "--replica",
    is_flag=True,
    help="Also give each datacenter a MariaDB GTID replica of its server (server_id 100+N, "
    "same GTID domain, log_slave_updates): a source failover target.",
)
@click.option(
    "--spark",
    "with_spark",
    is_flag=True,
    help="Also run a Spark standalone master and worker (from the pyspark package).",
)
@range_option(
    "--replicators", 0, 0, 9,
    help="Also start this many replicator group members per datacenter (one leads, elected "
    "in the sandbox ZooKeeper; the others follow). 0: none.",
)  # fmt: skip
def up(
    directory: str, datacenters: int, tls: bool, replica: bool, with_spark: bool, replicators: int
) -> None:
    """Start the sandbox (servers already running are kept) and print its description.

    The description (also in DIR/sandbox.json, which holds the password) lists each server's
    host, port, socket, server_id and user, the CA of its certificate with --tls, the
    ZooKeeper connect string, replicas with --replica, and with --spark the Spark master URL
    (spark://127.0.0.1:PORT).
    """
    description = Sandbox(directory).up(
        datacenters,
        progress=lambda msg: click.echo(msg, err=True),
        tls=tls,
        with_spark=with_spark,
        replica=replica,
        replicators=replicators,
    )
    click.echo(description.to_json(reveal_password=False))


@sandbox.command()
@_dir
def down(directory: str) -> None:
    """Stop exactly the processes this sandbox started (by PID) and wait for them to exit."""
    stopped = Sandbox(directory).down()
    if stopped:
        click.echo(f"stopped {len(stopped)} processes: {' '.join(map(str, stopped))}")
    else:
        click.echo("nothing running")


@sandbox.command()
@_dir
@click.option("--logs", is_flag=True, help="Also print the tail of every server's log.")
def status(directory: str, logs: bool) -> None:
    """Show which sandbox processes run; exit 1 unless all of them do."""
    box = Sandbox(directory)
    state = box.status()
    if not state:
        click.echo(f"no sandbox in {box.dir}; start one with `drc sandbox up --dir {directory}`")
        sys.exit(1)
    description = box.describe()
    assert description is not None
    answers = box.probe()
    for name, server in description.all_servers():
        running = state[f"mariadb {name}"]
        detail = answers[name] if running else "STOPPED"
        click.echo(f"{name:<10} {server.host}:{server.port:<6} pid {server.pid:<8} {detail}")
    zk = description.zookeeper
    detail = answers["zookeeper"] if state["zookeeper"] else "STOPPED"
    click.echo(f"{'zookeeper':<10} {zk.connect:<16} pid {zk.pid:<8} {detail}")
    if description.spark is not None:
        sp = description.spark
        detail = answers["spark"] if state["spark master"] else "STOPPED"
        if not state["spark worker"]:
            detail += " (worker STOPPED)"
        click.echo(f"{'spark':<10} {sp.master_url:<16} pid {sp.master_pid:<8} {detail}")
    for member in description.replicators:
        name = f"{member.datacenter}/{member.member_id}"
        alive = state[f"replicator {name}"]
        click.echo(f"{name:<10} {member.url:<16} pid {member.pid:<8} {'' if alive else 'STOPPED'}")
    if logs:
        click.echo(log_tails(description))
    if not all(state.values()):
        sys.exit(1)


@sandbox.command()
@_dir
@click.argument("action", type=click.Choice(["stop", "start"]))
def zookeeper(directory: str, action: str) -> None:
    """Stop or start the sandbox's ZooKeeper (data kept), e.g. to watch a group ride out an
    outage: the leader stops appending, readers keep reading, the group recovers."""
    box = Sandbox(directory)
    if action == "stop":
        box.zookeeper_stop()
        click.echo("zookeeper stopped")
    else:
        zk = box.zookeeper_start()
        click.echo(f"zookeeper running on {zk.connect} (pid {zk.pid})")


@sandbox.command(name="rabbitmq")
@_dir
@click.argument("action", type=click.Choice(["start", "stop", "kill"]))
def rabbitmq_command(directory: str, action: str) -> None:
    """Start, stop or kill -9 a RabbitMQ broker for `drc sink` in DIR/rabbitmq (data kept;
    `drc sandbox down` stops it too). Erlang takes 5-20 s to start on a small machine."""
    from pathlib import Path

    from drc.sandbox import rabbitmq

    base = Path(directory) / "rabbitmq"
    info = rabbitmq.load(base)
    if action == "start":
        if info is None or not rabbitmq.running(info):
            info = rabbitmq.start(base, info)
            rabbitmq.save(info)
        click.echo(
            f"rabbitmq running on amqp://127.0.0.1:{info.amqp_port}/%2F (pid {info.pid}; "
            "RabbitMQ's default user guest, loopback only)"
        )
    elif info is None or not rabbitmq.running(info):
        click.echo("rabbitmq is not running")
    elif action == "stop":
        rabbitmq.stop(info)
        click.echo("rabbitmq stopped")
    else:
        rabbitmq.kill(info)
        click.echo("rabbitmq killed (SIGKILL); `start` brings it back with its data")
