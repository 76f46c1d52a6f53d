"""One run of one workload: the ceiling phase, the lockstep phase and, for mixed, the baseline phase.

Each phase gets a fresh ``lockstep sim`` process; the lockstep phases also get a fresh ``lockstep run``
process. The figures of all phases come from the same invocation, so the ceiling ratio compares
measurements taken under the same machine load.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import platform
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from harness.api import ApiClient, ApiError, load_kubeconfig
from harness.loadgen import (
    PODGROUPS_PATH,
    CeilingBinder,
    CompletionWatcher,
    LoadGenerator,
    StatusWatcher,
    WatchFailed,
    churn,
    create_setup,
)
from harness.opmetrics import CONFLICTS, REQUESTS, Samples, delta, scrape, writes
from harness.procs import Child, ProcessFailed, start_operator, start_sim
from harness.profile import Profiler, report
from harness.results import (
    PhaseResult,
    WorkloadRun,
    percentile,
    server_minus_own,
    status_lags,
    summarize_phase,
)
from harness.tracker import Tracker
from harness.workloads import (
    POD_GROUP_LABEL,
    DeviceDriver,
    GangSpec,
    NodeShape,
    Workload,
    build,
    cluster_size,
    max_pods_per_node,
    pod_manifest,
    podgroup_manifest,
)
from lockstep.api.podgroup import CONDITION_SCHEDULED
from lockstep.api.quantity import to_milli, to_units
from lockstep.sim.controllers.dra_driver import DEVICE_CLASS_NAME, DEVICE_MODEL, DRIVER_NAME

log = structlog.get_logger("bench")

DRIVER = DeviceDriver(
    device_class=DEVICE_CLASS_NAME,
    selector=f'device.attributes["{DRIVER_NAME}"].model == "{DEVICE_MODEL}"',
)
# --no-kubelets: the emulator's kubelets take this long to start a bound pod, longer than any run (a
# real API server without kubelets, as the runs had).
NO_KUBELETS_POD_START_SECONDS = 86400.0
WARMUP_NAMESPACE = "bench-warmup"
WARMUP_TIMEOUT_SECONDS = 60.0
SETTLE_TIMEOUT_SECONDS = 60.0
QUIET_SECONDS = 3.0
QUIET_TIMEOUT_SECONDS = 30.0
PHASES = ("ceiling", "lockstep")


def phase_timeout(workload: Workload) -> float:
    """Generous: a scheduler slower than 25 pods/s on top of a minute has failed the benchmark anyway."""
    return 60.0 + workload.pods_total / 25


async def settle(tracker: Tracker) -> None:
    """Wait until the emulator's controllers are done with every pod, so both phases count all their
    writes and the difference between them is the operator's."""
    try:
        await asyncio.wait_for(tracker.settled.wait(), SETTLE_TIMEOUT_SECONDS)
    except TimeoutError:
        log.warning(
            "the emulator's controllers did not finish with every pod",
            waited=SETTLE_TIMEOUT_SECONDS,
            not_running=len(tracker.awaiting_running),
            without_claims=len(tracker.awaiting_claims),
        )


async def quiet_metrics(url: str) -> Samples:
    """The operator's metrics once its request counters stood still for ``QUIET_SECONDS`` (its status
    writer holds passing phases back for up to 2 s and flushes every 0.5 s), or after
    ``QUIET_TIMEOUT_SECONDS``."""
    deadline = time.monotonic() + QUIET_TIMEOUT_SECONDS
    samples = await scrape(url)
    while time.monotonic() < deadline:
        await asyncio.sleep(QUIET_SECONDS)
        later = await scrape(url)
        if delta(samples, later, REQUESTS, "method") == {}:
            return later
        samples = later
    log.warning("the operator kept sending requests after the phase", waited=QUIET_TIMEOUT_SECONDS)
    return samples


