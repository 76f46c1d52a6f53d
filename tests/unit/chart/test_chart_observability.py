"""The chart's Grafana dashboard and PrometheusRule (both off by default): valid JSON, the usual
dashboard label, and every expression names only metrics lockstep exports."""

from __future__ import annotations

import json
import re
from typing import Any

from chart_render import CHART_DIR, render

from lockstep.metrics import Metrics

METRIC = re.compile(r"\b((?:scheduler|lockstep)_[a-z0-9_]+)")
ON = {"metrics": {"grafanaDashboard": {"enabled": True}, "prometheusRule": {"enabled": True}}}


def exported() -> set[str]:
    """The series names lockstep's /metrics exposes (counters with _total, histograms' parts)."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        else:
            names.add(family.name)
    return names


def unknown_metrics(expressions: list[str]) -> list[str]:
    names = exported()
    return [f"{name} in {expr}" for expr in expressions for name in METRIC.findall(expr) if name not in names]


def test_both_are_off_by_default() -> None:
    kinds = {o["kind"] for o in render()}
    assert "PrometheusRule" not in kinds
    assert not [o for o in render() if o["kind"] == "ConfigMap"]


def test_dashboard_is_valid_json_with_the_sidecar_label_and_locksteps_metrics() -> None:
    (configmap,) = [o for o in render(ON) if o["kind"] == "ConfigMap"]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard: dict[str, Any] = json.loads(configmap["data"]["lockstep.json"])
    assert dashboard == json.loads((CHART_DIR / "dashboards" / "lockstep.json").read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(expressions) >= 8 and unknown_metrics(expressions) == []
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for shown in ("queue", "binds", "p99", "parked", "permit", "preemption"):
        assert shown in titles


def test_prometheus_rule_alerts_name_only_locksteps_metrics() -> None:
    (rule,) = [o for o in render(ON) if o["kind"] == "PrometheusRule"]
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert {r["alert"] for r in rules} == {
        "LockstepPodGroupsParked",
        "LockstepPodsUnschedulable",
        "LockstepGangsHeldAtPermit",
        "LockstepSchedulingErrors",
        "LockstepNoLeader",
    }
    assert unknown_metrics([r["expr"] for r in rules]) == []
    assert all(METRIC.search(r["expr"]) for r in rules)
    assert "30m" in next(r for r in rules if r["alert"] == "LockstepPodGroupsParked")["for"]
