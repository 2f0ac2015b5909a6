"""The pull API over real HTTP, served by a real replicator capturing the sandbox's dc1.

What subscribers read, from SCN zero to the end, in JSON and in records form, with and without
a table filter, is compared with the source binlog read independently by
python-mysql-replication; a live long-polling subscriber sees the same stream as it happens.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from drc.api import wire
from drc.config import DrcConfig
from drc.core.events import Transaction
from drc.core.jsonwire import transaction_from_json
from drc.core.scn import SCN
from drc.runtime import ReplicatorService, build_replicator
from drc.sandbox.sandbox import ServerInfo
from tests.support.capture import serving, source_section, source_table_rows
from tests.support.config import server_toml
from tests.support.servers import connect, fresh_database, master_position

TOKEN = "integration-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TXNS = 240
Rows = list[tuple[str, Any, Any]]


def _config(server: ServerInfo, tmp: Path, start: tuple[str, int]) -> DrcConfig:
    return DrcConfig.model_validate(
        {
            "datacenter": {"name": "dc1"},
            "source": source_section(server, 91001),
            "replicator": {
                "buffer_dir": str(tmp / "buf"),
                "start_from": f"{start[0]}:{start[1]}",
                "include": ["api_db.*"],
                "fragment_rows": 100,
                "commit_max_ms": 20,
            },
            "api": {"host": "127.0.0.1", "port": 0, "tokens": [TOKEN], "max_wait_ms": 5000},
        }
    )


@pytest.fixture
def served(dc1: ServerInfo, tmp_path: Path) -> Iterator[tuple[ReplicatorService, str, tuple]]:
    fresh_database(
        dc1,
        "api_db",
        "CREATE TABLE api_db.t (id INT PRIMARY KEY, v VARCHAR(40), n INT)",
        "CREATE TABLE api_db.u (id INT PRIMARY KEY, note VARCHAR(20))",
    )
    start = master_position(dc1)
    service = build_replicator(_config(dc1, tmp_path, start))
    url = service.start_api().url
    with serving(service):
        yield service, url, start


def _workload(server: ServerInfo, seed: int) -> None:
    rng = random.Random(seed)
    conn = connect(server, autocommit=False)
    ids: list[int] = []
    with conn.cursor() as cur:
        for n in range(TXNS):
            kind = rng.random()
            if n == TXNS // 2:  # one big transaction: stored as several fragments
                rows = [(10_000 + k, f"big{k}", k) for k in range(450)]
                cur.executemany("INSERT INTO api_db.t VALUES (%s, %s, %s)", rows)
            elif n == TXNS // 3:
                cur.execute("CREATE TABLE api_db.d (id INT PRIMARY KEY)")
            elif kind < 0.4 or len(ids) < 5:
                ids.append(n)
                cur.execute("INSERT INTO api_db.t VALUES (%s, %s, %s)", (n, f"v{n}", n % 7))
            elif kind < 0.6:
                cur.execute("UPDATE api_db.t SET n = n + 1 WHERE id = %s", (rng.choice(ids),))
            elif kind < 0.7:
                cur.execute(
                    "DELETE FROM api_db.t WHERE id = %s", (ids.pop(rng.randrange(len(ids))),)
                )
            else:  # two tables, one transaction
                cur.execute("INSERT INTO api_db.u VALUES (%s, %s)", (n, "multi"))
                cur.execute("UPDATE api_db.t SET v = %s WHERE id = %s", (f"m{n}", rng.choice(ids)))
            conn.commit()
    conn.close()


def _pull_all(
    url: str, binary: bool, cuts: list[int] | None = None, **params: Any
) -> list[Transaction]:
    """Every transaction from SCN zero to the replicator's newest, in batches (with
    ``split=1``, batches that may end inside a transaction: continued with ``within``)."""
    headers = {**AUTH, "Accept": wire.MEDIA_RECORDS} if binary else AUTH
    out: list[Transaction] = []
    after, epoch, within = "0:0:0:0", None, 0
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        while True:
            query = {"after": after, "max_events": 37, **params}
            if epoch is not None:  # the buffer must stay the one read so far
                query["epoch"] = epoch
            if within:
                query["within"] = within
            response = client.get(wire.PATH_EVENTS, params=query)
            assert response.status_code == 200, response.text
            if binary:
                batch = wire.split_records(response.content)
                after, epoch = (
                    response.headers[wire.HEADER_NEXT],
                    response.headers[wire.HEADER_EPOCH],
                )
                newest = response.headers[wire.HEADER_NEWEST]
                within = int(response.headers.get(wire.HEADER_NEXT_WITHIN, "0"))
            else:
                body = response.json()
                batch = [transaction_from_json(t) for t in body["transactions"]]
                after, epoch, newest = body["next"], body["epoch"], body["newest"]
                within = body.get("next_within", 0)
            if within:  # the batch ends inside the transaction at next
                assert batch and str(batch[-1].scn) == after and not batch[-1].last_fragment
                if cuts is not None:
                    cuts.append(within)
            out += batch
            if after == newest and not within:
                return out


def _by_transaction(txns: list[Transaction]) -> list[tuple[str | None, Rows]]:
    """Fragments joined per SCN, transactions without row changes left out."""
    rows: dict[SCN, Rows] = {}
    gtids: dict[SCN, str | None] = {}
    for txn in txns:
        rows.setdefault(txn.scn, []).extend((c.table, c.before, c.after) for c in txn.changes)
        gtids[txn.scn] = txn.gtid
    assert list(rows) == sorted(rows), "SCN order"
    return [(gtids[scn], r) for scn, r in rows.items() if r]


def _wait_caught_up(url: str, end: tuple[str, int], timeout: float = 60) -> None:
    target = (int(end[0].rsplit(".", 1)[1]), end[1])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = httpx.get(url + wire.PATH_STATUS, headers=AUTH).json()["buffer"]["last_scn"]
        if last is not None and tuple(int(x) for x in last.split(":")[2:]) >= target:
            return
        time.sleep(0.1)
    raise AssertionError(f"the replicator did not reach {end}")


def _live(url: str, done: threading.Event, out: list[Transaction]) -> None:
    """A subscriber long-polling while the workload runs."""
    after = "0:0:0:0"
    with httpx.Client(base_url=url, headers=AUTH, timeout=30) as client:
        while True:
            params = {"after": after, "wait_ms": 1000, "tables": "api_db.t"}
            body = client.get(wire.PATH_EVENTS, params=params).json()
            out += [transaction_from_json(t) for t in body["transactions"]]
            after = body["next"]
            if done.is_set() and after == body["newest"]:
                return


def test_subscribers_read_exactly_the_source_stream(
    served: tuple[ReplicatorService, str, tuple], dc1: ServerInfo
) -> None:
    service, url, start = served
    done, live = threading.Event(), []
    subscriber = threading.Thread(target=_live, args=(url, done, live), daemon=True)
    subscriber.start()
    _workload(dc1, seed=11)
    end = master_position(dc1)
    _wait_caught_up(url, end)
    done.set()
    subscriber.join(timeout=60)

    expected = source_table_rows(dc1, start, "api_db")
    assert len(expected) > TXNS * 0.8
    as_json, as_records = _pull_all(url, binary=False), _pull_all(url, binary=True)
    assert as_json == as_records
    assert _by_transaction(as_json) == expected
    big = [t for t in as_json if t.scn == next(t.scn for t in as_json if t.fragment > 0)]
    assert len(big) >= 5 and [t.last_fragment for t in big] == [False] * (len(big) - 1) + [True]
    assert any("CREATE TABLE api_db.d" in d.statement for t in as_json for d in t.ddl)
    # split pages: the big transaction in pages of about max_bytes, the same stream
    small = {"split": 1, "max_bytes": 1500}
    cuts: list[int] = []
    assert _pull_all(url, binary=True, cuts=cuts, **small) == as_json
    assert cuts == list(range(1, len(big))), "one fragment a page"
    assert _pull_all(url, binary=False, **small) == as_json

    only_u = [(g, [r for r in rows if r[0] == "u"]) for g, rows in expected]
    filtered = _pull_all(url, binary=True, tables="api_db.u")
    assert _by_transaction(filtered) == [(g, rows) for g, rows in only_u if rows]
    assert _pull_all(url, binary=False, tables="api_db.u") == filtered
    split_t = _pull_all(url, binary=True, tables="api_db.t", **small)
    assert _by_transaction(split_t) == [
        (g, [r for r in rows if r[0] == "t"])
        for g, rows in expected
        if any(r[0] == "t" for r in rows)
    ]

    only_t = [(g, [r for r in rows if r[0] == "t"]) for g, rows in expected]
    assert _by_transaction(live) == [(g, rows) for g, rows in only_t if rows]
    assert service.failure is None


def test_the_real_server_requires_a_token_and_reports_status(
    served: tuple[ReplicatorService, str, tuple], dc1: ServerInfo
) -> None:
    _, url, _ = served
    events = url + wire.PATH_EVENTS + "?after=0:0:0:0"
    assert httpx.get(events).status_code == 401
    wrong = httpx.get(events, headers={"Authorization": "Bearer wrong"})
    assert wrong.status_code == 401 and "invalid_token" in wrong.headers["www-authenticate"]
    assert httpx.get(events, headers=AUTH).status_code == 200
    assert httpx.get(url + wire.PATH_HEALTH).json() == {"status": "ok"}
    status = httpx.get(url + wire.PATH_STATUS, headers=AUTH).json()
    assert status["datacenter"] == "dc1" and status["source"] == f"{dc1.host}:{dc1.port}"
    assert dc1.password not in httpx.get(url + wire.PATH_STATUS, headers=AUTH).text
    assert "drc_api_requests_total" in httpx.get(url + "/metrics", headers=AUTH).text


def test_replicator_run_serves_the_api_and_prints_its_url(dc1: ServerInfo, tmp_path: Path) -> None:
    start = master_position(dc1)
    config = tmp_path / "dc1.toml"
    config.write_text(
        f"""
[datacenter]
name = "dc1"
{server_toml("source", dc1, replica_server_id=91003)}
[replicator]
buffer_dir = "{tmp_path / "buf"}"
start_from = "{start[0]}:{start[1]}"
include = ["api_db.*"]
heartbeat_interval_s = 0  # compared with the source's own transactions: no DRC heartbeats
[api]
port = 0
tokens = ["{TOKEN}"]
"""
    )
    argv = [sys.executable, "-m", "drc.cli", "replicator", "run", "--config", str(config)]
    proc = subprocess.Popen(
        [*argv, "--progress-every", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("API serving on http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split()[-1]
        assert httpx.get(url + wire.PATH_HEALTH, timeout=10).status_code == 200
        assert (
            httpx.get(url + wire.PATH_STATUS, headers=AUTH, timeout=10).json()["role"] == "leader"
        )
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
