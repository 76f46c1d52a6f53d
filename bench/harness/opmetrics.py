"""The operator's own request counters, read from its Prometheus ``/metrics`` endpoint.

The emulator counts requests by verb and resource but not by client, so its figures hold the
simulated kubelets' and resourceclaim controller's writes too. The operator counts what it sent
itself (``lockstep_api_requests_total`` by method and code, ``lockstep_api_conflicts_total`` by
resource): that is the exact figure for its writes per pod and its conflicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import aiohttp

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REQUESTS = "lockstep_api_requests_total"
CONFLICTS = "lockstep_api_conflicts_total"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse_prometheus(text: str) -> Samples:
    """(metric name, sorted labels) -> value of a Prometheus text exposition."""
    samples: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if match is None:
            raise ValueError(f"operator /metrics: cannot parse line {line!r}")
        labels = tuple(sorted(LABEL.findall(match["labels"] or "")))
        samples[(match["name"], labels)] = float(match["value"])
    return samples


def delta(before: Samples, after: Samples, name: str, by: str) -> dict[str, float]:
    """Growth of counter ``name`` between two scrapes, summed by the label ``by``."""
    grown: dict[str, float] = {}
    for (metric, labels), value in after.items():
        if metric != name:
            continue
        key = dict(labels).get(by, "")
        grown[key] = grown.get(key, 0.0) + value - before.get((metric, labels), 0.0)
    return {key: value for key, value in sorted(grown.items()) if value}


def writes(requests_by_method: Mapping[str, float]) -> float:
    return sum(value for method, value in requests_by_method.items() if method in WRITE_METHODS)


async def scrape(url: str) -> Samples:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        if response.status != 200:
            raise ValueError(f"operator metrics {url}: HTTP {response.status}")
        return parse_prometheus(await response.text())
