"""deploy/prometheus and deploy/grafana: promtool accepts the rules and the scrape config, the
alerts fire when they should (promtool test rules), every dashboard query is valid PromQL, and
every alert links to its runbook in docs/operations.md. (That the metric names exist in /metrics
is checked against a running DRC: tests/integration/test_deploy_metrics.py.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from drc.api import health
from tests.support.monitoring import (
    ALERTS,
    DEPLOY,
    PENDING_ALERTS,
    dashboard,
    dashboard_exprs,
    metric_names,
    rules,
    selector_labels,
    unknown_names,
)
from tests.support.tools import require_tool

OPERATIONS = DEPLOY.parent / "docs" / "operations.md"
RULE_TESTS = Path(__file__).with_name("alerts_test.yml")


def _promtool(*args: str | Path) -> str:
    promtool = require_tool("promtool", "prometheus")
    done = subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def test_metric_names_are_found_in_promql() -> None:
    expr = (
        'sum by (datacenter, channel) (rate(drc_a_total{job="x", le=~"a|b"}[5m] offset 1h))'
        ' / on (instance) group_left (member) drc_b > 0.5e3 and drc_c{x="drc_d"} unless up'
    )
    assert metric_names(expr) == {"drc_a_total", "drc_b", "drc_c", "up"}
    assert metric_names('histogram_quantile(0.9, x{a="$dc"}[$__rate_interval])') == {"x"}
    assert selector_labels('a{job="j", b=~"x"} + c{d!="}"}') == {
        ("a", "job"),
        ("a", "b"),
        ("c", "d"),
    }


def test_unknown_metrics_and_selector_labels_are_reported() -> None:
    families = {"drc_x": {"table"}, "drc_y": set()}
    exprs = ['drc_x{channel="a", job="drc"} + up', 'drc_y{any="b"}', "rate(drc_z_total[1m])"]
    assert unknown_names(exprs, families) == [
        f"drc_x{{channel}} (in {exprs[0]!r})",
        f"drc_z_total (in {exprs[2]!r})",
    ]


def test_promtool_accepts_the_alerting_rules() -> None:
    assert "SUCCESS" in _promtool("check", "rules", ALERTS, PENDING_ALERTS)


def test_alerts_fire_when_they_should_and_not_on_an_idle_source(tmp_path: Path) -> None:
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    shutil.copy(ALERTS, tmp_path / ALERTS.name)
    assert "SUCCESS" in _promtool("test", "rules", tmp_path / RULE_TESTS.name)


def test_promtool_accepts_the_scrape_config(tmp_path: Path) -> None:
    """The config, with the token and CA files it names made in a temp dir (promtool opens them)."""
    text = (DEPLOY / "prometheus" / "prometheus.yml").read_text()
    for name in re.findall(r"/etc/prometheus/([\w.-]+)", text):
        (tmp_path / name).write_text("x\n")
    (tmp_path / "prometheus.yml").write_text(text.replace("/etc/prometheus/", f"{tmp_path}/"))
    shutil.copy(ALERTS, tmp_path / ALERTS.name)
    assert "SUCCESS" in _promtool("check", "config", tmp_path / "prometheus.yml")


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """Grafana's variables replaced as Grafana does, each query checked as a recording rule."""
    exprs = [re.sub(r"\$\w+", ".*", e.replace("$__rate_interval", "1m")) for e in dashboard_exprs()]
    checks = [{"record": f"drc:dashboard_query_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": checks}]}))
    assert f"SUCCESS: {len(checks)} rules found" in _promtool("check", "rules", path)


def test_the_dashboard_is_well_formed() -> None:
    board = dashboard()
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells = [
        (p["gridPos"]["x"] + dx, p["gridPos"]["y"] + dy)
        for p in panels
        for dx in range(p["gridPos"]["w"])
        for dy in range(p["gridPos"]["h"])
    ]
    assert len(set(cells)) == len(cells), "panels overlap"
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in panels)
    for panel in panels:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "datacenter", "member", "channel"]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("path", [ALERTS, PENDING_ALERTS], ids=lambda p: p.name)
def test_every_alert_says_how_bad_and_links_its_runbook(path: Path) -> None:
    headings = re.findall(r"^#+ (.+)$", OPERATIONS.read_text(), re.M)
    anchors = {_anchor(h) for h in headings}
    for rule in rules(path):
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        page, _, anchor = rule["annotations"]["runbook"].partition("#")
        assert page == "docs/operations.md" and anchor in anchors, rule["alert"]


def test_operations_doc_names_only_files_that_exist() -> None:
    text = OPERATIONS.read_text()
    pending = {"source-failover.md"}  # written with source failover (issue 13 item 3)
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in link and link not in pending:
            assert (OPERATIONS.parent / link).exists(), link
    for name in re.findall(r"`(deploy/[\w./@-]+)`", text):
        assert (DEPLOY.parent / name).exists(), name
    for alert in {r["alert"] for p in (ALERTS, PENDING_ALERTS) for r in rules(p)}:
        assert alert in text, f"{alert} has no mention in docs/operations.md"


def test_operations_doc_says_what_the_code_does() -> None:
    """Every /healthz state and per-channel series the code has, groups as built, and the
    group's leadership number called its term (a buffer's epoch is another thing)."""
    text = OPERATIONS.read_text()
    for state in health._STATES:
        assert f"`{state}`" in text, f"/healthz state {state} is not in docs/operations.md"
    source = Path(health.__file__).read_text()
    for name in re.findall(r'Family\(\s*"(drc_channel_\w+)"', source):
        assert name in text, f"{name} is not in docs/operations.md"
    assert not re.search(r"[Nn]ot built yet|come with issue", text)
    assert not re.search(r"(fenced|older|role and) [^.]*epoch", text)
