"""Figures of one measured phase, their aggregation over runs, JSON output and the README table.

Everything here is plain arithmetic on what the load generator and the completion watcher recorded,
so it is unit-tested without a server.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
CLAIM_STATUS_WRITES = frozenset({"patch resourceclaims/status", "update resourceclaims/status"})
TIMELINE_POINTS = 400


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    lower = math.floor(position)
    upper = math.ceil(position)
    if lower == upper:
        return ordered[lower]
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


@dataclass
class PodTimes:
    """When the load generator saw the create answered and when the watcher first saw spec.nodeName."""

    gang: str
    created_at: float | None = None
    bound_at: float | None = None


def gang_latencies(pods: Mapping[str, PodTimes]) -> list[float]:
    """Per complete gang: all members bound minus last member created. Gangs with an unbound member skip."""
    last_created: dict[str, float] = {}
    last_bound: dict[str, float] = {}
    incomplete: set[str] = set()
    for times in pods.values():
        if times.created_at is None or times.bound_at is None:
            incomplete.add(times.gang)
            continue
        last_created[times.gang] = max(last_created.get(times.gang, times.created_at), times.created_at)
        last_bound[times.gang] = max(last_bound.get(times.gang, times.bound_at), times.bound_at)
    return [last_bound[g] - last_created[g] for g in last_created if g not in incomplete]


def gang_bind_spreads(pods: Mapping[str, PodTimes]) -> list[float]:
    """Per complete gang: its last member's bind minus its first member's bind (as the watch saw them).

    A gang that sits partly bound holds nodes while the rest of it waits; kube-scheduler's worst gang
    on the real control plane spread over 0.12 s."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    incomplete: set[str] = set()
    for times in pods.values():
        if times.bound_at is None:
            incomplete.add(times.gang)
            continue
        first[times.gang] = min(first.get(times.gang, times.bound_at), times.bound_at)
        last[times.gang] = max(last.get(times.gang, times.bound_at), times.bound_at)
    return [last[g] - first[g] for g in first if g not in incomplete]


def status_lags(pods: Mapping[str, PodTimes], status_at: Mapping[str, float]) -> list[float]:
    """Per complete gang whose PodGroup status came to count every member scheduled: that moment
    minus its last member's bind (as the watches saw them; a status seen first counts as 0)."""
    last: dict[str, float] = {}
    incomplete: set[str] = set()
    for times in pods.values():
        if times.bound_at is None:
            incomplete.add(times.gang)
            continue
        last[times.gang] = max(last.get(times.gang, times.bound_at), times.bound_at)
    return [
        max(status_at[g] - bound, 0.0) for g, bound in last.items() if g not in incomplete and g in status_at
    ]


def spread_summary(spreads: Sequence[float]) -> dict[str, float | int]:
    """p50, p99 and max of the gang bind spreads, and how many gangs spread over one second."""
    if not spreads:
        return {"gangs": 0, "p50": 0.0, "p99": 0.0, "max": 0.0, "over_1s": 0}
    return {
        "gangs": len(spreads),
        "p50": round(percentile(spreads, 50), 4),
        "p99": round(percentile(spreads, 99), 4),
        "max": round(max(spreads), 4),
        "over_1s": sum(1 for s in spreads if s > 1.0),
    }


def bound_timeline(
    bound_at: Iterable[float], origin: float, points: int = TIMELINE_POINTS
) -> list[list[float]]:
    """Cumulative pods bound over time as at most ``points`` [seconds since origin, count] pairs."""
    times = sorted(t - origin for t in bound_at)
    if not times:
        return []
    step = max(1, math.ceil(len(times) / points))
    timeline = [[round(times[i], 4), i + 1] for i in range(step - 1, len(times), step)]
    if timeline[-1][1] != len(times):
        timeline.append([round(times[-1], 4), len(times)])
    return [[0.0, 0], *timeline]


def bound_per_second(bound_at: Iterable[float], origin: float) -> list[int]:
    """Cumulative pods bound at the end of each whole second since ``origin`` (the first create): a
    scheduler whose bindings wait behind other writes shows a flat start."""
    times = sorted(t - origin for t in bound_at)
    if not times:
        return []
    curve: list[int] = []
    index = 0
    for second in range(1, math.ceil(times[-1]) + 1):
        while index < len(times) and times[index] <= second:
            index += 1
        curve.append(index)
    return curve


