"""Starvation benchmark: a stream of short pods keeps every node full while large gangs arrive.

    python bench/starvation.py                         # 8 nodes, 3 gangs of half the cluster, 3 modes
    python bench/starvation.py --modes on --seconds 20 --json

``--nodes`` nodes of 4 allocatable cpus are kept full by 1-cpu pods that run a uniform
``--run-min``..``--run-max`` seconds (``sim.lockstep.dev/run-seconds``, restartPolicy Never) and are
replaced as soon as they finish. Every ``--interval`` seconds a gang of ``--nodes / 2`` pods of 4 cpus
arrives (it needs half the nodes empty), runs ``--gang-seconds`` and finishes. Each mode runs on a fresh
simulated cluster with the operator in this process:

- ``off``: ``--no-reservation``, what lockstep did before (and kube-scheduler does);
- ``on``: reservation on, the small pods declare no deadline (so no backfill);
- ``backfill``: reservation on, the small pods declare ``activeDeadlineSeconds`` (their runtime rounded
  up, plus one second), so the ones that end in time may run on held capacity.

Reported per mode: the gangs' wait from creation to all members bound (p50 and max; a gang not bound
by the end counts as waiting the rest of the run, marked with ``>``), the small pods bound per
second, and utilization: the cpu requested by pods bound and not finished over the cluster's cpu,
sampled every 0.1 s, over the whole run and over the samples taken while a reservation was held.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lockstep import POD_GROUP_LABEL
from lockstep.config import load_settings
from lockstep.controller.runtime import OperatorThread, RuntimeOptions
from lockstep.kube.client import ConnectionInfo
from lockstep.logging import configure_logging
from lockstep.sim.cluster import NodeShape, SimCluster
from lockstep.sim.watching import ApiError, KubeHttp
from lockstep.sim.workload import RUN_SECONDS

NAMESPACE = "starve"
NODE_CPUS = 4
MODES = ("off", "on", "backfill")
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PODGROUPS = f"/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/podgroups"


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def deadline_for(run_seconds: float) -> int:
    """activeDeadlineSeconds a small pod declares in the backfill mode: its runtime with a margin."""
    return math.ceil(run_seconds) + 1


@dataclass
class Samples:
    """Utilization samples: (used cpus / cluster cpus, whether a reservation was held)."""

    points: list[tuple[float, bool]] = field(default_factory=list)

    def add(self, used: float, total: float, reserved: bool) -> None:
        self.points.append((used / total if total else 0.0, reserved))

    def mean(self, *, reserved_only: bool = False) -> float | None:
        chosen = [value for value, reserved in self.points if reserved or not reserved_only]
        return sum(chosen) / len(chosen) if chosen else None


@dataclass
class Gang:
    name: str
    created: float
    bound: float | None = None
    finished: bool = False


def summarize(
    mode: str, gangs: Sequence[Gang], small_bound: int, samples: Samples, end: float
) -> dict[str, Any]:
    waits = [(g.bound if g.bound is not None else end) - g.created for g in gangs]
    unbound = sum(1 for g in gangs if g.bound is None)
    seconds = end - min((g.created for g in gangs), default=end)
    reserved = samples.mean(reserved_only=True)
    return {
        "mode": mode,
        "gangs": len(gangs),
        "gangs_bound": len(gangs) - unbound,
        "gang_wait_p50_s": round(percentile(waits, 0.5), 2),
        "gang_wait_max_s": round(max(waits, default=0.0), 2),
        "gang_wait_censored": unbound > 0,  # some gang never bound: its wait is at least this
        "small_pods_per_s": round(small_bound / seconds, 2) if seconds > 0 else 0.0,
        "utilization": round(samples.mean() or 0.0, 3),
        "utilization_while_reserved": round(reserved, 3) if reserved is not None else None,
    }


def small_pod(name: str, run: float, deadline: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "lockstep",
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "metadata": {"name": name, "labels": {"app": "small"}, "annotations": {RUN_SECONDS: f"{run:.2f}"}},
        "spec": spec,
    }


async def create_gang(http: KubeHttp, name: str, size: int, run: float) -> None:
    await http.create(
        PODGROUPS,
        {
            "apiVersion": "scheduling.lockstep.dev/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
        },
    )
    for i in range(size):
        await http.create(
            PODS,
            {
                "metadata": {
                    "name": f"{name}-{i}",
                    "labels": {POD_GROUP_LABEL: name},
                    "annotations": {RUN_SECONDS: f"{run:.2f}"},
                },
                "spec": {
                    "schedulerName": "lockstep",
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": str(NODE_CPUS)}},
                        }
                    ],
                },
            },
        )


async def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    shape = NodeShape(cpu_millis=NODE_CPUS * 1000 + 500, reserved_cpu_millis=500)
    cluster = SimCluster(
        nodes=args.nodes, devices_per_node=0, shape=shape, kubelet_start_delay=0.05, kubelet_delete_delay=0.05
    )
    url = await cluster.start()
    operator: OperatorThread | None = None
    rng = random.Random(args.seed)
    try:
        http = cluster.http
        await http.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        settings = load_settings(
            leader_elect=False,
            metrics_bind_address="127.0.0.1:0",
            health_bind_address="127.0.0.1:0",
            log_format="json",
            log_level="warning",
            reservation=mode != "off",
            reservation_delay_seconds=args.reservation_delay,
        )
        operator = OperatorThread(
            settings, connection=ConnectionInfo(server=url, insecure=True), options=RuntimeOptions()
        )
        await asyncio.to_thread(operator.start)
        names = iter(range(10**9))
        want = args.nodes * NODE_CPUS
        total_cpus = float(want)
        gangs: list[Gang] = []
        samples = Samples()
        small_bound = 0
        seen_bound: set[str] = set()
        start = time.monotonic()
        next_gang = start + args.warmup
        end = start + args.warmup + args.seconds
        while time.monotonic() < end:
            now = time.monotonic()
            items = (await http.get(PODS)).get("items") or []
            live = 0
            used = 0.0
            bound_in: dict[str, int] = {}
            for pod in items:
                meta, phase = pod["metadata"], (pod.get("status") or {}).get("phase")
                group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
                node = (pod.get("spec") or {}).get("nodeName")
                if phase in ("Succeeded", "Failed"):
                    with contextlib.suppress(ApiError):  # gone already
                        await http.delete(f"{PODS}/{meta['name']}")
                    continue
                if meta.get("deletionTimestamp"):
                    continue
                cpus = NODE_CPUS if group else 1
                if node:
                    used += cpus
                    if group:
                        bound_in[group] = bound_in.get(group, 0) + 1
                    elif meta["name"] not in seen_bound and now >= start + args.warmup:
                        seen_bound.add(meta["name"])
                        small_bound += 1
                if not group:
                    live += 1
            reserved = False
            if mode != "off":
                groups = (await http.get(PODGROUPS)).get("items") or []
                reserved = any((g.get("status") or {}).get("reservation") for g in groups)
            if now >= start + args.warmup:
                samples.add(used, total_cpus, reserved)
            for gang in gangs:
                if gang.bound is None and bound_in.get(gang.name, 0) >= args.nodes // 2:
                    gang.bound = now
            for _ in range(want - live):
                run = rng.uniform(args.run_min, args.run_max)
                deadline = deadline_for(run) if mode == "backfill" else None
                await http.create(PODS, small_pod(f"small-{next(names)}", run, deadline))
            if now >= next_gang:
                gang = Gang(f"big-{len(gangs)}", now)
                gangs.append(gang)
                await create_gang(http, gang.name, args.nodes // 2, args.gang_seconds)
                next_gang = now + args.interval
            await asyncio.sleep(0.1)
        return summarize(mode, gangs, small_bound, samples, time.monotonic())
    finally:
        if operator is not None:
            await asyncio.to_thread(operator.stop, 15)
        await cluster.stop()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=8, help="nodes of 4 cpus (gangs take half of them)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per mode")
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="seconds of small pods before the first gang"
    )
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between gangs")
    parser.add_argument("--gang-seconds", type=float, default=3.0, help="how long a gang runs once bound")
    parser.add_argument("--run-min", type=float, default=0.5, help="shortest small-pod runtime (s)")
    parser.add_argument("--run-max", type=float, default=8.0, help="longest small-pod runtime (s)")
    parser.add_argument("--reservation-delay", type=float, default=1.0, help="--reservation-delay-seconds")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: off, on, backfill")
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--json", action="store_true", help="print one line of JSON per mode only")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or args.nodes < 2:
        print(f"--modes: one of {', '.join(MODES)}; --nodes at least 2", file=sys.stderr)
        return 2
    configure_logging("json", "warning")
    results = [asyncio.run(run_mode(mode, args)) for mode in modes]
    for result in results:
        if args.json:
            print(json.dumps(result))
        else:
            print("  ".join(f"{key}={value}" for key, value in result.items()))
    by_mode = {r["mode"]: r for r in results}
    if "off" in by_mode and "backfill" in by_mode and by_mode["backfill"]["utilization_while_reserved"]:
        ratio = by_mode["backfill"]["utilization_while_reserved"] / max(by_mode["off"]["utilization"], 1e-9)
        print(f"utilization while reserved (backfill) / utilization without reservations: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
