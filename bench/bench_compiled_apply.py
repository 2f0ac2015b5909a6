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
be the same in every child. One child with ``DRC_COMPILED=off``, one with ``=on`` (per tree of
``--trees``: each imports drc from its own tree and needs its own build), in turn, ``--runs``
times; prints per workload and stage the median us per transaction of each, and each one's
speed-up over the first: median and worst run.

    python bench/bench_compiled_apply.py [--runs 3] [--repeat 5] [--group 100] [--binlog DIR]
                                         [--trees BEFORE,AFTER]
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
        render = getattr(sql, "render", None)  # before this branch: Session.text's own loop
        if render is None:
            literal = sql.literal
            return [
                command(s.sql % tuple([literal(v, escape) for v in s.params]))[0] for s in stmts
            ]
        return [command(render(s, escape))[0] for s in stmts]

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
    parser.add_argument("--trees", default="", help="source trees to compare, e.g. A,B")
    parser.add_argument("--out", type=Path, default=None, help="write every run's figures here")
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
    trees = [Path(t).resolve() for t in args.trees.split(",") if t] or [Path(__file__).parents[1]]
    # every (tree, DRC_COMPILED) in turn, run after run: the host's load hits them alike
    configs = [(tree, mode) for tree in trees for mode in ("off", "on")]
    results: dict[str, list[dict[str, Any]]] = {_label(*c, trees): [] for c in configs}
    for run in range(args.runs):
        for tree, mode in configs:
            argv = [sys.executable, str(tree / "bench" / Path(__file__).name), "--child",
                    "--binlog", str(args.binlog), "--repeat", str(args.repeat),
                    "--group", str(args.group)]  # fmt: skip
            env = {**os.environ, "DRC_COMPILED": mode, "PYTHONPATH": str(tree)}
            out = subprocess.run(
                argv, check=True, capture_output=True, text=True, env=env, cwd=tree
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result["compiled"] != (mode == "on"):
                sys.exit(f"{tree}: DRC_COMPILED={mode} ran compiled={result['compiled']}: build")
            label = _label(tree, mode, trees)
            results[label].append(result)
            apply = sum(took(result, w, "apply") for w in WORKLOADS) * 1e3
            print(f"run {run + 1} {label}: apply stages {apply:.0f} ms", flush=True)
    every = [r for rs in results.values() for r in rs]
    same = all(r["sha256"] == every[0]["sha256"] for r in every)
    print(f"\nstatements, parameters and rendered packets identical in every run: {same}; "
          f"groups of {args.group} transactions\n")  # fmt: skip
    print(report(results))
    if args.out is not None:
        args.out.write_text(json.dumps(results))
    if not same:
        sys.exit("the trees or modes gave different statements")


def _label(tree: Path, mode: str, trees: list[Path]) -> str:
    kind = "pure" if mode == "off" else "compiled"
    return kind if len(trees) == 1 else f"{tree.name} {kind}"


def took(result: dict[str, Any], name: str, stage: str) -> float:
    """CPU seconds of a stage; ``apply``: the channel's own thread's, after the subscriber's
    decoding (chain, plan, statements, render)."""
    if stage == "apply":
        return sum(result["times"][name][s] for s in STAGES[1:])
    return float(result["times"][name][stage])


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    """A markdown table: per workload and stage, CPU us per transaction (median of the runs)
    of each configuration, and speed-ups (runs of one round paired): every configuration over
    the first, and the last tree's pure over its compiled; median and the worst run's."""
    labels = list(results)
    pairs = [(labels[0], label) for label in labels[1:]]
    if len(labels) > 2:
        pairs.append((labels[-2], labels[-1]))
    head = " | ".join(f"{label} us/txn" for label in labels)
    ratios = " | ".join(f"{a} / {b}" for a, b in pairs)
    lines = [f"| workload | stage | {head} | {ratios} (median; worst run) |"]
    lines.append("| --- | --- |" + " ---: |" * (len(labels) + len(pairs)))
    for name in WORKLOADS:
        count = results[labels[0]][0]["counts"][name]
        txns = count["transactions"]
        label = f"{name} ({txns:,} txns, {count['rows']:,} rows, {count['statements']:,} stmts)"
        for stage in [*STAGES, "apply"]:
            cells = [label, f"**{stage}**" if stage == "apply" else stage]
            for other in labels:
                median = statistics.median(took(r, name, stage) for r in results[other])
                cells.append(f"{median / txns * 1e6:.1f}")
            for a, b in pairs:
                each = [
                    took(x, name, stage) / took(y, name, stage)
                    for x, y in zip(results[a], results[b], strict=True)
                ]
                cells.append(f"{statistics.median(each):.2f}x; {min(each):.2f}x")
            lines.append("| " + " | ".join(cells) + " |")
            label = ""
    return "\n".join(lines)


if __name__ == "__main__":
    main()
