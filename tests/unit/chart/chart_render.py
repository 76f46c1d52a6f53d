"""Render charts/lockstep offline with helm-python-sdk (Helm's Go SDK) and parse the manifests."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import helm_python
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART_DIR = REPO_ROOT / "charts" / "lockstep"
RELEASE = "lockstep"
NAMESPACE = "lockstep-system"

# The non-default install the tests exercise next to the defaults.
HA_VALUES: dict[str, Any] = {
    "replicaCount": 2,
    "featureGates": {"DRAListTypeAttributes": True, "DRAPrioritizedList": False},
    "namespaces": ["team-a", "team-b"],
    "schedulerName": "lockstep-gang",
    "logging": {"format": "console", "level": "debug"},
    "metrics": {"port": 9191, "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "leaderElection": {"leaseName": "lockstep-ha"},
}


@cache
def chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART_DIR)


def render(values: dict[str, Any] | None = None, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """Every object the chart renders (NOTES.txt excluded), like ``helm template``."""
    rendered = chart().render(values or {}, name=RELEASE, namespace=namespace)
    objects: list[dict[str, Any]] = []
    for template, text in sorted(rendered.items()):
        if template.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def notes(values: dict[str, Any] | None = None) -> str:
    rendered = chart().render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return next(text for template, text in rendered.items() if template.endswith("NOTES.txt"))


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, rendered {len(matches)}"
    return matches[0]


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)
