"""What the Spark commands (``drc catchup``, ``drc snapshot``) share: --master, logging."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import click

from drc.cli.run import setup_logging

master_option: Callable[[Any], Any] = click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master: local[*], local[N] or spark://HOST:PORT (a standalone cluster).",
)


def prepare(master: str) -> None:
    """Refuse a master DRC does not run on (as a bad --master), then set up logging with
    Spark's own chatter at WARNING."""
    from drc.spark.session import check_master

    try:
        check_master(master)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--master") from None
    setup_logging()
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
