"""Client libraries against the target, on one captured workload (issue 26, item 2).

A sandbox's dc1 runs sysbench oltp_write_only; DRC's replicator captures the binlog range into
an EventBuffer (in this process), and the transactions are decoded and planned once, in groups
of ``--group`` source transactions (one target transaction each, with its checkpoint upsert),
exactly as drc.apply plans them (drc.apply.plan.Planner; since r26-shapes it batches by shape
where key order allows, drc.apply.shapes: on sysbench drc-sink now plans about as
drc-sink-shapes does). The same groups are then applied into dc2 (a copy of the schema with
the starting rows, reset before every run) by each variant:

    drc-sink            DRC's current path: drc.apply.sink.TargetSession.write (pymysql's
                        connection, text protocol, statements pipelined in chunks, savepoints)
    drc-sink-shapes     the same, the group's writes reordered by shape where keys allow
                        (:func:`shape_batches`): one multi-row upsert per table and columns, one
                        multi-key DELETE, the updates one by one
    pymysql             cursor.execute(sql, params) per planned statement (one round trip each)
    mariadb-text        MariaDB Connector/Python, each statement rendered here (sql.literal,
                        the connection's escape_string) and run without parameters: COM_QUERY
    mariadb-binary      cursor.execute(sql, params): with parameters Connector/Python 1.1 always
                        uses the binary protocol (prepare, execute, close per statement)
    mariadb-prepared    one cursor(prepared=True) per statement text (meant to prepare once;
                        the server's counters show whether it does)
    mariadb-bulk        shape batches, each one executemany: one COM_STMT_BULK_EXECUTE per batch
    mysqlclient         mysqlclient (libmariadb, text protocol), cursor.execute per statement
    mysqlclient-shapes  shape batches with executemany (INSERTs rewritten into one multi-row
                        statement; UPDATE/DELETE looped)
    native              dc2 as a replica of dc1 applying the same binlog range (one SQL thread)

Each run reports wall time, this process's CPU per transaction (time.process_time), the target
server's CPU per transaction (utime+stime of its mariadbd, /proc/<pid>/stat, before and after),
the commands the server counted (SHOW GLOBAL STATUS: Questions, Com_insert, ...), and
whether CHECKSUM TABLE of the result equals the source's. Variants run in rounds, in a rotated
order, so drift on a shared host spreads over all of them. Usage (needs the optional clients,
e.g. a venv with ``pip install -e . mariadb mysqlclient``):

    python bench/bench_clients.py [--sysbench-seconds 8] [--group 500] [--rounds 3]
                                  [--variants a,b,...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_apply import Served, checksums, copy_schema  # noqa: E402
from bench.bench_replicator import (  # noqa: E402
    _first_binlog,
    connect,
    native_replication,
    position,
    start_source,
    sysbench,
)
from drc.apply import checkpoint, plan  # noqa: E402
from drc.apply.sink import TargetSession  # noqa: E402
from drc.core.codec import decode_transaction  # noqa: E402
from drc.core.events import Op, RowChange, Transaction  # noqa: E402
from drc.core.scn import SCN  # noqa: E402
from drc.core.target_table import TargetTable, key_of  # noqa: E402
from drc.mysql import sql  # noqa: E402
from drc.mysql.driver import TargetSettings  # noqa: E402
from drc.sandbox.sandbox import Sandbox, ServerInfo  # noqa: E402
from drc.tls import MysqlTls  # noqa: E402

SCHEMA, COPY, START = "sbtest", "sbtest_drc", "sbtest_start"
CHANNEL = "bench-clients"
STATUS = ("Questions", "Com_insert", "Com_update", "Com_delete", "Com_savepoint",
          "Com_stmt_prepare", "Com_stmt_execute", "Com_commit")  # fmt: skip
TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- the workload


@dataclass
class Group:
    """One target transaction: the planned writes (stream order), the same changes batched by
    shape (text form: multi-row; bulk form: single-row writes per batch), the checkpoint."""

    txns: int
    writes: list[plan.Write]
    shaped: list[plan.Write]
    bulk: list[list[plan.Write]]
    checkpoint: checkpoint.CheckpointRow


def capture(dc1: ServerInfo, start: tuple[str, int], end: tuple[str, int], workdir: Path):
    """dc1's transactions from ``start`` to ``end``, as DRC's replicator stored them."""
    served = Served(dc1, start, workdir / "buffer")
    try:
        served.wait_for(end)
        txns: list[Transaction] = []
        after = SCN.ZERO
        while records := served.buffer.read_after(after, max_records=5000, max_bytes=64 << 20):
            txns += [decode_transaction(r.payload)[0] for r in records]
            after = records[-1].scn
        return txns, served.buffer.epoch
    finally:
        served.close()


def shape_batches(changes: list[RowChange], tables: dict[str, TargetTable]) -> list[list[Any]]:
    """The changes in batches of one table, op and columns, in an order that keeps every key's
    changes in stream order: a change joins the latest batch of its shape unless a later batch
    holds an earlier change of one of its keys (then it starts a new batch at the end). Sound
    for tables whose only unique key is the primary key (sysbench's)."""
    batches: list[list[Any]] = []  # [table, op, change, ...]
    latest: dict[tuple[Any, ...], int] = {}
    touched: dict[tuple[Any, ...], int] = {}
    for change in changes:
        table = tables[change.table]
        shape = (change.table, change.op, () if change.op is Op.DELETE else tuple(change.row))
        keys = [(change.table, key_of(table, image))
                for image in (change.before, change.after) if image is not None]  # fmt: skip
        at = latest.get(shape)
        if at is None or any(touched.get(k, -1) > at for k in keys):
            batches.append([table, change.op])
            at = latest[shape] = len(batches) - 1
        batches[at].append(change)
        for k in keys:
            touched[k] = max(touched.get(k, -1), at)
    return batches


def shaped_writes(batch: list[Any], multi_row: bool) -> list[plan.Write]:
    """A batch's writes: multi-row upserts / one multi-key DELETE (``multi_row``), or one
    single-row write per change (the rows of one executemany)."""
    table, op, changes = batch[0], batch[1], batch[2:]
    if op is Op.UPDATE or not multi_row:
        planner = plan.Planner(max_rows=1)
        return [w for c in changes for w in [*planner.add(c, table), *planner.finish()]]
    planner = plan.Planner()
    return [w for c in changes for w in planner.add(c, table)] + planner.finish()


def make_groups(
    txns: list[Transaction], epoch: str, tables: dict[str, TargetTable], size: int
) -> list[Group]:
    groups = []
    for at in range(0, len(txns), size):
        part = txns[at : at + size]
        changes = [c for t in part for c in t.changes]
        planner = plan.Planner()
        writes = [w for c in changes for w in planner.add(c, tables[c.table])] + planner.finish()
        batches = shape_batches(changes, tables)
        shaped = [w for b in batches for w in shaped_writes(b, True)]
        bulk = [shaped_writes(b, False) for b in batches]
        row = checkpoint.CheckpointRow(CHANNEL, part[-1].scn, "dc1", epoch)
        groups.append(Group(len(part), writes, shaped, bulk, row))
    return groups


# ---------------------------------------------------------------------- the variants

SESSION_SETUP = (
    f"SET SESSION sql_mode = '{sql.SESSION_SQL_MODE}', time_zone = '{sql.SESSION_TIME_ZONE}', "
    "skip_replication = 1, @drc_apply = 1"
)


def _check(write: plan.Write, affected: int, odd: list[int]) -> None:
    if plan.settled(write, affected) is None or (
        isinstance(write, plan.Delete) and affected != write.count
    ):
        odd[0] += 1  # the sink would fall back here; none expected on a clean replay


def settings(server: ServerInfo) -> TargetSettings:
    return TargetSettings(server.host, server.port, server.user, server.password,
                          tls=MysqlTls(mode="disabled", section="target"))  # fmt: skip


def run_sink(server: ServerInfo, groups: list[Group], shaped: bool, odd: list[int]) -> None:
    session = TargetSession(settings(server))
    for g in groups:
        effects = session.write(g.shaped if shaped else g.writes, [], g.checkpoint)
        odd[0] += effects.fixes
    session.close()


def run_dbapi(conn: Any, groups: list[Group], qmark: bool, odd: list[int], **cursor: Any) -> None:
    """One execute per planned statement; ``qmark``: the driver wants ``?`` placeholders."""
    cur = conn.cursor(**cursor)
    texts: dict[str, str] = {}
    for g in groups:
        for w in g.writes:
            s = w.statement()
            text = s.sql
            if qmark:
                text = texts.get(s.sql) or texts.setdefault(s.sql, _qmark(s.sql))
            cur.execute(text, s.params)
            _check(w, cur.rowcount, odd)
        s = checkpoint.upsert(g.checkpoint)
        cur.execute(_qmark(s.sql) if qmark else s.sql, s.params)
        conn.commit()


def run_rendered(conn: Any, groups: list[Group], odd: list[int]) -> None:
    """mariadb: each statement's text rendered here, run without parameters (COM_QUERY)."""
    cur, escape_string = conn.cursor(), conn.escape_string

    def escape(value: Any) -> str:
        return "'" + escape_string(value) + "'"  # str only here (sysbench has no bytes)

    for g in groups:
        for w in [*g.writes, None]:
            s = w.statement() if w is not None else checkpoint.upsert(g.checkpoint)
            cur.execute(s.sql % tuple([sql.literal(v, escape) for v in s.params]))
            if w is not None:
                _check(w, cur.rowcount, odd)
        conn.commit()


def run_prepared(conn: Any, groups: list[Group], odd: list[int]) -> None:
    """A prepared cursor per statement text (mariadb: it executes the text it first had)."""
    cursors: dict[str, Any] = {}
    for g in groups:
        for w in [*g.writes, None]:
            s = w.statement() if w is not None else checkpoint.upsert(g.checkpoint)
            cur = cursors.get(s.sql)
            if cur is None:
                cur = cursors[s.sql] = conn.cursor(prepared=True)
            cur.execute(_qmark_cached(s.sql), s.params)  # a prepared cursor reuses its own
            if w is not None:
                _check(w, cur.rowcount, odd)
        conn.commit()


def run_bulk(conn: Any, groups: list[Group], qmark: bool, odd: list[int]) -> None:
    """One executemany per shape batch (mariadb: COM_STMT_BULK_EXECUTE; mysqlclient: INSERTs
    rewritten into one multi-row statement, the rest looped)."""
    cur = conn.cursor()
    for g in groups:
        for batch in g.bulk:
            statements = [w.statement() for w in batch]
            text = _qmark_cached(statements[0].sql) if qmark else statements[0].sql
            cur.executemany(text, [s.params for s in statements])
            affected, first = cur.rowcount, batch[0]
            if isinstance(first, plan.Upsert):
                if affected < len(batch):
                    odd[0] += 1
            elif affected != len(batch):
                odd[0] += 1  # an update or delete matched no row: fall back
        s = checkpoint.upsert(g.checkpoint)
        cur.execute(_qmark_cached(s.sql) if qmark else s.sql, s.params)
        conn.commit()


def _qmark(text: str) -> str:
    return text.replace("%s", "?").replace("%%", "%")


_QMARK: dict[str, str] = {}


def _qmark_cached(text: str) -> str:
    found = _QMARK.get(text)
    if found is None:
        found = _QMARK[text] = _qmark(text)
    return found


def mariadb_conn(server: ServerInfo) -> Any:
    import mariadb
    from mariadb.constants import CLIENT

    conn = mariadb.connect(host=server.host, port=server.port, user=server.user,
                           password=server.password, autocommit=False,
                           client_flag=CLIENT.FOUND_ROWS)  # fmt: skip
    conn.cursor().execute(SESSION_SETUP)
    return conn


def mysqlclient_conn(server: ServerInfo) -> Any:
    import MySQLdb
    from MySQLdb.constants import CLIENT

    conn = MySQLdb.connect(host=server.host, port=server.port, user=server.user,
                           password=server.password, charset="utf8mb4", autocommit=False,
                           client_flag=CLIENT.FOUND_ROWS)  # fmt: skip
    conn.cursor().execute(SESSION_SETUP)
    return conn


def pymysql_conn(server: ServerInfo) -> Any:
    from pymysql.constants import CLIENT

    conn = connect(server, autocommit=False, charset="utf8mb4", client_flag=CLIENT.FOUND_ROWS,
                   binary_prefix=True)  # fmt: skip
    conn.cursor().execute(SESSION_SETUP)
    return conn


def with_conn(opener: Callable[[ServerInfo], Any], body: Callable[..., None], *args: Any):
    def run(server: ServerInfo, groups: list[Group], odd: list[int]) -> None:
        conn = opener(server)
        try:
            body(conn, groups, *args, odd)
        finally:
            conn.close()

    return run


VARIANTS: dict[str, Callable[[ServerInfo, list[Group], list[int]], None]] = {
    "drc-sink": lambda s, g, odd: run_sink(s, g, False, odd),
    "drc-sink-shapes": lambda s, g, odd: run_sink(s, g, True, odd),
    "pymysql": with_conn(pymysql_conn, run_dbapi, False),
    "mariadb-text": with_conn(mariadb_conn, run_rendered),
    "mariadb-binary": with_conn(mariadb_conn, run_dbapi, True),
    "mariadb-prepared": with_conn(mariadb_conn, run_prepared),
    "mariadb-bulk": with_conn(mariadb_conn, run_bulk, True),
    "mysqlclient": with_conn(mysqlclient_conn, run_dbapi, False),
    "mysqlclient-shapes": with_conn(mysqlclient_conn, run_bulk, False),
}


# ---------------------------------------------------------------------- measuring


def server_cpu_us(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_US  # utime, stime


def status(server: ServerInfo) -> dict[str, int]:
    conn = connect(server)
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN %s", (STATUS,))
        found = {name: int(value) for name, value in cur.fetchall()}
    conn.close()
    return found


@dataclass
class Result:
    seconds: list[float] = field(default_factory=list)
    client_us: list[float] = field(default_factory=list)
    server_us: list[float] = field(default_factory=list)
    commands: dict[str, float] = field(default_factory=dict)
    same: list[bool] = field(default_factory=list)
    odd: int = 0


def reset(dc2: ServerInfo, native: bool) -> None:
    copy_schema(dc2, START, SCHEMA if native else COPY)
    conn = connect(dc2)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DELETE FROM drc.checkpoint WHERE channel = %s", (CHANNEL,))
    conn.close()
    time.sleep(1.0)  # let the copy's background flushing settle before the clock starts


def measure(name: str, dc1: ServerInfo, dc2: ServerInfo, groups: list[Group], span, txns: int,
            into: Result) -> None:  # fmt: skip
    native = name == "native"
    reset(dc2, native)
    before_status = status(dc2)
    odd = [0]
    cpu0, server0, wall0 = time.process_time(), server_cpu_us(dc2.pid), time.perf_counter()
    if native:
        native_replication(dc1, dc2, *span)
    else:
        VARIANTS[name](dc2, groups, odd)
    wall = time.perf_counter() - wall0
    server_us, client_us = server_cpu_us(dc2.pid) - server0, (time.process_time() - cpu0) * 1e6
    after_status = status(dc2)
    same = checksums(dc1, SCHEMA) == checksums(dc2, SCHEMA if native else COPY)
    into.seconds.append(wall)
    into.client_us.append(0.0 if native else client_us / txns)
    into.server_us.append(server_us / txns)
    for key in STATUS:
        delta = (after_status.get(key, 0) - before_status.get(key, 0)) / txns
        into.commands[key] = into.commands.get(key, 0.0) + delta  # summed over rounds
    into.same.append(same)
    into.odd += odd[0]
    print(f"{name}: {wall:.2f} s, client {client_us / txns:.0f} us/txn, server "
          f"{server_us / txns:.0f} us/txn, same={same}", file=sys.stderr, flush=True)  # fmt: skip


def table(results: dict[str, Result], txns: int, rounds: int) -> list[str]:
    lines = [
        "| variant | seconds (median) | txn/s | client CPU us/txn | target CPU us/txn "
        "| vs native target CPU | commands/txn | result = source |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    native = statistics.median(results["native"].server_us) if "native" in results else None
    for name, r in results.items():
        seconds = statistics.median(r.seconds)
        server = statistics.median(r.server_us)
        client = "-" if name == "native" else f"{statistics.median(r.client_us):.0f}"
        versus = f"{server / native:.2f}x" if native else "-"
        commands = ", ".join(f"{k.removeprefix('Com_')} {v / rounds:.2f}"
                             for k, v in r.commands.items() if v / rounds >= 0.01)  # fmt: skip
        ok = "yes" if all(r.same) and not r.odd else f"NO ({r.odd} fallbacks)"
        lines.append(f"| {name} | {seconds:.2f} | {txns / seconds:,.0f} | {client} | {server:.0f} "
                     f"| {versus} | {commands} | {ok} |")  # fmt: skip
    lines.append("")
    lines.append("Each run (seconds; client, target CPU us/txn):")
    for name, r in results.items():
        each = zip(r.seconds, r.client_us, r.server_us, strict=True)
        runs = "; ".join(f"{s:.2f} s, {c:.0f}, {t:.0f}" for s, c, t in each)
        lines.append(f"- {name}: {runs}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sysbench-seconds", type=int, default=8)
    parser.add_argument("--group", type=int, default=500, help="source txns per target txn")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(["native", *VARIANTS]))
    args = parser.parse_args()
    names = args.variants.split(",")
    workdir = Path(tempfile.mkdtemp(prefix="drc-bench-clients-"))
    box = Sandbox(workdir / "sbx")
    try:
        dc1, dc2 = start_source(box)
        before = position(dc1)
        native_replication(dc1, dc2, _first_binlog(dc1), before)  # dc2 holds the starting rows
        copy_schema(dc2, SCHEMA, START)
        sysbench(dc1, "run", args.sysbench_seconds)
        end = position(dc1)
        txns, epoch = capture(dc1, before, end, workdir)
        session = TargetSession(settings(dc2))
        session.ensure_checkpoint_table()
        copy_schema(dc2, START, COPY)
        names_in = {c.table for t in txns for c in t.changes}
        tables = {name: session.table(COPY, name) for name in names_in}
        session.close()
        began = time.process_time()
        groups = make_groups(txns, epoch, tables, args.group)
        planning_us = (time.process_time() - began) * 1e6 / len(txns)
        rows = sum(len(t.changes) for t in txns)
        writes = sum(len(g.writes) for g in groups)
        shaped = sum(len(g.shaped) for g in groups)
        batches = sum(len(g.bulk) for g in groups)
        results = {name: Result() for name in names}
        for n in range(args.rounds):
            order = names[n % len(names) :] + names[: n % len(names)]
            for name in order:
                measure(name, dc1, dc2, groups, (before, end), len(txns), results[name])
        print(f"\n### sysbench oltp_write_only, {args.sysbench_seconds}s: {len(txns)} "
              f"transactions, {rows} rows, {len(groups)} groups of {args.group}\n")  # fmt: skip
        print(f"Statements per group: planned (stream order) {writes / len(groups):.0f}, "
              f"shape-batched text {shaped / len(groups):.0f}, executemany batches "
              f"{batches / len(groups):.0f}; planning all three forms took "
              f"{planning_us:.0f} us/txn (not in the timings). Median of {args.rounds} rounds; "
              f"commands/txn from SHOW GLOBAL STATUS.\n")  # fmt: skip
        print("\n".join(table(results, len(txns), args.rounds)))
    finally:
        box.down()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
