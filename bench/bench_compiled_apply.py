"""The apply side's CPU per transaction, compiled (drc.native) against pure Python.

Uses the binlog bench_compiled.py records (``--binlog DIR``, recorded there if missing: a
sysbench oltp_write_only prepare and run plus 100-row transactions on a table of DECIMAL,
DATETIME(6) and nullable text). Each child process captures it into records once (not timed),
then times, per stage, the CPU of the best of ``--repeat`` passes with the garbage collector
off, as a channel does the work:

- decode: drc.core.codec.decode_transaction of every record (the subscriber)
- chain: the filter chain (SkipDrcOriginated, KeepTables, KeepApplicableDdl, MapNames
  ``sbtest.* -> sbtest_drc.*``, Idempotency; drc.apply.stages)
- plan: drc.apply.engine.ApplyEngine.prepare + decide, groups of ``--group`` transactions
  (drc.apply.plan.Planner, drc.apply.shapes), no conflict policy
- statements: each write's ``statement()`` (drc.mysql.sql: text and bound parameters)
- render: each statement's text with its values written in, as TargetSession.text does
  (drc.mysql.sql.literal, pymysql's escaping), and its COM_QUERY packet
  (drc.mysql.protocol.command)

and the sha256 of every statement's text and parameters and of every rendered packet, which must
be the same in both modes. One child with ``DRC_COMPILED=off``, one with ``=on``, alternating,
``--runs`` times; prints each run, and per stage the median and the worst pure/compiled ratio.

    python bench/bench_compiled_apply.py [--runs 3] [--repeat 5] [--group 100] [--binlog DIR]
    python bench/bench_compiled_apply.py --profile     # cProfile of one pure pass, by function
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

STAGES = ("decode", "chain", "plan", "statements", "render")


def records(binlog: Path) -> list[bytes]:
    """The recorded binlog captured as a replicator stores it (untimed)."""
    from bench_compiled import packets

    from drc.core import codec
    from drc.core.tablefilter import TableFilter
    from drc.replicator.assembler import TransactionAssembler
    from drc.replicator.binlog.events import FOR_LIBRARY, EventDecoder, TableMaps
    from drc.replicator.binlog.library import LibraryParser

    class Control:
        charset = "utf8mb4"

        def _get_dbms(self) -> str:
            return "mariadb"

    decoder = EventDecoder(TableMaps(), json.loads((binlog / "files.json").read_text())[0])
    decoder.checksum = True
    library = LibraryParser(Control(), decoder)
    assembler = TransactionAssembler(1, 1, TableFilter())
    out = []
    for packet in packets(binlog):
        event = decoder.decode(packet)
        if event is FOR_LIBRARY:  # TABLE_MAPs (cached) and rare events, none a row change
            library.parse(packet)
            continue
        if event is None:
            continue
        committed = assembler.feed(event)
        if committed is not None and not committed.empty:
            out.extend(codec.encode_transaction(t) for t in committed.fragments())
    return out


def target_tables() -> Any:
    """The target's definitions of the recorded tables, under their mapped names."""
    from drc.apply.engine import KnownTables
    from drc.core.target_table import TargetTable

    tables = {}
    for n in range(1, 5):
        name = f"sbtest{n}"
        tables[("sbtest_drc", name)] = TargetTable(
            "sbtest_drc", name, ("id", "k", "c", "pad"), ("id",)
        )
    tables[("sbtest_drc", "orders")] = TargetTable(
        "sbtest_drc", "orders", ("id", "name", "amount", "created", "qty", "note"), ("id",)
    )
    return KnownTables(tables)


WORKLOADS = ("sysbench", "orders", "bulk")


def workload(txn: Any) -> str:
    """sysbench: the oltp_write_only run's transactions (4 row changes); orders: the 100-row
    inserts and updates of DECIMAL and DATETIME(6) rows; bulk: sysbench's prepare (inserts of
    thousands of rows)."""
    if any(c.table == "orders" for c in txn.changes):
        return "orders"
    return "sysbench" if len(txn.changes) <= 10 else "bulk"