def server_minus_own(
    before: Mapping[str, int], after: Mapping[str, int], own: Mapping[str, int]
) -> dict[str, int]:
    """Requests the server counted during a phase that the benchmark did not send itself.

    Keys are "verb resource[/subresource]" as the emulator's ``/__sim/stats`` names them.
    """
    counts: dict[str, int] = {}
    for key in sorted(set(before) | set(after) | set(own)):
        server = after.get(key, 0) - before.get(key, 0)
        delta = server - own.get(key, 0)
        if delta < 0:
            raise ValueError(
                f"server counted fewer '{key}' requests ({server}) than the benchmark sent "
                f"({own.get(key, 0)}): the stats are not from this server"
            )
        if delta:
            counts[key] = delta
    return counts


def operator_requests(phase: Mapping[str, int], emulator: Mapping[str, int]) -> dict[str, int]:
    """The scheduler's requests: a phase's traffic less the emulator's own controllers' (kubelets,
    resourceclaim controller), measured by the ceiling phase of the same workload, where nobody else
    talks to the server."""
    return {
        key: phase[key] - emulator.get(key, 0) for key in sorted(phase) if phase[key] > emulator.get(key, 0)
    }


def per_pod_by_verb(counts: Mapping[str, int], pods: int) -> dict[str, float]:
    if pods <= 0:
        raise ValueError(f"requests per pod needs at least one pod, got {pods}")
    by_verb: Counter[str] = Counter()
    for key, count in counts.items():
        by_verb[key.partition(" ")[0]] += count
    return {verb: round(count / pods, 4) for verb, count in sorted(by_verb.items())}


def writes_per_pod(by_verb: Mapping[str, float]) -> float:
    return round(sum(v for verb, v in by_verb.items() if verb in WRITE_VERBS), 4)


@dataclass
class PhaseResult:
    """One measured phase: lockstep scheduling a workload, the ceiling client, or a baseline subset."""

    phase: str
    pods_expected: int
    pods_bound: int
    seconds: float
    create_seconds: float
    pods_per_second: float
    gang_latency_p50: float | None
    gang_latency_p99: float | None
    gangs_complete: int
    server_requests: dict[str, int] = field(default_factory=dict)
    operator_requests: dict[str, int] = field(default_factory=dict)
    requests_per_pod: dict[str, float] = field(default_factory=dict)
    operator_requests_by_method: dict[str, float] = field(default_factory=dict)
    writes_per_pod: float | None = None
    unexpected_bound: int = 0
    operator_rss_peak_mb: float | None = None
    operator_cpu_seconds: float | None = None
    load_average: float | None = None
    timeline: list[list[float]] = field(default_factory=list)
    bound_per_second: list[int] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def summarize_phase(
    phase: str,
    pods: Mapping[str, PodTimes],
    expected: Iterable[str],
    start: float,
    create_seconds: float,
) -> PhaseResult:
    """Throughput and latency of the pods in ``expected``, timed from ``start`` to the last bind.

    ``start`` is the first create in every phase, so a scheduler that keeps up with the load generator
    is limited by creation, like scheduler_perf; the ceiling binds each gang as soon as it exists.
    """
    expected_names = set(expected)
    measured = {name: pods[name] for name in expected_names if name in pods}
    bound = [t.bound_at for t in measured.values() if t.bound_at is not None]
    unexpected = sum(1 for name, t in pods.items() if name not in expected_names and t.bound_at is not None)
    end = max(bound) if bound else start
    seconds = end - start
    latencies = gang_latencies(measured)
    spreads = spread_summary(gang_bind_spreads(measured))
    return PhaseResult(
        phase=phase,
        pods_expected=len(expected_names),
        pods_bound=len(bound),
        seconds=round(seconds, 4),
        create_seconds=round(create_seconds, 4),
        pods_per_second=round(len(bound) / seconds, 2) if seconds > 0 else 0.0,
        gang_latency_p50=round(percentile(latencies, 50), 4) if latencies else None,
        gang_latency_p99=round(percentile(latencies, 99), 4) if latencies else None,
        gangs_complete=len(latencies),
        unexpected_bound=unexpected,
        timeline=bound_timeline(bound, start),
        bound_per_second=bound_per_second(bound, start),
        extra={"gang_spread_p99": float(spreads["p99"]), "gangs_spread_over_1s": float(spreads["over_1s"])},
    )