def node_shape(node: Mapping[str, Any]) -> NodeShape:
    name = node.get("metadata", {}).get("name", "?")
    allocatable = node.get("status", {}).get("allocatable") or {}
    try:
        return NodeShape(
            cpu_millis=to_milli(allocatable["cpu"]),
            memory_mib=to_units(allocatable["memory"]) // 2**20,
            pods=to_units(allocatable["pods"]),
        )
    except (KeyError, ValueError) as exc:
        raise ValueError(f"Node {name}: status.allocatable is not usable for the benchmark: {exc}") from None


def server_counts(stats: Mapping[str, Any]) -> dict[str, int]:
    """ "verb resource[/subresource]" -> requests, from the emulator's ``/__sim/stats``."""
    requests = stats.get("requests")
    if not isinstance(requests, Mapping):
        raise ValueError(f"/__sim/stats: expected a 'requests' mapping, got keys {sorted(stats)}")
    counts: dict[str, int] = {}
    for key, value in requests.items():
        verb, _, resource = str(key).partition(" ")
        if not verb or not resource or not isinstance(value, int):
            raise ValueError(f"/__sim/stats requests: cannot read entry {key!r}: {value!r}")
        counts[str(key)] = value
    return counts


async def warm_up(client: ApiClient, operator: Child) -> None:
    """Wait until the operator binds a one-pod gang, so its start-up is not part of the measurement."""
    gang = GangSpec("warmup", pods=1, min_count=1, cpu_millis=10)
    for path, body in (
        (
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WARMUP_NAMESPACE}},
        ),
        (
            f"/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{WARMUP_NAMESPACE}/podgroups",
            podgroup_manifest(gang, WARMUP_NAMESPACE),
        ),
        (
            f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods",
            pod_manifest(gang, 0, NodeShape(cpu_millis=1000, memory_mib=1024, pods=1), WARMUP_NAMESPACE),
        ),
    ):
        await client.create(path, body)
    deadline = time.monotonic() + WARMUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        operator.check_alive()
        pod = await client.get(f"/api/v1/namespaces/{WARMUP_NAMESPACE}/pods/warmup-0")
        if pod.get("spec", {}).get("nodeName"):
            return
        await asyncio.sleep(0.2)
    raise ProcessFailed(
        f"lockstep run did not bind the warm-up pod {WARMUP_NAMESPACE}/warmup-0 (label {POD_GROUP_LABEL}="
        f"warmup, minCount 1) within {WARMUP_TIMEOUT_SECONDS:.0f} s: the operator is not scheduling. "
        f"Its log is {operator.log}."
    )


