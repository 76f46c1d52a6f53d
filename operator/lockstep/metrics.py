"""Prometheus metrics: kube-scheduler's names where they exist, ``lockstep_*`` for the rest.

Each operator instance owns a registry, so several operators in one process (tests, the demo) do
not share counters.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from aiohttp import web

ATTEMPT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
POD_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        # Gauges computed from live state are refreshed by these callbacks when /metrics is read.
        self.before_scrape: list[Callable[[], None]] = []
        r = self.registry
        self.podgroup_attempts = Counter(
            "scheduler_podgroup_schedule_attempts",
            "PodGroup scheduling attempts by result (scheduled, unschedulable, waiting, error).",
            ["result"],
            registry=r,
        )
        self.podgroup_attempt_duration = Histogram(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "Duration of one PodGroup scheduling attempt (group cycle), by result.",
            ["result"],
            buckets=ATTEMPT_BUCKETS,
            registry=r,
        )
        self.pending_pods = Gauge(
            "scheduler_pending_pods",
            "Pending pods by queue (active, backoff, unschedulable).",
            ["queue"],
            registry=r,
        )
        self.pod_scheduling_duration = Histogram(
            "scheduler_pod_scheduling_duration_seconds",
            "Time from a pod entering the queue to its binding.",
            buckets=POD_BUCKETS,
            registry=r,
        )
        self.inflight_claim_allocations = Gauge(
            "lockstep_inflight_claim_allocations",
            "ResourceClaim allocations reserved in memory and not yet written to the API.",
            registry=r,
        )
        self.parked_podgroups = Gauge(
            "lockstep_parked_podgroups",
            "PodGroups whose last verdict no retry can change, waiting for an event that could (no timed"
            " retry).",
            registry=r,
        )
        self.permit_waiting_capacity = Gauge(
            "lockstep_permit_waiting_capacity",
            "Capacity (base units: millicores, bytes, pods) held by gangs waiting at Permit.",
            ["resource"],
            registry=r,
        )
        self.api_conflicts = Counter(
            "lockstep_api_conflicts",
            "409 Conflict answers from the API server, by resource.",
            ["resource"],
            registry=r,
        )
        self.api_requests = Counter(
            "lockstep_api_requests",
            "Requests lockstep sent to the API server, by method and HTTP status code.",
            ["method", "code"],
            registry=r,
        )
        self._api_requests_by_answer: dict[tuple[str, int], Counter] = {}
        self.bindings = Counter(
            "lockstep_bindings", "Pod bindings by result (bound, failed).", ["result"], registry=r
        )
        self.podgroup_status_writes = Counter(
            "lockstep_podgroup_status_writes",
            "PodGroup status patches by result (written, conflict, error).",
            ["result"],
            registry=r,
        )
        self.preemption_attempts = Counter(
            "lockstep_preemption_attempts",
            "Preemption attempts of groups that did not fit, by result "
            "(planned, waiting, no_plan, not_eligible).",
            ["result"],
            registry=r,
        )
        self.preemption_victims = Counter(
            "lockstep_preemption_victims",
            "Pods preempted, by reason (pod: on its own; gang: with its whole gang).",
            ["reason"],
            registry=r,
        )
        self.reservations = Gauge(
            "lockstep_reservations",
            "Gangs holding capacity (a capacity reservation) right now.",
            registry=r,
        )
        self.reserved_capacity = Gauge(
            "lockstep_reserved_capacity",
            "Capacity held by reservations (base units: millicores, bytes, pods), by resource.",
            ["resource"],
            registry=r,
        )
        self.reservation_age = Gauge(
            "lockstep_reservation_age_seconds",
            "Age of the oldest reservation held (0 when none).",
            registry=r,
        )
        self.reservation_duration = Histogram(
            "lockstep_reservation_duration_seconds",
            "How long reservations were held, by how they ended (completed, timed_out, yielded, released).",
            ["result"],
            buckets=POD_BUCKETS,
            registry=r,
        )
        self.backfilled_pods = Counter(
            "lockstep_backfilled_pods",
            "Pods bound on capacity held for a gang because they end before it is expected to fit.",
            registry=r,
        )
        self.stale_gang_recoveries = Counter(
            "lockstep_stale_gang_recoveries",
            "Groups below minCount for longer than their staleGracePeriodSeconds whose unfinished "
            "members lockstep evicted.",
            registry=r,
        )
        self.stale_gang_evictions = Counter(
            "lockstep_stale_gang_evictions",
            "Evictions of members of stale groups, by result (evicted, refused: a PodDisruptionBudget "
            "said 429 and it is retried, changed: the member changed since the decision (409) and is "
            "reconsidered, gone, error).",
            ["result"],
            registry=r,
        )
        self.joint_searches = Counter(
            "lockstep_joint_searches",
            "Joint placement searches of gangs greedy placement left unschedulable, by result "
            "(found, not_found, budget_exhausted).",
            ["result"],
            registry=r,
        )
        self.is_leader = Gauge("lockstep_leader", "1 while this process holds the leader lease.", registry=r)
        self.last_cycle = Gauge(
            "lockstep_last_cycle_timestamp_seconds",
            "Unix time at which the last scheduling cycle finished.",
            registry=r,
        )

    def observe_response(self, method: str, path: str, status: int) -> None:
        requests = self._api_requests_by_answer.get((method, status))
        if requests is None:  # labels() takes a lock and checks the values: once per method and code
            requests = self._api_requests_by_answer[(method, status)] = self.api_requests.labels(
                method, str(status)
            )
        requests.inc()
        if status == 409:
            self.api_conflicts.labels(_resource_of(path)).inc()

    def render(self) -> bytes:
        for refresh in self.before_scrape:
            refresh()
        return generate_latest(self.registry)


def _resource_of(path: str) -> str:
    """``/api/v1/namespaces/ns/pods/x/status`` -> ``pods/status``."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts:
        i = parts.index("namespaces")
        parts = parts[:i] + parts[i + 2 :] if len(parts) > i + 2 else parts[: i + 1]
    # parts now: api, v1, <resource>, [name], [sub]  or  apis, group, version, <resource>, ...
    rest = parts[2:] if parts and parts[0] == "api" else parts[3:]
    if not rest:
        return "unknown"
    return f"{rest[0]}/{rest[2]}" if len(rest) >= 3 else rest[0]


def listen_for_scrapes(address: str) -> socket.socket | None:
    """The listening socket of ``/metrics`` on ``host:port``; an empty address disables metrics.
    Bound at start-up, so that a port in use stops the operator before it schedules; the HTTP server
    on it (:func:`serve_metrics`) may start later: a scrape meanwhile waits in the backlog."""
    if not address:
        return None
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--metrics-bind-address {address!r}: expected host:port")
    family, _, _, _, sockaddr = socket.getaddrinfo(
        host or "0.0.0.0", int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return socket.create_server(sockaddr, family=family)


async def serve_metrics(metrics: Metrics, listening: socket.socket) -> web.AppRunner:
    """Serve ``/metrics`` on the socket of :func:`listen_for_scrapes`. Returns the runner to stop."""
    from aiohttp import web

    async def handle(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, listening).start()
    return runner
