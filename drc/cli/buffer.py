"""``drc buffer inspect|verify|repair``: look into an EventBuffer directory, and discard damage.

inspect and verify change nothing; repair is the one explicit, lossy step (see
:mod:`drc.eventbuffer.repair`)."""

from __future__ import annotations

import json
import sys

import click

from drc.cli.options import format_option
from drc.eventbuffer.buffer import EventBuffer
from drc.eventbuffer.repair import repair_buffer
from drc.eventbuffer.verify import describe_buffer, verify_buffer

_COLUMNS = ("file", "seq", "first_scn", "last_scn", "records", "bytes")


@click.group()
def buffer() -> None:
    """Inspect and verify EventBuffer directories (safe on a buffer a writer is using), or
    repair a damaged one (the writer stopped)."""


@buffer.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@format_option("table", "table for people, json for scripts.")
def inspect(directory: str, fmt: str) -> None:
    """Describe the buffer in DIRECTORY: epoch, totals, and each segment's file, sequence
    number, SCN range, record count and bytes.

    Opens the buffer read-only: no lock is taken and nothing is repaired, so the counts of a
    live buffer are a snapshot and a torn tail shows as damage of the last segment.
    """
    with EventBuffer.open_read_only(directory) as buf:
        info = describe_buffer(buf)
    if fmt == "json":
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"buffer           {info['directory']}")
    click.echo(f"epoch            {info['epoch']}")
    click.echo(f"oldest servable  {info['oldest_servable']}")
    click.echo(f"SCN range        {info['first_scn']} .. {info['last_scn']}")
    click.echo(f"records          {info['records']}")
    click.echo(f"bytes            {info['bytes']}")
    click.echo(f"segments         {len(info['segments'])}")
    click.echo("")
    rows = [[str(seg[col]) for col in _COLUMNS] for seg in info["segments"]]
    widths = [max(len(col), *(len(row[i]) for row in rows)) for i, col in enumerate(_COLUMNS)]
    click.echo("  ".join(col.ljust(w) for col, w in zip(_COLUMNS, widths, strict=True)).rstrip())
    for row, seg in zip(rows, info["segments"], strict=True):
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        click.echo(line + (f"  DAMAGED: {seg['damage']}" if seg["damage"] else ""))


@buffer.command()
@click.argument("directory", type=click.Path(file_okay=False))
def verify(directory: str) -> None:
    """Check every byte of the buffer in DIRECTORY against the segment format.

    Checks buffer.json, each segment header (magic, version, CRC, epoch, sequence number,
    prev_scn chain) and every record (length, CRC, padding, flags, SCN order, LZ4 payload).
    Prints the segment file and offset of the first problem in each bad segment and exits 1;
    exits 0 with a one-line summary when the buffer is clean. Changes nothing.
    """
    report = verify_buffer(directory)
    for problem in report.problems:
        click.echo(f"CORRUPT {problem}", err=True)
    click.echo(report.summary())
    if not report.ok:
        sys.exit(1)


@buffer.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
def repair(directory: str) -> None:
    """Discard damaged committed records of the buffer in DIRECTORY, visibly.

    Run it only when the replicator refuses to start because committed records are damaged
    and the buffer cannot be restored from a peer. The replicator must be stopped. The
    segments up to the last damaged one are moved to DIRECTORY/discarded-<time>/; the buffer
    then serves reads only after the newest SCN seen in them: subscribers at older positions
    are served from the source binlog while it has them, else get 410 scn_too_old and must
    resync (never a silent gap), and capture resumes after that SCN. Does nothing when no
    committed record is damaged.
    """
    report = repair_buffer(directory)
    for damage in report.damage:
        click.echo(f"DISCARDED {damage}", err=True)
    click.echo(report.summary())