async def measure(
    client: ApiClient,
    workload: Workload,
    shape: NodeShape,
    phase: str,
    sim: Child,
    operator: Child | None,
    node_names: list[str],
    profile_to: Path | None = None,
    kubelets: bool = True,
) -> PhaseResult:
    tracker = Tracker(workload.pods_expected, claims_allocated=operator is not None, kubelets=kubelets)
    watcher = CompletionWatcher(client, tracker)
    await watcher.start()
    status_watcher = StatusWatcher(client, tracker)
    await status_watcher.start()
    binder = CeilingBinder(client, node_names, workload.pods_expected) if operator is None else None
    generator = LoadGenerator(client, tracker, shape, binder)
    stats_before = server_counts(await client.admin("/__sim/stats"))
    sent_before = Counter(client.sent)
    usage_before = operator.usage() if operator is not None else None
    metrics_before = await scrape(operator.metrics_url) if operator and operator.metrics_url else None
    sim_usage_before = sim.usage()
    profilers: dict[str, Profiler] = {}
    if profile_to is not None:
        for child in (sim, operator):
            if child is not None:
                profilers[child.name] = Profiler(child.pid, child.log.with_suffix(".collapsed"))
    start = time.monotonic()
    timed_out = False
    try:
        load = generator.run(workload.gangs, workload.gangs_in_flight)
        creation = asyncio.create_task(load, name="bench-load")
        replaced = await churn(generator, workload, creation)
        await creation
        create_done = time.monotonic()
        if binder is not None:
            await binder.wait()
        tracker.creation_finished()
        deadline = start + phase_timeout(workload)
        while not tracker.complete.is_set():
            watcher.check()
            if operator is not None:
                operator.check_alive()
            if time.monotonic() > deadline:
                timed_out = True
                break
            try:
                await asyncio.wait_for(tracker.complete.wait(), 1.0)
            except TimeoutError:
                continue
        usage_after = operator.usage() if operator is not None else None
        sim_usage_after = sim.usage()
        for name, profiler in profilers.items():
            if profile_to is not None:
                with profile_to.open("a") as out:
                    out.write(report(profiler.stop(), f"{name}, {workload.name} {phase}") + "\n\n")
        await settle(tracker)
        # After settling and once the operator stopped writing, so PodGroup status writes held back
        # past the last binding, and Events still queued, are counted too.
        metrics_after = (
            await quiet_metrics(operator.metrics_url) if operator and operator.metrics_url else None
        )
    finally:
        for profiler in profilers.values():
            profiler.stop()
        await watcher.stop()
        await status_watcher.stop()
    stats_after = server_counts(await client.admin("/__sim/stats"))
    own = client.sent - sent_before
    result = summarize_phase(phase, tracker.pods, tracker.counted, start, create_done - start)
    result.pods_expected = workload.pods_expected
    result.server_requests = server_minus_own(stats_before, stats_after, own)
    if usage_before is not None and usage_after is not None:
        result.operator_cpu_seconds = round(usage_after.cpu_seconds - usage_before.cpu_seconds, 2)
        result.operator_rss_peak_mb = round(usage_after.rss_peak_mb, 1)
    result.load_average = round(os.getloadavg()[0], 2)
    result.extra |= {
        "watch_events": float(watcher.events),
        "gangs_replaced": float(replaced),
        "sim_cpu_seconds": round(sim_usage_after.cpu_seconds - sim_usage_before.cpu_seconds, 2),
        "sim_rss_peak_mb": round(sim_usage_after.rss_peak_mb, 1),
        "nodes": float(len(node_names)),
    }
    if usage_before is not None:
        # The operator's resident memory once it has listed the nodes and bound the warm-up pod, and
        # before any of the workload exists: its cost of the cluster's nodes.
        result.extra["operator_rss_start_mb"] = round(usage_before.rss_mb, 1)

    lags = status_lags(tracker.pods, tracker.status_at)
    if lags and operator is not None:
        # How long `kubectl get lpg` lagged behind the pods: the PodGroup status counting every member
        # scheduled, after the gang's last bind.
        result.extra["status_lag_p50"] = round(percentile(lags, 50), 4)
        result.extra["status_lag_p99"] = round(percentile(lags, 99), 4)
        result.extra["status_lag_over_0_5s"] = float(sum(1 for lag in lags if lag > 0.5))
    if tracker.claims_recorded_at:
        # How fast the emulator's resourceclaim controller made the pods' claims: a scheduler cannot
        # place a pod before its claim exists.
        claims_seconds = max(tracker.claims_recorded_at) - start
        result.extra["claims_made_per_second"] = round(len(tracker.claims_recorded_at) / claims_seconds, 2)
    if metrics_before is not None and metrics_after is not None:
        result.operator_requests_by_method = delta(metrics_before, metrics_after, REQUESTS, "method")
        for resource, count in delta(metrics_before, metrics_after, CONFLICTS, "resource").items():
            result.extra[f"conflicts {resource}"] = count
        if result.pods_bound:
            result.writes_per_pod = round(writes(result.operator_requests_by_method) / result.pods_bound, 4)
    if timed_out:
        result.extra["timed_out"] = 1.0
        result.notes = unscheduled_reasons(await client.get(PODGROUPS_PATH))
        log.warning(
            "phase timed out",
            workload=workload.name,
            phase=phase,
            bound=tracker.counted_bound,
            expected=workload.pods_expected,
            reasons=result.notes,
        )
    return result


