"""``drc config check``: validate config files before a deploy or a reload."""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterable
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
    problem, and so is an excluded or masked column none of the tables its pattern selects has.
    Tables the metastore does not know are checked when the channel applies them.
    """
    failed = False
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError as exc:
            click.echo(f"{name}: not readable: {exc.strerror or exc}", err=True)
            failed = True
            continue
        problems = config_problems(text) or column_problems(text)
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


def column_problems(text: str) -> list[str]:
    """Checks of ``text`` (a valid config) against the tables this datacenter's metastore
    records, newest schemas: a row filter naming a column a table it selects lacks, and an
    excluded or masked column that none of the tables its pattern selects has (a typo there
    would let the data through). [] when there is no metastore to check against."""
    config = DrcConfig.model_validate(tomllib.loads(text))
    rep = config.replicator
    if not (rep.mask_columns or any(c.row_filters or c.exclude_columns for c in config.channels)):
        return []
    path = Path(rep.buffer_dir) / DEFAULT_FILENAME
    if not path.is_file():
        return []
    try:
        columns = _newest_columns(path)
    except DrcError as exc:
        return [f"metastore {path} not readable, columns not checked against it: {exc}"]
    problems = []
    for index, channel in enumerate(config.channels):
        where: tuple[str | int, ...] = ("channels", index)
        for pattern, predicate in channel.row_predicates().items():
            for (schema, table), names in _selected(columns, pattern):
                unknown = predicate.unknown_columns(names)
                if unknown:
                    problems.append(
                        _problem(text, (*where, "row_filters", pattern), unknown,
                                 f"not a column of {schema}.{table} (its columns: "
                                 f"{', '.join(names)})")
                    )  # fmt: skip
        for pattern, excluded in channel.exclude_columns.items():
            problems += _nowhere(text, (*where, "exclude_columns", pattern), excluded, columns)
    for pattern, masked in rep.mask_columns.items():
        problems += _nowhere(text, ("replicator", "mask_columns", pattern), masked, columns)
    return problems


Columns = dict[tuple[str, str], tuple[str, ...]]


def _newest_columns(path: Path) -> Columns:
    columns = {}
    with MetaStore.open(path, read_only=True) as store:
        for schema, table in store.tables():
            entry = store.version_at(schema, table)
            if entry is not None and entry.schema is not None:
                columns[(schema, table)] = entry.schema.column_names
    return columns


def _selected(columns: Columns, pattern: str) -> list[tuple[tuple[str, str], tuple[str, ...]]]:
    selects = TableFilter.build([pattern]).matches
    return [(name, names) for name, names in sorted(columns.items()) if selects(*name)]


def _nowhere(
    text: str, loc: tuple[str | int, ...], named: Iterable[str], columns: Columns
) -> list[str]:
    """``named`` columns that no table ``loc``'s pattern selects has (none selected: [])."""
    selected = _selected(columns, str(loc[-1]))
    if not selected:
        return []
    have = {c.lower() for _name, names in selected for c in names}
    unknown = [c for c in named if c.lower() not in have]
    if not unknown:
        return []
    tables = ", ".join(".".join(name) for name, _names in selected[:5])
    return [_problem(text, loc, unknown, f"a column of none of the tables it selects ({tables})")]


def _problem(text: str, loc: tuple[str | int, ...], unknown: Iterable[str], why: str) -> str:
    line = line_of(text, loc)
    return (
        "" if line is None else f"line {line}: "
    ) + f"{'.'.join(map(str, loc))}: names {', '.join(map(repr, unknown))}, {why}"
