"""What deploy/grafana/drc.json and deploy/prometheus/*.yml query: PromQL expressions, and the
metric and label names in them (shared by the unit and integration tests of those files)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "drc.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PENDING_ALERTS = DEPLOY / "prometheus" / "alerts-pending.yml"  # series not exported yet
# Series that are not DRC's: Prometheus' own per target, node_exporter's filesystem figures.
EXTERNAL = {"up", "node_filesystem_avail_bytes", "node_filesystem_size_bytes"}
# Labels Prometheus adds to every scraped series (deploy/prometheus/prometheus.yml).
TARGET_LABELS = {"job", "instance", "datacenter", "member"}

_STRING = re.compile(r'"(?:\\.|[^"\\])*"')
_GRAFANA_VAR = re.compile(r"\$\{[^}]*\}|\$\w+")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_TOKEN = re.compile(r"\d[\w.+-]*|[A-Za-z_:][\w:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or"}
_KEYWORDS |= {"unless", "offset", "bool", "inf", "nan", "atan2"}
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.S)


def metric_names(expr: str) -> set[str]:
    """Every metric name a PromQL expression reads (functions, keywords, labels excluded)."""
    text = _GRAFANA_VAR.sub("1", _STRING.sub('""', expr))
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for token in _TOKEN.finditer(text):
        word = token.group(0)
        called = text[token.end() :].lstrip().startswith("(")
        if not word[0].isdigit() and not called and word.lower() not in _KEYWORDS:
            names.add(word)
    return names


def selector_labels(expr: str) -> set[tuple[str, str]]:
    """(metric, label) for every label matcher in a selector: ``m{a="x"}`` -> {("m", "a")}."""
    text = _STRING.sub('""', expr)
    return {
        (found.group(1), label)
        for found in _SELECTOR.finditer(text)
        for label in _MATCHER.findall(found.group(2))
    }


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def dashboard_exprs() -> list[str]:
    """Panel queries and template variable queries (``label_values(expr, label)`` -> expr)."""
    board = dashboard()
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"]
            found = _LABEL_VALUES.match(query)
            exprs.append(found.group(1) if found else query)
    return exprs


def rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def alert_exprs(path: Path = ALERTS) -> list[str]:
    return [str(rule["expr"]) for rule in rules(path)]


def exported(metrics_text: str) -> dict[str, set[str]]:
    """{family name: label names seen on its samples} from a Prometheus text exposition."""
    families: dict[str, set[str]] = {}
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            families.setdefault(line.split()[2], set())
        elif line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            name = name.split()[0]
            labels = re.findall(r'(\w+)="', rest.rpartition("}")[0]) if rest else []
            families.setdefault(name, set()).update(labels)
    return families


def unknown_names(exprs: list[str], families: dict[str, set[str]]) -> list[str]:
    """What the expressions read that the exposition lacks: metric names, and labels a selector
    matches on that neither the family's samples nor Prometheus' target labels have."""
    problems = []
    for expr in exprs:
        for name in sorted(metric_names(expr) - set(families) - EXTERNAL):
            problems.append(f"{name} (in {expr!r})")
        for name, label in sorted(selector_labels(expr)):
            labels = families.get(name)
            if labels and label not in labels | TARGET_LABELS:
                problems.append(f"{name}{{{label}}} (in {expr!r})")
    return problems