def child(binlog: Path, repeat: int, group_size: int, profile: bool) -> dict[str, Any]:
    import types

    import pymysql

    import drc.native
    from drc.apply.engine import ApplyEngine
    from drc.apply.stages import (
        Chain,
        Idempotency,
        KeepApplicableDdl,
        KeepTables,
        MapNames,
        NameMap,
        SkipDrcOriginated,
    )
    from drc.core import codec
    from drc.core.scn import SCN
    from drc.core.tablefilter import TableFilter
    from drc.mysql import sql
    from drc.mysql.driver import Link
    from drc.mysql.protocol import command

    every = records(binlog)
    engine = ApplyEngine(target_tables())
    conn = pymysql.connections.Connection(defer_connect=True, charset="utf8mb4")
    conn.server_status = 0  # as a server without NO_BACKSLASH_ESCAPES says
    escape = Link(conn, types.SimpleNamespace(send=None, receive=None)).escape  # type: ignore[arg-type]
    times: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, int]] = {}
    digest = hashlib.sha256()

    def timed(workload: str, stage: str, work: Any, *args: Any) -> Any:
        best, result = float("inf"), None
        for _ in range(repeat):
            result = None
            gc.collect()
            gc.disable()
            began = time.process_time()
            result = work(*args)
            best = min(best, time.process_time() - began)
            gc.enable()
        times.setdefault(workload, {})[stage] = best
        return result

    def decode(data: list[bytes]) -> list[Any]:
        return [codec.decode_transaction(r)[0] for r in data]

    def chain(txns: list[Any]) -> list[Any]:
        stages = Chain([
            SkipDrcOriginated(), KeepTables(TableFilter()), KeepApplicableDdl(),
            MapNames(NameMap({"sbtest.*": "sbtest_drc.*"}, {})), Idempotency(SCN.zero),
        ])  # fmt: skip
        return [kept for t in txns if (kept := stages(t)) is not None and kept.changes]

    def planned(kept: list[Any]) -> list[list[Any]]:
        groups = []
        for start in range(0, len(kept), group_size):
            pending = engine.prepare(kept[start : start + group_size])
            groups.append(list(engine.decide(pending).writes))
        return groups

    def statements(groups: list[list[Any]]) -> list[Any]:
        return [w.statement() for writes in groups for w in writes]

    def render(stmts: list[Any]) -> list[bytes]:
        literal = sql.literal
        return [command(s.sql % tuple([literal(v, escape) for v in s.params]))[0] for s in stmts]

    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
    by_workload: dict[str, list[bytes]] = {w: [] for w in WORKLOADS}
    for record in every:
        by_workload[workload(codec.decode_transaction(record)[0])].append(record)
    for name, data in by_workload.items():
        txns = timed(name, "decode", decode, data)
        kept = timed(name, "chain", chain, txns)
        groups = timed(name, "plan", planned, kept)
        stmts = timed(name, "statements", statements, groups)
        rendered = timed(name, "render", render, stmts)
        counts[name] = {
            "transactions": len(kept),
            "rows": sum(len(t.changes) for t in kept),
            "statements": len(stmts),
        }
        for statement in stmts:
            digest.update(statement.sql.encode())
            digest.update(repr(statement.params).encode())
        for packet in rendered:
            digest.update(packet)
    if profile:
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(40)
    return {
        "compiled": drc.native.STATE.compiled,
        "times": times,
        "counts": counts,
        "sha256": digest.hexdigest(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--group", type=int, default=100)
    parser.add_argument(
        "--binlog", type=Path, default=Path(tempfile.gettempdir()) / "drc-bench-binlog"
    )
    parser.add_argument("--modes", default="off,on", help="DRC_COMPILED values to alternate")
    parser.add_argument("--profile", action="store_true", help="cProfile one pure pass")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.profile:
        if args.profile:
            os.environ["DRC_COMPILED"] = "off"  # py-spy and cProfile see no compiled frames
        result = child(args.binlog, 1 if args.profile else args.repeat, args.group, args.profile)
        print(json.dumps(result))
        return
    if not (args.binlog / "files.json").is_file():
        from bench_compiled import record

        print(f"recording a binlog into {args.binlog} ...", flush=True)
        record(args.binlog, 5000, 20000)
    modes = args.modes.split(",")
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for run in range(args.runs):
        for mode in modes:
            argv = [sys.executable, __file__, "--child", "--binlog", str(args.binlog),
                    "--repeat", str(args.repeat), "--group", str(args.group)]  # fmt: skip
            env = {**os.environ, "DRC_COMPILED": mode}
            out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if mode in ("on", "off") and result["compiled"] != (mode == "on"):
                sys.exit(f"DRC_COMPILED={mode} ran compiled={result['compiled']}: build first")
            results[mode].append(result)
            took = (f"{stage} {result['times'][stage] * 1e3:.0f}" for stage in STAGES)
            print(f"run {run + 1} {mode:>3} (ms): {', '.join(took)}", flush=True)
    every = [r for mode in modes for r in results[mode]]
    same = all(r["sha256"] == every[0]["sha256"] for r in every)
    print(f"\nstatements, parameters and rendered packets identical in every run: {same}; "
          f"groups of {args.group} transactions\n")  # fmt: skip
    if len(modes) == 2:
        print(report(results[modes[0]], results[modes[1]], modes))
    if not same:
        sys.exit("the modes gave different statements")


def took(result: dict[str, Any], name: str, stage: str) -> float:
    """CPU seconds of a stage; ``apply``: the channel's own thread's, after the subscriber's
    decoding (chain, plan, statements, render)."""
    if stage == "apply":
        return sum(result["times"][name][s] for s in STAGES[1:])
    return float(result["times"][name][stage])


def report(first: list[dict[str, Any]], second: list[dict[str, Any]], modes: list[str]) -> str:
    """A markdown table: per workload and stage, CPU us per transaction (median of the runs)
    in each mode, and the ratio: median, and the worst run's."""
    a, b = modes
    lines = [
        f"| workload | stage | {a} us/txn | {b} us/txn | {a}/{b} median | worst run |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name in WORKLOADS:
        count = first[0]["counts"][name]
        txns = count["transactions"]
        label = f"{name} ({txns:,} txns, {count['rows']:,} rows, {count['statements']:,} stmts)"
        for stage in [*STAGES, "apply"]:
            x = statistics.median(took(r, name, stage) for r in first)
            y = statistics.median(took(r, name, stage) for r in second)
            worst = min(
                took(p, name, stage) / took(f, name, stage)
                for p, f in zip(first, second, strict=True)
            )
            shown = f"**{stage}**" if stage == "apply" else stage
            lines.append(f"| {label} | {shown} | {x / txns * 1e6:.1f} | {y / txns * 1e6:.1f} | "
                         f"{x / y:.2f}x | {worst:.2f}x |")  # fmt: skip
            label = ""
    return "\n".join(lines)


if __name__ == "__main__":
    main()
