"""The status page in headless Chromium, against two running datacenters.

Two DRC nodes run against the sandbox's dc1 and dc2; after a few writes on each side, dc1's
``/ui`` (loaded by Debian's chromium, scripts run) shows both datacenters, their replicators'
roles and SCN ranges, each channel with its state and lag, and a consumer group's card (its
members, ranges by state, lag and backlog). A screenshot is kept under
``$DRC_ARTIFACTS`` (default: the test's tmp dir) for CI to collect.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from drc.cli.main import cli
from drc.sandbox.demo import write_configs
from drc.sandbox.procs import wait_for
from drc.sandbox.sandbox import SandboxDescription, ServerInfo
from tests.support.apply import running_nodes
from tests.support.servers import connect, fresh_database

SCHEMA = "ui_db"
CHROMIUM_TIMEOUT_S = 90


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; `make setup` installs it")
        pytest.skip("chromium is not installed; run `make setup`")
    return found


def _render(url: str, workdir: Path, *extra: str) -> str:
    """The page's DOM after its scripts ran (virtual time lets its fetches finish)."""
    result = subprocess.run(
        [
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={workdir / 'chromium-profile'}", "--virtual-time-budget=8000",
            *extra, url,
        ],
        capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S, check=True,
    )  # fmt: skip
    return result.stdout


def _setup(server: ServerInfo) -> None:
    table = f"CREATE TABLE {SCHEMA}.t (id BIGINT PRIMARY KEY, v VARCHAR(40))"
    fresh_database(server, SCHEMA, table, log_bin=False)


def _write(server: ServerInfo, first_id: int, rows: int) -> None:
    conn = connect(server, database=SCHEMA)
    with conn.cursor() as cur:
        for n in range(rows):
            cur.execute("INSERT INTO t VALUES (%s, %s)", (first_id + n, server.datacenter))
    conn.close()


def _count(server: ServerInfo) -> int:
    conn = connect(server, database=SCHEMA)
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM t")
        count = int(cur.fetchone()[0])
    conn.close()
    return count


def test_status_page_shows_both_datacenters_and_each_channels_lag(
    sandbox: SandboxDescription, dc1: ServerInfo, dc2: ServerInfo, tmp_path: Path
) -> None:
    for server in (dc1, dc2):
        _setup(server)
    configs = write_configs(sandbox, tmp_path, schema=SCHEMA)
    with running_nodes(configs) as nodes:
        _write(dc1, 1, 5)
        _write(dc2, 1001, 7)
        assert wait_for(lambda: _count(dc1) == 12 and _count(dc2) == 12, 60), "no convergence"
        url = nodes["dc1"].api_url
        assert url is not None
        page = httpx.get(f"{url}/ui", timeout=10)
        assert page.status_code == 200
        # A strict policy (no inline script): the DOM below shows the page's script ran under it.
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self';" in policy

        paused = CliRunner().invoke(
            cli, ["channel", "pause", "from-dc2", "--api", url, "--reason", "page check"]
        )
        assert paused.exit_code == 0, paused.output
        group = {"name": "orders", "ranges": 4, "after": "0:0:0:0"}  # behind: lag and backlog
        made = httpx.post(f"{url}/v1/groups", json=group, timeout=10)  # an open API: admin
        assert made.status_code == 201, made.text

        artifacts = Path(os.environ.get("DRC_ARTIFACTS", tmp_path))
        artifacts.mkdir(parents=True, exist_ok=True)
        dom = _render(f"{url}/ui", tmp_path, "--dump-dom")
        _render(f"{url}/ui", tmp_path, f"--screenshot={artifacts / 'status-page.png'}",
                "--window-size=900,1400")  # fmt: skip

    for dc in ("dc1", "dc2"):
        section = re.search(
            rf'<section class="card datacenter" id="dc-{dc}">(.*?)</section>', dom, re.S
        )
        assert section, f"datacenter {dc} not shown:\n{dom[:3000]}"
        assert ">leader<" in section.group(1)
        assert re.search(
            r"<dt>SCN range</dt><dd>1:\d+:\d+:\d+ \.\. 1:\d+:\d+:\d+</dd>", section.group(1)
        )
    cards = {
        re.search(r'data-channel="([^"]+)" data-datacenter="([^"]+)"', chunk).groups(): chunk
        for chunk in dom.split('<div class="card channel" ')[1:]
    }
    assert set(cards) == {("from-dc2", "dc1"), ("from-dc1", "dc2")}, dom[:3000]
    assert 'class="state ok">running<' in cards[("from-dc1", "dc2")]
    paused_card = cards[("from-dc2", "dc1")]
    assert 'class="state warn">paused<' in paused_card
    # Who did what last, in UTC, with the reason given.
    assert re.search(r"last action: pause by open at [\d-]+ [\d:]+ UTC \(page check\)", paused_card)
    assert re.search(r"updated <span id=\"updated\">[\d-]+ [\d:]+ UTC</span>", dom), dom[:500]
    for card in cards.values():
        assert re.search(r'<span class="lag">[\d.]+ s</span>', card), card
        assert re.search(r'class="muted scale"> 0\u2013[\d.]+ s, 3 min<', card), card
        assert (artifacts / "status-page.png").stat().st_size > 10_000
    group_card = dom.split('<div class="card group" data-group="orders">')[1].split("</div>")[0]
    assert "<dt>members</dt><dd>0</dd>" in group_card, group_card  # none joined: all closed
    assert "<dt>ranges</dt><dd>4 closed</dd>" in group_card, group_card
    assert re.search(r'<span class="group-lag">[\d.]+ s</span>', group_card), group_card
    assert re.search(r'<span class="group-backlog">[\d.]+ [KMG]?i?B</span>', group_card), group_card