@dataclass
class WorkloadRun:
    workload: str
    run: int
    scale: float
    phases: dict[str, PhaseResult]
    started: str
    machine: dict[str, Any] = field(default_factory=dict)

    def attribute_requests(self) -> None:
        """Fill the lockstep phases' operator requests: their traffic less the ceiling phase's.

        Writes per pod come from the operator's own counters when it reported them (exact); the
        server-side attribution is the fallback, and misses where the emulator's controllers do more
        in a lockstep phase than in the ceiling (kubelets start pods only once their claims are
        allocated, which the ceiling never does)."""
        ceiling = self.phases.get("ceiling")
        if ceiling is None:
            return
        for name, phase in self.phases.items():
            if name == "ceiling" or not phase.pods_bound:
                continue
            phase.operator_requests = operator_requests(phase.server_requests, ceiling.server_requests)
            phase.requests_per_pod = per_pod_by_verb(phase.operator_requests, phase.pods_bound)
            if phase.writes_per_pod is None:
                phase.writes_per_pod = writes_per_pod(phase.requests_per_pod)
            phase.extra["claim_status_writes"] = float(
                sum(n for key, n in phase.operator_requests.items() if key in CLAIM_STATUS_WRITES)
            )

    @property
    def ceiling_ratio(self) -> float | None:
        lockstep = self.phases.get("lockstep")
        ceiling = self.phases.get("ceiling")
        if lockstep is None or ceiling is None or ceiling.pods_per_second <= 0:
            return None
        return round(lockstep.pods_per_second / ceiling.pods_per_second, 3)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "run": self.run,
            "scale": self.scale,
            "started": self.started,
            "machine": self.machine,
            "ceiling_ratio": self.ceiling_ratio,
            "phases": {name: asdict(phase) for name, phase in self.phases.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkloadRun:
        return cls(
            workload=data["workload"],
            run=data["run"],
            scale=data["scale"],
            started=data["started"],
            machine=dict(data.get("machine", {})),
            phases={name: PhaseResult(**phase) for name, phase in data["phases"].items()},
        )


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


@dataclass
class WorkloadSummary:
    """Medians over the runs of one workload; ``runs`` says how many there were."""

    workload: str
    runs: int
    scale: float
    pods_per_second: float | None
    ceiling_pods_per_second: float | None
    ceiling_ratio: float | None
    gang_latency_p50: float | None
    gang_latency_p99: float | None
    writes_per_pod: float | None
    requests_per_pod: dict[str, float]
    operator_rss_peak_mb: float | None
    operator_cpu_seconds: float | None
    pods_bound: int
    pods_expected: int
    load_average: float | None
    seconds: float | None = None
    create_seconds: float | None = None
    operator_cpu_ms_per_pod: float | None = None
    baseline_pods_per_second: float | None = None
    extra: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def baseline_ratio(self) -> float | None:
        if self.pods_per_second is None or not self.baseline_pods_per_second:
            return None
        return round(self.pods_per_second / self.baseline_pods_per_second, 3)


def summarize_runs(runs: Sequence[WorkloadRun]) -> WorkloadSummary:
    if not runs:
        raise ValueError("no runs to summarize")
    names = {r.workload for r in runs}
    if len(names) != 1:
        raise ValueError(f"runs of different workloads cannot be summarized together: {sorted(names)}")
    lockstep = [r.phases["lockstep"] for r in runs if "lockstep" in r.phases]
    ceiling = [r.phases["ceiling"] for r in runs if "ceiling" in r.phases]
    baseline = [r.phases["baseline"] for r in runs if "baseline" in r.phases]
    verbs = sorted({verb for p in lockstep for verb in p.requests_per_pod})
    extra_keys = sorted({key for p in lockstep for key in p.extra})
    return WorkloadSummary(
        workload=runs[0].workload,
        runs=len(runs),
        scale=runs[0].scale,
        pods_per_second=_median(p.pods_per_second for p in lockstep),
        ceiling_pods_per_second=_median(p.pods_per_second for p in ceiling),
        ceiling_ratio=_median(r.ceiling_ratio for r in runs),
        gang_latency_p50=_median(p.gang_latency_p50 for p in lockstep),
        gang_latency_p99=_median(p.gang_latency_p99 for p in lockstep),
        writes_per_pod=_median(p.writes_per_pod for p in lockstep),
        requests_per_pod={
            verb: _median(p.requests_per_pod.get(verb, 0.0) for p in lockstep) or 0.0 for verb in verbs
        },
        operator_rss_peak_mb=_median(p.operator_rss_peak_mb for p in lockstep),
        operator_cpu_seconds=_median(p.operator_cpu_seconds for p in lockstep),
        pods_bound=min((p.pods_bound for p in lockstep), default=0),
        pods_expected=max((p.pods_expected for p in lockstep), default=0),
        load_average=_median(p.load_average for p in lockstep),
        seconds=_median(p.seconds for p in lockstep),
        create_seconds=_median(p.create_seconds for p in lockstep),
        operator_cpu_ms_per_pod=_median(
            p.operator_cpu_seconds * 1000 / p.pods_bound
            for p in lockstep
            if p.operator_cpu_seconds is not None and p.pods_bound
        ),
        baseline_pods_per_second=_median(p.pods_per_second for p in baseline),
        extra={key: _median(p.extra.get(key) for p in lockstep) or 0.0 for key in extra_keys},
        notes=sorted({note for p in lockstep for note in p.notes}),
    )


def _cell(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _latency(p50: float | None, p99: float | None) -> str:
    if p50 is None or p99 is None:
        return "-"
    return f"{p50 * 1000:,.0f} / {p99 * 1000:,.0f}"


def _spread(s: WorkloadSummary) -> str:
    p99 = s.extra.get("gang_spread_p99")
    if p99 is None:
        return "-"
    return f"{p99 * 1000:,.0f}, {s.extra.get('gangs_spread_over_1s', 0):.0f}"


def markdown_table(summaries: Sequence[WorkloadSummary]) -> str:
    """The README table: one row per workload, medians over ``runs``."""
    header = (
        "| workload | runs | bound | pods/s | creates took (s) | ceiling pods/s | ratio "
        "| gang latency p50 / p99 (ms) | gang bind spread p99 (ms), gangs > 1 s | writes/pod "
        "| requests/pod by verb | operator RSS (MB) "
        "| operator CPU s (ms/pod) | emulator CPU (s) | load avg |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for s in summaries:
        verbs = ", ".join(f"{verb} {value:.2f}" for verb, value in s.requests_per_pod.items()) or "-"
        rows.append(
            f"| {s.workload} | {s.runs} | {s.pods_bound:,}/{s.pods_expected:,} | {_cell(s.pods_per_second)} "
            f"| {_cell(s.create_seconds, 1)} | {_cell(s.ceiling_pods_per_second)} "
            f"| {_cell(s.ceiling_ratio, 2)} "
            f"| {_latency(s.gang_latency_p50, s.gang_latency_p99)} | {_spread(s)} "
            f"| {_cell(s.writes_per_pod, 2)} | {verbs} "
            f"| {_cell(s.operator_rss_peak_mb)} "
            f"| {_cell(s.operator_cpu_seconds, 1)} ({_cell(s.operator_cpu_ms_per_pod, 2)}) "
            f"| {_cell(s.extra.get('sim_cpu_seconds'), 1)} | {_cell(s.load_average, 2)} |"
        )
    return "\n".join([header, *rows])


@dataclass(frozen=True)
class Target:
    """A published target: ``figure`` of the summary compared with ``bound`` (">=" or "<=")."""

    label: str
    figure: str
    op: str
    bound: float


TARGETS: dict[str, tuple[Target, ...]] = {
    "basic": (
        Target("throughput", "pods_per_second", ">=", 500),
        Target("share of the ceiling", "ceiling_ratio", ">=", 0.5),
        Target("API writes per pod", "writes_per_pod", "<=", 1.1),
        Target("operator peak RSS (MB)", "operator_rss_peak_mb", "<=", 300),
        Target("gang bind spread p99 (s)", "gang_spread_p99", "<=", 0.2),
        Target("gangs bound over more than 1 s", "gangs_spread_over_1s", "<=", 0),
        Target("PodGroup status lag after the last bind, p99 (s)", "status_lag_p99", "<=", 0.5),
    ),
    "claim-template": (Target("throughput", "pods_per_second", ">=", 200),),
    "shared-claim": (
        Target("seconds to bind all", "seconds", "<=", 10),
        Target("claim status writes (one per gang: no retries)", "claim_status_writes", "<=", 1),
    ),
    "mixed": (Target("feasible gangs' throughput vs. alone", "baseline_ratio", ">=", 0.8),),
}


def check_targets(summary: WorkloadSummary) -> list[str]:
    """One line per target of the workload: met, MISSED, or not measured; then why pods did not bind."""
    lines = []
    complete = summary.pods_bound >= summary.pods_expected
    for target in TARGETS.get(summary.workload, ()):
        value = getattr(summary, target.figure, None)
        if value is None:
            value = summary.extra.get(target.figure)
        head = f"{target.label} {target.op} {target.bound:g}"
        if not summary.pods_bound:
            lines.append(f"{head}: not measured, no pod was bound (MISSED)")
        elif value is None:
            lines.append(f"{head}: not measured")
        elif target.figure == "seconds" and not complete:
            lines.append(f"{head}: not all pods were bound (MISSED)")
        else:
            met = value >= target.bound if target.op == ">=" else value <= target.bound
            lines.append(f"{head}: {value:g} ({'met' if met else 'MISSED'})")
    if not complete:
        lines.append(f"only {summary.pods_bound:,} of {summary.pods_expected:,} expected pods bound (MISSED)")
    if summary.notes:
        similar = f" (and {len(summary.notes) - 1} more)" if len(summary.notes) > 1 else ""
        lines.append(f"why: {summary.notes[0]}{similar}")
    return lines