def unscheduled_reasons(podgroups: Mapping[str, Any], limit: int = 3) -> list[str]:
    """The distinct PodGroupScheduled=False messages of a PodGroup list: why the phase did not finish."""
    messages: dict[str, int] = {}
    for group in podgroups.get("items", []):
        for condition in group.get("status", {}).get("conditions") or []:
            if condition.get("type") == CONDITION_SCHEDULED and condition.get("status") == "False":
                text = f"{condition.get('reason', '')}: {condition.get('message', '')}"
                messages[text] = messages.get(text, 0) + 1
    ranked = sorted(messages.items(), key=lambda item: -item[1])[:limit]
    return [f"{count} PodGroup(s) {text}" for text, count in ranked]


async def run_phase(
    name: str,
    scale: float,
    phase: str,
    workdir: Path,
    profile_to: Path | None = None,
    kubelets: bool = True,
) -> PhaseResult:
    nodes, devices = cluster_size(name, scale)
    phase_dir = workdir / phase
    phase_dir.mkdir(parents=True, exist_ok=True)
    extra = () if kubelets else ("--pod-start-seconds", str(NO_KUBELETS_POD_START_SECONDS))
    sim = await start_sim(
        nodes, devices, phase_dir, max_pods=max_pods_per_node(name, scale), extra_args=extra
    )
    operator: Child | None = None
    try:
        async with ApiClient(load_kubeconfig(phase_dir / "kubeconfig")) as client:
            listing = await client.get("/api/v1/nodes")
            node_list = listing.get("items", [])
            shape = node_shape(node_list[0])
            workload = build(name, scale, shape, DRIVER)
            if phase == "baseline":
                workload = workload.counted_alone()
            await create_setup(client, workload)
            if phase != "ceiling":
                operator = start_operator(phase_dir / "kubeconfig", phase_dir)
                await warm_up(client, operator)
            node_names = sorted(n["metadata"]["name"] for n in node_list)
            log.info("measuring", workload=name, phase=phase, pods=workload.pods_total, nodes=nodes)
            return await measure(
                client, workload, shape, phase, sim, operator, node_names, profile_to, kubelets
            )
    finally:
        if operator is not None:
            operator.stop()
        sim.stop()


def source_commit() -> str:
    """The commit the measured code is at, marked "+dirty" when the tree has uncommitted changes."""
    repo = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--", "operator"], check=False
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty.returncode else "")


def machine_info() -> dict[str, Any]:
    return {
        "commit": source_commit(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": round(os.getloadavg()[0], 2),
    }


async def run_workload(
    name: str,
    scale: float,
    run: int,
    workdir: Path,
    profile_dir: Path | None = None,
    kubelets: bool = True,
) -> WorkloadRun:
    """All phases of one run; with ``profile_dir``, py-spy's top frames of the operator and the
    emulator per phase go to ``profile_dir/profile-<workload>-run<n>.txt``."""
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    machine = machine_info()
    probe = build(name, scale, NodeShape(cpu_millis=1000, memory_mib=1024, pods=110), DRIVER)
    phases = (*PHASES, "baseline") if probe.baseline else PHASES
    results: dict[str, PhaseResult] = {}
    for phase in phases:
        try:
            profile_to = profile_dir / f"profile-{name}-run{run}.txt" if profile_dir is not None else None
            results[phase] = await run_phase(
                name, scale, phase, workdir / f"{name}-run{run}", profile_to, kubelets
            )
        except (ApiError, ProcessFailed, ValueError, WatchFailed) as exc:
            raise ProcessFailed(f"workload {name}, phase {phase}: {exc}") from exc
    outcome = WorkloadRun(
        workload=name, run=run, scale=scale, phases=results, started=started, machine=machine
    )
    outcome.attribute_requests()
    return outcome
