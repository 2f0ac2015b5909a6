"""A verify report as text lines or JSON (``drc verify --format``). Pure over the Report."""

from __future__ import annotations

import json
from typing import Any

from drc.core.rowsum import first_keys
from drc.verify.driver import Report


def as_dict(report: Report, keys_shown: int = 20) -> dict[str, Any]:
    return {
        "channel": report.channel,
        "seconds": round(report.seconds, 3),
        "rows": report.rows,
        "differences": report.differences,
        "recheck_rounds": report.rounds,
        "stalled": report.stalled,
        "tables": [
            {
                "source": t.source,
                "target": t.target,
                "rows": t.rows,
                "chunks": t.chunks,
                "chunks_differing": t.chunks_differing,
                "differences": t.counts(),
                "keys": first_keys(t.differences, keys_shown),
                "unsettled": len(t.unsettled),
                "unsettled_keys": first_keys(t.unsettled, keys_shown),
                "repaired": t.repaired,
                "seconds": round(t.seconds, 3),
                "skipped": t.skipped,
                "note": t.note,
            }
            for t in report.tables
        ],
    }


def as_json(report: Report, keys_shown: int = 20) -> str:
    return json.dumps(as_dict(report, keys_shown), indent=2, ensure_ascii=False)


def as_text(report: Report, keys_shown: int = 20) -> list[str]:
    lines = []
    for t in report.tables:
        if t.skipped:
            lines.append(f"{t.source} -> {t.target}: NOT COMPARED: {t.skipped}")
            continue
        counts = t.counts()
        kinds = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no differences"
        line = (f"{t.source} -> {t.target}: {t.rows} rows in {t.chunks} chunks, {kinds}, "
                f"{t.seconds:.1f}s")  # fmt: skip
        if t.repaired:
            line += f", {t.repaired} repaired"
        lines.append(line)
        for entry in first_keys(t.differences, keys_shown):
            repair = f" (repair: {entry['repair']})" if "repair" in entry else ""
            lines.append(f"  {entry['kind']:9} key {entry['key']}{repair}")
        if t.unsettled:
            lines.append(f"  {len(t.unsettled)} rows kept changing through every recheck "
                         "(not counted as differences; run verify again)")  # fmt: skip
    if report.stalled:
        lines.append(f"NOT ALL CONFIRMED: {report.stalled}; run verify again")
    verdict = "the sides differ" if report.differences else "the sides are equal"
    if report.differences:
        verdict += f" ({report.differences} differences)"
    lines.append(f"{report.rows} rows compared in {report.seconds:.1f}s: {verdict}")
    return lines
