"""``drc config check``: validate config files before a deploy or a reload."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import click

from drc.config import DrcConfig, config_problems
from drc.config_lines import line_of
from drc.core.errors import DrcError
from drc.core.tablefilter import TableFilter
from drc.metastore import MetaStore
from drc.metastore.file import DEFAULT_FILENAME


@click.group()
def config() -> None:
    """Work with DRC config files."""


@config.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def check(files: tuple[str, ...]) -> None:
    """Validate each FILE; print its problems as FILE:LINE: field: message and exit 1 if any.

    Nothing is connected to: this checks the file's form and values (what `drc run` would refuse
    at start), not whether the servers it names are reachable. A channel's row_filters are also
    checked against the columns of the tables this datacenter's metastore records (in
    [replicator] buffer_dir, when it exists): a predicate naming a column the table lacks is a
    problem. Tables the metastore does not know are checked when the channel applies them.
    """
    failed = False
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError as exc:
            click.echo(f"{name}: not readable: {exc.strerror or exc}", err=True)
            failed = True
            continue
        problems = config_problems(text) or row_filter_problems(text)
        for problem in problems:
            where, _, rest = problem.partition(": ")
            if where.startswith("line "):
                click.echo(f"{name}:{where[5:]}: {rest}", err=True)
            else:
                click.echo(f"{name}: {problem}", err=True)
        if problems:
            failed = True
        else:
            click.echo(f"{name}: OK")
    if failed:
        sys.exit(1)


def row_filter_problems(text: str) -> list[str]:
    """Row filters naming a column that the metastore's newest schema of a table they select
    lacks (``text`` is a valid config); [] when there is no metastore to check against."""
    config = DrcConfig.model_validate(tomllib.loads(text))
    if not any(c.row_filters for c in config.channels):
        return []
    path = Path(config.replicator.buffer_dir) / DEFAULT_FILENAME
    if not path.is_file():
        return []
    try:
        with MetaStore.open(path, read_only=True) as store:
            columns = {}
            for schema, table in store.tables():
                entry = store.version_at(schema, table)
                if entry is not None and entry.schema is not None:
                    columns[(schema, table)] = entry.schema.column_names
    except DrcError as exc:
        return [f"metastore {path} not readable, row_filters not checked against it: {exc}"]
    problems = []
    for index, channel in enumerate(config.channels):
        for pattern, predicate in channel.row_predicates().items():
            selects = TableFilter.build([pattern]).matches
            for (schema, table), names in sorted(columns.items()):
                unknown = predicate.unknown_columns(names) if selects(schema, table) else []
                if unknown:
                    loc = ("channels", index, "row_filters", pattern)
                    line = line_of(text, loc)
                    problems.append(
                        ("" if line is None else f"line {line}: ")
                        + f"{'.'.join(map(str, loc))}: names "
                        f"{', '.join(map(repr, unknown))}, not a column of {schema}.{table} "
                        f"(its columns: {', '.join(names)})"
                    )
    return problems
